"""`RunEventsSubscription`: tells an application's actor what happens to runs, without polling.

`HostHandle.subscribe(actor_ref, runs=…)` starts one of these. It subscribes
to the writer's `ChangeNotice`s (told after every commit, naming the runs
that changed), reads the new events of those runs through its own read-only
`StoreReader` (after a per-run `seq` cursor) and tells the application's
actor typed notices (`piwf_actors.run_notices`): `RunStarted`, `NodeFinished`,
`RunParked`, `RunFinished`. The mapping from run event kinds is the pure
function `translate`.

What a subscriber is told:
- `runs=None` (every run): the events committed after `subscribe` was
  called, for every run.
- `runs=[ids]`: each named run's whole history first (so subscribing right
  after `start_run` misses nothing, and a run that already finished is
  reported finished), then its new events as they are committed.
- Per run, notices arrive in `seq` order, each once; `RunFinished` is the last.

It never blocks another actor: it only `tell`s (the writer, the subscriber,
itself). When the subscriber has stopped, the subscription stops quietly.
A read that fails (a locked or full disk) is logged and tried again on the
next commit. Its own failure stops only itself (it has no supervisor): the
host goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.event_follower import FINISHED_REMEMBERED, PAGE, RunEventFollower
from piwf_actors.actors.writer import Subscribe, Subscribed, Unsubscribe
from piwf_actors.paths import DatabaseLocation
from piwf_actors.results import RunError, RunEvent, RunView
from piwf_actors.run_notices import NodeFinished, RunFinished, RunNotice, RunParked, RunStarted
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice

log = logging.getLogger(__name__)

_STARTS = frozenset({"run_started", "run_resumed"})
_FINISHES = {"run_finished": "done", "run_failed": "failed", "run_cancelled": "cancelled"}


# --- the step function ------------------------------------------------------------------------------


def needs_view(events: Iterable[RunEvent], workflow_known: bool) -> bool:
    """Whether translating `events` needs the run's view (its workflow name, its error)."""
    return any(e.kind == "run_failed" or (e.kind in _STARTS and not workflow_known) for e in events)


def translate(run_id: str, event: RunEvent, workflow: str, error: RunError | None) -> RunNotice | None:
    """The notice a subscriber gets for `event` of run `run_id`, or None for events it is not told.

    `workflow` is the run's workflow name, `error` the run's error (used for
    `run_failed`). `run_resumed` counts only when a worker took the run up
    again (its payload has `steps`), not when a person put it back in the queue.
    """
    payload = event.payload if isinstance(event.payload, dict) else {}
    if event.kind == "run_started" or (event.kind == "run_resumed" and "steps" in payload):
        return RunStarted(run_id, workflow, event.seq, resumed=event.kind == "run_resumed")
    if event.kind in ("node_finished", "node_failed"):
        outcome = payload.get("outcome") or ("ok" if event.kind == "node_finished" else "failed")
        return NodeFinished(run_id, event.node_id or "", str(outcome), event.attempt_id, event.seq,
                            error=payload.get("error") if event.kind == "node_failed" else None)
    if event.kind == "run_parked":
        detail = payload.get("request_id") or payload.get("effect_id") or payload.get("detail")
        return RunParked(run_id, str(payload.get("reason") or "parked"), detail, event.seq)
    status = _FINISHES.get(event.kind)
    if status is not None:
        if status == "failed" and error is None:
            error = RunError(payload.get("error_code"), None)
        return RunFinished(run_id, status, error if status == "failed" else None, event.seq)
    return None


# --- the actor ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tracked:
    """Asked: how many runs the subscription keeps state for, as {"following": runs with a cursor,
    "named": runs whose workflow name it holds, "finished": runs remembered as finished}. The
    first two are bounded by the runs not yet finished, the last by FINISHED_REMEMBERED (or the
    runs named)."""


@dataclass(frozen=True, slots=True)
class _Flush:
    """Read the runs noticed since the last flush. Told to itself once per burst of notices, so
    many commits touching one run cost one read."""


