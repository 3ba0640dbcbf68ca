"""`ScheduleKeeper`: starts a run for every fire of the host's schedules.

The active host runs one keeper (started by the host's wiring after the
scheduler). It owns:

- the loaded definitions: the schedule files of `HostConfig.projects` and of
  the user's config directory (`workflows.schedule_discovery`), loaded when
  it starts and again whenever a file's stamp changes (polled every
  `reload_every_s` from its own ticker: one `stat` per file); each load runs
  on a user-code thread and comes back as `SchedulesLoaded`, so a file whose
  import blocks holds up neither the keeper nor the host's start, and a
  manual fire that comes before the first load ended is built after it;
- the fires: on each tick it reads the `schedule` rows (a small table),
  asks the pure `plan_tick` what to write, builds each fire's run spec
  (resolving the workflow and calling the input function, which is the
  user's code and may fail: such a fire is recorded with its error and no
  run) and submits one `schedule.fire` command per schedule to the writer.
  At most one round of commands is in flight: the next tick waits for the
  writer's answers.

Manual fires (`schedule.trigger`) come from the gateway as `TriggerSchedule`;
the keeper builds the command and submits it with the gateway as the one the
writer answers, so the gateway never waits on the keeper.

The clock is injected (`clock`), and the decisions are pure functions of
(definitions, rows, now): `plan_tick` here and `due_fires` in
`workflows.schedule_time`, tested without processes or threads.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import PollingActor, safe_tell
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.errors import NotFound, PiwfError, Rejected
from piwf_actors.protocol.catalog.runs import start_run_command
from piwf_actors.protocol.gateway_messages import TriggerSchedule
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand, WriteResult
from piwf_actors.store.schedule_queries import schedule_rows
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.schedule_discovery import (
    LoadedSchedule,
    ScheduleSet,
    directory_stamps,
    load_schedules,
    schedule_dirs,
)
from piwf_actors.workflows.schedule_time import Due, ScheduleState, due_fires, fire_key, fire_run_id
from piwf_actors.workflows.user_code import KEY, phase

log = logging.getLogger(__name__)

#: Said at start by a host given no project: it never looks in one (a plain `piwf-host` run from a project
#: directory does not pick up that project's schedules).
NO_PROJECT_HINT = "give --project DIR for a project's .piwf/workflows"


def where_found(dirs: Sequence[tuple[str | None, Path]], found: ScheduleSet) -> str:
    """Each directory the keeper looked in, with the schedules found there (the host's start line):
    `2 in /p/.piwf/workflows (a, b); none found in ~/.config/piwf/workflows`."""
    home = str(Path.home())
    parts = []
    for project, directory in dirs:
        shown = "~" + str(directory)[len(home):] if str(directory).startswith(home + "/") else str(directory)
        names = sorted(name for name, item in found.schedules.items() if item.project_path == project)
        failed = sum(1 for failure in found.failures if Path(failure.path).parent == directory)
        notes = [", ".join(names)] if names else []
        if failed:
            notes.append(f"{failed} file{'s' if failed > 1 else ''} failed to load, see piwf schedule list")
        detail = f" ({'; '.join(notes)})" if notes else ""
        parts.append(f"{len(names)} in {shown}{detail}" if names else f"none found in {shown}{detail}")
    hint = "" if any(project is not None for project, _ in dirs) else f" ({NO_PROJECT_HINT})"
    return "; ".join(parts) + hint



@dataclass(frozen=True, slots=True)
class KeeperTick:
    pass


@dataclass(frozen=True, slots=True)
class SchedulesLoaded:
    """A load of the schedule files ended (told by the user-code thread that ran it): what it found, or
    why it found nothing (one line), for the files as they were at `stamps`."""

    stamps: Any
    found: ScheduleSet | None
    error: str | None


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one tick writes: definitions to record first (`sync`), else each schedule's due fires."""

    sync: tuple[dict[str, Any], ...] = ()
    due: tuple[tuple[str, Due], ...] = ()


def summary(item: LoadedSchedule) -> dict[str, Any]:
    """What `schedule.list` shows of a definition (also stored, for schedules no longer loaded)."""
    schedule = item.schedule
    return {"workflow": schedule.workflow_name, "timing": schedule.timing.describe(), "cron": schedule.timing.cron,
            "every_s": schedule.timing.every_s, "timezone": schedule.timing.timezone, "catch_up": schedule.catch_up,
            "max_catch_up": schedule.max_catch_up, "description": schedule.description, "path": item.path,
            "attr": item.attr, "project_path": item.project_path}


def plan_tick(definitions: Mapping[str, LoadedSchedule], rows: Mapping[str, Mapping[str, Any]],
              online_since: float, now: float) -> TickPlan:
    """What the keeper writes at `now` (a pure function).

    A definition that has no row yet, whose digest or timing changed, or
    that has no cursor (just resumed) is recorded first with the first fire
    time after `now` (`schedule.sync` keeps a known cursor when the timing
    is unchanged); its fires are planned on a later tick. Every other
    unpaused schedule gets `due_fires` of its row.
    """
    sync: list[dict[str, Any]] = []
    due: list[tuple[str, Due]] = []
    for name, item in sorted(definitions.items()):
        row = rows.get(name)
        timing = item.schedule.timing
        if row is None or row["definition_digest"] != item.digest or row["timing_key"] != timing.key() or (
                row["next_fire_at"] is None and not row["paused"]):
            sync.append({"name": name, "digest": item.digest, "timing_key": timing.key(), "summary": summary(item),
                         "cursor": timing.next_after(now)})
            continue
        if row["paused"]:
            continue
        state = ScheduleState(timing, row["next_fire_at"], online_since, item.schedule.catch_up,
                              item.schedule.max_catch_up)
        decided = due_fires(state, now)
        if decided.fires or decided.skipped:
            due.append((name, decided))
    return TickPlan(tuple(sync), tuple(due))


def _one_line(text: str, limit: int = 500) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Loaded:
    schedules: ScheduleSet = field(default_factory=lambda: ScheduleSet({}))
    stamps: Any = None


class ScheduleKeeper(PollingActor):
    actor_name = "schedules"

    def __init__(self, writer: WriterHandle, db_path: Path, *, projects: Sequence[str] = (),
                 supervisor: pykka.ActorRef[Any] | None = None, board: HostBoard | None = None,
                 resolver: WorkflowResolver | None = None, clock: Callable[[], float] = time.time,
                 tick_s: float = 0.25, reload_every_s: float = 1.0) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._db_path = db_path
        self._dirs = schedule_dirs(projects)
        self._board = board
        self._resolver = resolver if resolver is not None else WorkflowResolver()  # (an empty one is falsy)
        self._clock = clock
        self._tick_s = tick_s
        self._reload_every_s = reload_every_s
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._loaded = _Loaded()
        self._loading = False  # a load of the files is under way on a user-code thread
        self._first_load_done = False
        self._deferred: list[TriggerSchedule] = []  # manual fires that came before the first load ended
        self._online_since = 0.0
        self._last_reload_check = 0.0
        self._in_flight = 0

    # --- lifecycle -------------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the keeper's thread: reader, the first load of the schedule files (started, not waited
        for: a file whose import blocks must not hold up the host's start), ticker."""
        self._reader = StoreReader(self._db_path)
        self._online_since = self._clock()
        self._reload(self._online_since)
        self._ticker = Ticker(self.actor_ref, KeeperTick(), self._tick_s, "schedules").start()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {KeeperTick: self._tick, WriteResult: self._written, TriggerSchedule: self._trigger,
                SchedulesLoaded: self._schedules_loaded}

    # --- definitions -----------------------------------------------------------------------

    def _reload(self, now: float) -> None:
        """Start loading the schedule files again when their stamps changed (and on the first call), on a
        user-code thread, each file bounded by the load limit; `SchedulesLoaded` brings the result."""
        self._last_reload_check = now
        if self._loading:
            return
        stamps = directory_stamps(self._dirs)
        if stamps == self._loaded.stamps:
            return
        projects = [project for project, _ in self._dirs if project is not None]
        ref = self.actor_ref
        self._loading = True

        def done(found: ScheduleSet | None, error: BaseException | None) -> None:
            """Runs on the user-code thread, on its watcher (the limit ran out) or here (refused at once)."""
            detail = None if error is None else (error.one_line() if isinstance(error, PiwfError) else
                                                 _one_line(f"{type(error).__name__}: {error}"))
            safe_tell(ref, SchedulesLoaded(stamps, found, detail))

        self._resolver.user_code.submit(lambda: load_schedules(projects), done)

    def _schedules_loaded(self, message: SchedulesLoaded) -> None:
        self._loading = False
        first = not self._first_load_done
        self._first_load_done = True
        if message.found is None:  # a file that never finished loading: the next check skips it (see user_code)
            log.warning("schedule files not loaded: %s", message.error)
        else:
            before = set(self._loaded.schedules.schedules)
            self._loaded = _Loaded(message.found, message.stamps)
            if first:
                log.info("schedules: %s", where_found(self._dirs, message.found))
            elif before != set(message.found.schedules):
                log.info("schedules loaded: %s", ", ".join(sorted(message.found.schedules)) or "none")
            self._publish()
        deferred, self._deferred = self._deferred, []
        for trigger in deferred:
            self._trigger(trigger)

    def _publish(self) -> None:
        if self._board is None:
            return
        found = self._loaded.schedules
        self._board.publish(Section.SCHEDULES, {
            "loaded": {name: summary(item) for name, item in found.schedules.items()},
            "failures": [{"path": failure.path, "error": failure.error} for failure in found.failures],
            "clashes": list(found.clashes),
            "dirs": [str(directory) for _project, directory in self._dirs],
            "online_since": self._online_since,
        })

    # --- fires -----------------------------------------------------------------------------

    def _tick(self, _message: KeeperTick) -> None:
        now = self._clock()
        if now - self._last_reload_check >= self._reload_every_s:
            self._reload(now)
        definitions = self._loaded.schedules.schedules
        if self._in_flight or not definitions or self._reader is None:
            return
        plan = plan_tick(definitions, schedule_rows(self._reader), self._online_since, now)
        if plan.sync:
            self._submit(WriteCommand("schedule.sync", {"schedules": list(plan.sync)}, correlation_id="sync"))
        for name, due in plan.due:
            self._submit(self._fire_command(definitions[name], due))

    def _submit(self, command: WriteCommand) -> None:
        self._in_flight += 1
        self._writer.submit(command, self.actor_ref)

    def _fire_command(self, item: LoadedSchedule, due: Due) -> WriteCommand:
        fires = []
        for fire_time in due.fires:
            key = fire_key(fire_time)
            fire: dict[str, Any] = {"fire_key": key, "fire_time": fire_time, "run_id": fire_run_id(item.name, key, fire_time),
                    "kind": "catch_up" if fire_time in due.missed else "scheduled"}
            try:
                fire["spec"] = self._run_spec(item, fire_time, fire["run_id"])
            except Exception as exc:  # the user's input function or workflow file: recorded, never fatal
                fire["error"] = _one_line(exc.one_line() if isinstance(exc, PiwfError) else
                                          f"{type(exc).__name__}: {exc}")
                log.warning("schedule %s: the fire at %s starts no run: %s", item.name, fire_time, fire["error"])
            fires.append(fire)
        return WriteCommand("schedule.fire", {"name": item.name, "fires": fires, "cursor": due.cursor,
                                              "skipped": due.skipped}, correlation_id=f"fire:{item.name}")

    def _run_spec(self, item: LoadedSchedule, fire_time: float, run_id: str) -> dict[str, Any]:
        """The run.start spec of one fire: the workflow resolved now (its snapshot goes with the run). The
        input function, the file's load and the key function run on a user-code thread, bounded in time."""

        def build() -> dict[str, Any]:
            with phase(KEY, f"schedule {item.name!r}: its input function"):
                run_input = item.schedule.input_for(fire_time)
            command = start_run_command(self._resolver, workflow=item.workflow_spec, input=run_input,
                                        project_path=item.project_path, run_id=run_id)
            return dict(command.args["spec"])

        return self._resolver.user_code.call(build)

    def _written(self, result: WriteResult) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        what = result.correlation_id or "write"
        if not result.ok:
            log.warning("schedule keeper: %s refused: %s", what, result.error)
            return
        value = result.value or {}
        for fire in value.get("fired") or []:
            if fire.get("run_id"):
                log.info("schedule %s fired (%s at %.3f): run %s", value.get("name"), fire["kind"], fire["fire_time"],
                         fire["run_id"])
        if value.get("skipped"):
            log.info("schedule %s: %d missed fire(s) skipped (catch_up)", value.get("name"), value["skipped"])

    # --- manual fires ------------------------------------------------------------------------

    def _trigger(self, message: TriggerSchedule) -> None:
        """Build the manual fire and hand it to the writer, which answers the gateway directly."""

        def refuse(code: str, error: str) -> None:
            safe_tell(message.reply_to, WriteResult(False, None, code, error, message.token))

        if not self._first_load_done:  # the files are still loading: built once they are
            self._deferred.append(message)
            return
        item = self._loaded.schedules.schedules.get(message.name)
        if item is None:
            refuse(NotFound.code, f"schedule {message.name} is not loaded by this host")
            return
        args = message.client_args
        request = args.get("idempotency_key") or args.get("client_request_id") or uuid.uuid4().hex
        key = f"manual:{args.get('client_id') or '-'}:{request}"
        fire_time = self._clock()
        run_id = fire_run_id(item.name, key, fire_time)  # a replay of this trigger adopts the recorded run
        try:
            spec = self._run_spec(item, fire_time, run_id)
        except Exception as exc:
            error = exc.one_line() if isinstance(exc, PiwfError) else f"{type(exc).__name__}: {exc}"
            refuse(Rejected.code, _one_line(f"schedule {item.name}: {error}", 1000))
            return
        fire = {"fire_key": key, "fire_time": fire_time, "kind": "manual", "run_id": run_id, "spec": spec}
        self._writer.submit(WriteCommand("schedule.trigger", {**args, "name": item.name, "fire": fire},
                                         correlation_id=message.token), message.reply_to)
