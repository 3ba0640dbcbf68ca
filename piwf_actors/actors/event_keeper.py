"""`EventKeeper`: starts the runs that events start (`on_event` workflows, with or without `batch`).

The active host runs one keeper (started by the host's wiring beside the schedule keeper). It owns:

- the subscriptions: the workflows with `on_event` in the host's workflow directories
  (`workflows.event_discovery`), loaded on a user-code thread when the keeper starts and whenever a
  file's stamp changes, recorded with `event.subscriptions` (a new one starts at the newest event);
- the deliveries: on each tick, for each subscription, the events of its name after its cursor (at
  most `page` of them), decided on a user-code thread — the workflow's filter, input and batch key
  functions are its code, bounded in time, never run on a door's thread or in the writer — and
  applied by one `event.deliver` command that moves the cursor past them in the same transaction;
- the batches whose `max_wait_s` passed (`event.batches_due`).

At most one command is in flight: the next tick waits for the writer's answer. A keeper that dies (its
host killed) between deciding and the commit decides again; the run ids derive from the events, and
the cursor fence refuses a stale command, so no event starts a subscriber twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import PollingActor, safe_tell
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.errors import PiwfError
from piwf_actors.protocol.catalog.runs import start_run_command
from piwf_actors.store.event_queries import due_batches, events_after, subscription_cursors
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand, WriteResult
from piwf_actors.workflows.event_discovery import Subscription, SubscriptionSet, load_subscriptions
from piwf_actors.workflows.events import batch_input, route_event
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.schedule_discovery import directory_stamps, schedule_dirs

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EventTick:
    pass


@dataclass(frozen=True, slots=True)
class SubscriptionsLoaded:
    """A load of the workflow files ended (told by the user-code thread that ran it)."""

    stamps: Any
    found: SubscriptionSet | None
    error: str | None


def _one_line(exc: BaseException) -> str:
    text = exc.one_line() if isinstance(exc, PiwfError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:500]


class EventKeeper(PollingActor):
    actor_name = "events"

    def __init__(self, writer: WriterHandle, db_path: Path, *, projects: tuple[str, ...] | list[str] = (),
                 supervisor: pykka.ActorRef[Any] | None = None, resolver: WorkflowResolver | None = None,
                 clock: Callable[[], float] = time.time, tick_s: float = 0.2, reload_every_s: float = 1.0,
                 page: int = 500) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._db_path = db_path
        self._dirs = schedule_dirs(projects)
        self._resolver = resolver if resolver is not None else WorkflowResolver()
        self._clock = clock
        self._tick_s = tick_s
        self._reload_every_s = reload_every_s
        self._page = page
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._found = SubscriptionSet({})
        self._stamps: Any = None
        self._loading = False
        self._synced: dict[str, str] = {}  # name → digest recorded with event.subscriptions
        self._pending_sync: dict[str, str] = {}  # what the event.subscriptions in flight records
        self._last_reload_check = 0.0
        self._in_flight = 0

    def on_start(self) -> None:
        """Runs in the keeper's thread: reader, the first load (started, not waited for), ticker."""
        self._reader = StoreReader(self._db_path)
        self._reload(self._clock())
        self._ticker = Ticker(self.actor_ref, EventTick(), self._tick_s, "events").start()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {EventTick: self._tick, WriteResult: self._written, SubscriptionsLoaded: self._loaded}

    # --- subscriptions ------------------------------------------------------------------------

    def _reload(self, now: float) -> None:
        self._last_reload_check = now
        if self._loading:
            return
        stamps = directory_stamps(self._dirs)
        if stamps == self._stamps:
            return
        projects = [project for project, _ in self._dirs if project is not None]
        ref = self.actor_ref
        self._loading = True

        def done(found: SubscriptionSet | None, error: BaseException | None) -> None:
            """Runs on the user-code thread, on its watcher (the limit ran out) or here (refused at once)."""
            safe_tell(ref, SubscriptionsLoaded(stamps, found, None if error is None else _one_line(error)))

        self._resolver.user_code.submit(lambda: load_subscriptions(projects), done)

    def _loaded(self, message: SubscriptionsLoaded) -> None:
        self._loading = False
        if message.found is None:
            log.warning("event subscriptions not loaded: %s", message.error)
            return
        before = set(self._found.subscriptions)
        self._found, self._stamps = message.found, message.stamps
        for failure in message.found.failures:
            log.warning("event subscriptions: %s", failure.error)
        if before != set(message.found.subscriptions):
            log.info("event subscriptions: %s", ", ".join(
                f"{name} on {item.event_name}" for name, item in sorted(message.found.subscriptions.items()))
                or "none")

    # --- ticks ---------------------------------------------------------------------------------

    def _tick(self, _message: EventTick) -> None:
        now = self._clock()
        if now - self._last_reload_check >= self._reload_every_s:
            self._reload(now)
        subscriptions = self._found.subscriptions
        if self._in_flight or not subscriptions or self._reader is None:
            return
        wanted = {name: item.digest for name, item in subscriptions.items()}
        if any(self._synced.get(name) != digest for name, digest in wanted.items()):
            self._submit(WriteCommand("event.subscriptions", {"subscriptions": [
                {"name": name, "event_name": item.event_name, "summary": item.summary()}
                for name, item in sorted(subscriptions.items())]}, correlation_id="subscriptions"))
            self._pending_sync = wanted
            return
        cursors = subscription_cursors(self._reader)
        due = due_batches(self._reader, now) if any(item.workflow.batch for item in subscriptions.values()) else set()
        for name, item in sorted(subscriptions.items()):
            cursor = cursors.get(name)
            if cursor is None or cursor["event_name"] != item.event_name:
                self._synced.pop(name, None)  # recorded again on the next tick
                continue
            events = events_after(self._reader, item.event_name, cursor["cursor_seq"], self._page)
            if events:
                self._submit(self._deliver_command(item, cursor["cursor_seq"], events))
            elif name in due:
                template = self._template(item)
                if template is not None:
                    self._submit(WriteCommand("event.batches_due", {"subscription": name, "template": template},
                                              correlation_id=f"due:{name}"))

    def _submit(self, command: WriteCommand) -> None:
        self._in_flight += 1
        self._writer.submit(command, self.actor_ref)

    def _template(self, item: Subscription) -> dict[str, Any] | None:
        """A batch run's spec with an empty batch as input (the writer puts the batch's events in)."""
        try:
            command = self._resolver.user_code.call(lambda: start_run_command(
                self._resolver, workflow=item.workflow_spec, input=batch_input([], ""),
                project_path=item.project_path))
        except Exception as exc:
            log.warning("event subscription %s: its batch run cannot start: %s", item.name, _one_line(exc))
            return None
        if "spec" not in command.args:
            log.warning("event subscription %s: its batch run cannot start: %s", item.name,
                        (command.args.get("refusal") or {}).get("message"))
            return None
        return dict(command.args["spec"])

    def _deliver_command(self, item: Subscription, cursor: int, events: list[dict[str, Any]]) -> WriteCommand:
        """Decide each event for the subscription (its functions and the runs' specs on a user-code thread)."""
        batching = item.workflow.batch

        def decide() -> list[dict[str, Any]]:
            deliveries = []
            for event in events:
                view = {key: event[key] for key in ("event_id", "name", "key", "data", "emitted_at")}
                routed = route_event(item.name, item.workflow.on_event, batching, view)
                if routed.error is not None:
                    deliveries.append({"event_id": event["event_id"], "outcome": "failed", "error": routed.error})
                elif routed.filtered:
                    deliveries.append({"event_id": event["event_id"], "outcome": "filtered"})
                elif batching is not None:
                    deliveries.append({"event_id": event["event_id"], "outcome": "batched", "key": routed.key})
                else:
                    deliveries.append(self._started(item, event["event_id"], routed.input))
            return deliveries

        args: dict[str, Any] = {"subscription": item.name, "from_seq": cursor, "to_seq": events[-1]["seq"]}
        try:
            args["deliveries"] = self._resolver.user_code.call(decide)
        except Exception as exc:  # the time limit of the user-code thread: every event of the page failed
            error = _one_line(exc)
            log.warning("event subscription %s: %s", item.name, error)
            args["deliveries"] = [{"event_id": event["event_id"], "outcome": "failed", "error": error}
                                  for event in events]
        if batching is not None and any(d["outcome"] == "batched" for d in args["deliveries"]):
            template = self._template(item)
            if template is None:
                args["deliveries"] = [{**d, "outcome": "failed", "error": "the batch's workflow cannot start"}
                                      if d["outcome"] == "batched" else d for d in args["deliveries"]]
            else:
                args["batch"] = {"max_items": batching.max_items, "max_wait_s": batching.max_wait_s,
                                 "template": template}
        return WriteCommand("event.deliver", args, correlation_id=f"deliver:{item.name}")

    def _started(self, item: Subscription, event_id: str, run_input: Any) -> dict[str, Any]:
        try:
            command = start_run_command(self._resolver, workflow=item.workflow_spec, input=run_input,
                                        project_path=item.project_path)
        except Exception as exc:  # an input that is not JSON, a workflow that does not load
            return {"event_id": event_id, "outcome": "failed", "error": _one_line(exc)}
        if "spec" not in command.args:
            return {"event_id": event_id, "outcome": "failed",
                    "error": str((command.args.get("refusal") or {}).get("message"))[:500]}
        return {"event_id": event_id, "outcome": "started", "spec": command.args["spec"]}

    def _written(self, result: WriteResult) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        what = result.correlation_id or "write"
        if not result.ok:
            log.warning("event keeper: %s refused: %s", what, result.error)
            return
        if what == "subscriptions":
            self._synced = dict(self._pending_sync)
            return
        value = result.value or {}
        if value.get("started"):
            log.info("event keeper: %s started %d run(s)", what.split(":", 1)[-1], len(value["started"]))