class RunEventsSubscription(CoreActor):
    """One subscriber's view of run events (see the module docstring)."""

    actor_name = "run-events"

    def __init__(self, writer_ref: pykka.ActorRef[Any], database: DatabaseLocation, subscriber: pykka.ActorRef[Any], *,
                 runs: frozenset[str] | None, since: float) -> None:
        """Runs in the caller's thread: stores arguments only. `since`: with `runs=None`, events
        stamped before it are not told (they happened before the subscription)."""
        super().__init__(None)  # no supervisor: a subscription's failure is not the host's
        self._writer_ref = writer_ref
        self._database = database
        self._subscriber = subscriber
        self._runs = runs
        # Following every run: finished runs are remembered up to a bound (their later events, e.g.
        # `run_restarted`, tell a subscriber nothing); named runs are all remembered.
        self._follower = RunEventFollower(floor=float("-inf") if runs is not None else since,
                                          remembered=FINISHED_REMEMBERED if runs is None else None)
        self._reader: StoreReader | None = None
        self._workflows: dict[str, str] = {}
        self._closing = False

    def on_start(self) -> None:
        """Runs in the subscription's thread: opens its reader, subscribes, catches up on named runs."""
        self._reader = StoreReader(self._database)
        # The named runs are read once the writer says this subscription is registered: a run that
        # ends between a read made earlier and the registration would be told nothing of its end.
        safe_tell(self._writer_ref, Subscribe(self.actor_ref, ack=True))

    def _subscribed(self, _message: Subscribed) -> None:
        if self._runs:
            self._mark_dirty(sorted(self._runs))

    def release_resources(self) -> None:
        """Runs in the subscription's thread (on_stop, on_failure): unsubscribes, closes the reader."""
        safe_tell(self._writer_ref, Unsubscribe(self.actor_ref))
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {ChangeNotice: self._noticed, _Flush: self._flush, Tracked: self._tracked, Subscribed: self._subscribed}

    def _tracked(self, _message: Tracked) -> dict[str, int]:
        follower = self._follower
        return {"following": len(follower.cursors), "named": len(self._workflows), "finished": len(follower.finished)}

    def _noticed(self, notice: ChangeNotice) -> None:
        runs = notice.runs if self._runs is None else [r for r in notice.runs if r in self._runs]
        self._mark_dirty(runs)

    def _mark_dirty(self, runs: Iterable[str]) -> None:
        self._follower.notice(runs, lambda: safe_tell(self.actor_ref, _Flush()))

    def _flush(self, _message: _Flush) -> None:
        self._follower.flush(self._follow, what="run events", stop=lambda: self._closing)

    def _follow(self, run_id: str) -> None:
        """Tell the subscriber the events of `run_id` after its cursor, a page at a time."""
        assert self._reader is not None
        follower = self._follower
        while not self._closing and run_id not in follower.finished:
            page = [RunEvent.from_wire(row) for row in follower.page(self._reader, run_id)]
            if not page:
                return
            for event in page:  # the first event names the workflow: no view needed to say so
                if event.kind in _FINISHES and event.created_at < follower.floor:
                    # It ended before this subscription began: nothing of it is told, now or later.
                    # Remembered as finished (bounded), not by a cursor: a later event of it (a
                    # restart's note) would otherwise keep a cursor for every such run for ever.
                    self._finish(run_id, event.created_at)
                    return
                if event.kind == "run_created" and isinstance(event.payload, dict) and event.payload.get("workflow"):
                    self._workflows[run_id] = str(event.payload["workflow"])
            fresh = [event for event in page if event.created_at >= follower.floor]
            view = None
            if needs_view(fresh, run_id in self._workflows):
                raw = queries.run_view(self._reader, run_id)
                view = None if raw is None else RunView.from_wire(raw)
                if view is not None:
                    self._workflows[run_id] = view.workflow
            workflow = self._workflows.get(run_id, "")
            for event in fresh:
                notice = translate(run_id, event, workflow, view.error if view is not None else None)
                if notice is not None and not self._tell(notice):
                    return
                if isinstance(notice, RunFinished):
                    self._finish(run_id, event.created_at)
                    return
            follower.advance(run_id, page[-1].seq)
            if len(page) < PAGE:
                return

    def _tell(self, notice: RunNotice) -> bool:
        if safe_tell(self._subscriber, notice):
            return True
        log.info("subscriber %s has stopped; ending its run events subscription", self._subscriber)
        self._closing = True
        self.stop()
        return False

    def _finish(self, run_id: str, finished_at: float) -> None:
        """Remembered as finished; forgetting the oldest raises the floor to its end, so a later event
        of it (a restart's note) is not mistaken for a new run's history (`RunEventFollower.finish`)."""
        self._workflows.pop(run_id, None)
        self._follower.finish(run_id, finished_at)


class Subscription:
    """What `HostHandle.subscribe` returns: the handle of one run events subscription.

    The host owns the subscription: `host.stop()` ends it too. Calling
    `unsubscribe()` from an actor's handler is safe (the subscription never
    waits on anyone), but `block=False` avoids even the short wait.
    """

    def __init__(self, actor_ref: pykka.ActorRef[Any], runs: frozenset[str] | None) -> None:
        self.actor_ref = actor_ref
        self.runs = runs

    @property
    def active(self) -> bool:
        """False once unsubscribed, stopped with the host, or ended because its subscriber stopped."""
        return self.actor_ref.is_alive()

    def unsubscribe(self, *, block: bool = True, timeout: float | None = 10.0) -> None:
        """Stop telling the subscriber anything; safe to call twice."""
        try:
            self.actor_ref.stop(block=block, timeout=timeout)
        except (pykka.ActorDeadError, pykka.Timeout):
            pass

    def __repr__(self) -> str:
        runs = "all runs" if self.runs is None else ", ".join(sorted(self.runs))
        return f"<Subscription {'active' if self.active else 'ended'}: {runs}>"
