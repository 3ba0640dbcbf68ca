"""`Housekeeper`: the active host's chores that are not the run queue.

It owns three of them, each a write command sent through the writer:

- **interaction deadlines** (`interaction.expire`): on every tick (0.5 s)
  it reads the nearest deadline of a pending request through its own
  read-only connection and, once that has passed, asks the writer to apply
  every passed one (also those that passed while no host ran);
- **wake-ups of waits** (`waits.wake`): the same for the nearest `wake_at`
  of a pending wait (a durable sleep, a message wait's timeout). Sleeping
  runs cost one index probe per tick however many there are; when the
  nearest time comes before the next tick, an `Alarm` (one thread) rings at
  it, so a sleeper wakes on time, not up to a tick late. A commit that
  changed waits (the writer's change notice names `run_wait`) makes it look
  again at once, so a sleep shorter than a tick is not woken a tick late;
- **automatic pruning** (`state.prune` with `apply`): every
  `prune_every_s`, while no run or reconcile is active, finished runs older
  than `retention_days` are pruned (at most 1,000 per pass), and client
  request records older than `idempotency_days`, which outlive their runs.

"Active" and "the lease is suspended" are read from the scheduler's board
section (`Section.SCHEDULER`: `active`, `suspended`), which the scheduler
publishes whenever its slots change. The board is plain shared data, so
nothing here asks the scheduler (STYLE.md 8). While the lease is suspended
(the disk was full when it ran out) nothing is sent: it could not be written.
Reading "idle" from a snapshot can be a moment late; that only delays or
advances a prune by a tick, and a prune never takes a run that is not
finished, so being idle is a courtesy to running work, not a fence.

Only the active host runs this (`actors/host.py` `_activate`): a runner host
(docs/runners.md) leaves deadlines and pruning to it. The scheduler keeps
what belongs to its own claims, renewing them and settling those whose
runner left without a recorded exit (`scheduler.settle_abandoned`), on both
kinds of host.

Deadlines and wake-ups are timer time (piwf_actors/clock.py: the wall clock,
but under a test's clock); pruning keeps host time, so skipping a test's
clock a month ahead prunes nothing. After a skip the housekeeper looks at
once (it subscribes to the timer clock) instead of at its next tick.

`plan` is the step function: what to send after a tick, given a chosen `now`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pykka

from piwf_actors.actors.base import PollingActor, WriteReplies, safe_tell
from piwf_actors.actors.ticker import Alarm, Ticker
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.clock import TimerClock
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteResult

log = logging.getLogger(__name__)

#: Runs one automatic prune removes at most (the next pass takes the rest).
PRUNE_MAX_RUNS = 1000


@dataclass(frozen=True, slots=True)
class HousekeepingTick:
    """Time to look at deadlines and pruning (sent by the housekeeper's ticker)."""


# --- the step function ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished runs and client request records are kept, in seconds (0: for ever)."""

    runs_s: float
    idempotency_s: float
    prune_every_s: float


@dataclass(frozen=True, slots=True)
class HousekeepingState:
    last_prune: float  # when the last prune was sent (or the housekeeper started)
    pruning: bool = False  # a state.prune is with the writer
    expiring: bool = False  # an interaction.expire is with the writer
    waking: bool = False  # a waits.wake is with the writer


@dataclass(frozen=True, slots=True)
class HousekeepingStep:
    state: HousekeepingState
    expire: bool = False  # send interaction.expire now
    prune: dict[str, Any] | None = None  # send state.prune with these args now
    wake: bool = False  # send waits.wake now


def scheduler_idle(section: Mapping[str, Any]) -> bool:
    """No run or reconcile is active, as the scheduler last published (no section yet: not known, so not idle)."""
    return "active" in section and not section["active"]


def plan(state: HousekeepingState, scheduler: Mapping[str, Any], next_deadline: float | None, now: float,
         retention: Retention, next_wake: float | None = None, timer_now: float | None = None) -> HousekeepingStep:
    """What to send after a tick at `now`, given the scheduler's board section, the nearest deadline
    and the nearest wake-up of a wait. Deadlines and wake-ups are compared with `timer_now` (timer
    time; default `now`), pruning with `now`.

    Nothing while the lease is suspended. Deadlines and wake-ups first: one interaction.expire and
    one waits.wake at a time, once the nearest is due. Then a prune, when retention is on, the
    scheduler is idle, none is with the writer and `prune_every_s` has passed since the last one.
    """
    if scheduler.get("suspended"):
        return HousekeepingStep(state)
    timer = now if timer_now is None else timer_now
    expire = next_deadline is not None and next_deadline <= timer and not state.expiring
    if expire:
        state = replace(state, expiring=True)
    wake = next_wake is not None and next_wake <= timer and not state.waking
    if wake:
        state = replace(state, waking=True)
    if (retention.runs_s <= 0 or state.pruning or not scheduler_idle(scheduler)
            or now - state.last_prune < retention.prune_every_s):
        return HousekeepingStep(state, expire=expire, wake=wake)
    args: dict[str, Any] = {"before": now - retention.runs_s, "apply": True, "max_runs": PRUNE_MAX_RUNS}
    if retention.idempotency_s > 0:
        # Idempotency records outlive their runs, for their own retention.
        args["idempotency_before"] = now - retention.idempotency_s
    return HousekeepingStep(replace(state, last_prune=now, pruning=True), expire=expire, prune=args, wake=wake)


# --- the actor ---------------------------------------------------------------------------------


class Housekeeper(PollingActor):
    """Deadlines and pruning on a 0.5 s tick. `__init__` runs in the caller's thread; `on_start`, the
    handlers (ticks, write results) and `release_resources` (PollingActor's: the ticker, then the
    reader, on a stop or after a failure) run in the housekeeper's own thread."""

    actor_name = "housekeeper"

    def __init__(self, writer: WriterHandle, database: DatabaseLocation, *, supervisor: pykka.ActorRef[Any] | None,
                 board: HostBoard, retention_days: float = 0.0, prune_every_s: float = 3600.0,
                 idempotency_days: float = 365.0, tick_s: float = 0.5,
                 clock: Callable[[], float] = time.time, timer_clock: TimerClock | None = None) -> None:
        """Runs in the caller's thread: stores arguments only. `board` carries the scheduler's
        section (started before this actor); `retention_days` 0 turns automatic pruning off.
        `clock` is host time (pruning); `timer_clock` what deadlines and wake-ups run on (None: `clock`)."""
        super().__init__(supervisor)
        self._writer = writer
        self._database = database
        self._board = board
        self._retention = Retention(runs_s=retention_days * 86400.0, idempotency_s=idempotency_days * 86400.0,
                                    prune_every_s=prune_every_s)
        self._tick_s = tick_s
        self._clock = clock
        self._timer_clock = timer_clock
        self._timer_now = clock if timer_clock is None else timer_clock.now
        self._unsubscribe_timer: Callable[[], None] | None = None
        self._state = HousekeepingState(last_prune=0.0)  # its clock starts in on_start
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._alarm: Alarm | None = None
        self._replies: WriteReplies | None = None  # made in on_start: it needs this actor's ref

    def on_start(self) -> None:
        """Runs in the housekeeper's thread: its reader, then the ticker (the first look is its first tick).
        The first prune waits `prune_every_s` from here, as every later one waits from the last."""
        self._state = HousekeepingState(last_prune=self._clock())
        self._reader = StoreReader(self._database)
        _ = self._reader.conn  # connect here, not at the first tick: on_start opens what the actor holds
        self._replies = WriteReplies(self._writer, self.actor_ref)
        self._alarm = Alarm(self.actor_ref, HousekeepingTick(), "housekeeper", clock=self._timer_now).start()
        self._ticker = Ticker(self.actor_ref, HousekeepingTick(), self._tick_s, "housekeeper").start()
        self._writer.ref.tell(Subscribe(self.actor_ref, frozenset({"run_wait", "flow_timer"})))
        if self._timer_clock is not None:
            self._unsubscribe_timer = self._timer_clock.subscribe(self._timer_moved)

    def _timer_moved(self) -> None:
        """Runs in the thread that moved the timer clock (a test's): look at the timers now."""
        alarm = self._alarm
        if alarm is not None:
            alarm.nudge()
        safe_tell(self.actor_ref, HousekeepingTick())

    def release_resources(self) -> None:
        if self._unsubscribe_timer is not None:
            self._unsubscribe_timer()
            self._unsubscribe_timer = None
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        if self._alarm is not None:
            self._alarm.stop()
            self._alarm = None
        super().release_resources()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {HousekeepingTick: self._tick, WriteResult: self._written, ChangeNotice: self._changed}

    def _changed(self, notice: ChangeNotice) -> None:
        """Runs in the housekeeper's thread: a wait was made or settled; its time may be the nearest."""
        if "run_wait" in notice.tables or "flow_timer" in notice.tables:
            self._arm_next_wake()

    def _arm_next_wake(self) -> None:
        """Ring at the nearest wake-up of a pending wait (one index probe)."""
        if self._reader is None or self._alarm is None:
            return
        wake = queries.next_wake(self._reader)
        if wake is not None:
            self._alarm.arm(wake)

    def _tick(self, _message: HousekeepingTick) -> None:
        """Runs in the housekeeper's thread, on every tick."""
        assert self._reader is not None
        scheduler = self._board.snapshot(Section.SCHEDULER)
        suspended = scheduler.get("suspended")
        deadline = None if suspended else queries.next_deadline(self._reader)
        wake = None if suspended else queries.next_wake(self._reader)
        now = self._clock()
        timer_now = self._timer_now()
        step = plan(self._state, scheduler, deadline, now, self._retention, wake, timer_now)
        self._state = step.state
        if step.expire:
            self._submit("interaction.expire", {}, self._expired)
        if step.wake:
            self._submit("waits.wake", {}, self._woken)
        soon = [at for at in (deadline, wake) if at is not None and timer_now < at < timer_now + self._tick_s]
        if soon and self._alarm is not None:
            self._alarm.arm(min(soon))  # due before the next tick: ring then, not a tick late
        if step.prune is not None:
            self._submit("state.prune", step.prune, self._pruned)

    def _submit(self, name: str, args: dict[str, Any], on_result: Callable[[WriteResult], None]) -> None:
        assert self._replies is not None
        self._replies.submit(name, args, on_result)

    def _written(self, result: WriteResult) -> None:
        """Runs in the housekeeper's thread: the answer goes to the handler its command was sent with."""
        if self._replies is not None:
            self._replies.answer(result)

    def _expired(self, result: WriteResult) -> None:
        self._state = replace(self._state, expiring=False)
        if not result.ok:
            log.warning("applying interaction deadlines failed: %s", result.error)

    def _woken(self, result: WriteResult) -> None:
        self._state = replace(self._state, waking=False)
        if not result.ok:
            log.warning("waking waits failed: %s", result.error)
        elif result.value.get("more"):
            self.actor_ref.tell(HousekeepingTick())  # a batch of many wake-ups: the next one now
        else:
            self._arm_next_wake()  # one may have come due while this one was out

    def _pruned(self, result: WriteResult) -> None:
        self._state = replace(self._state, pruning=False)
        if not result.ok:
            log.warning("automatic prune failed: %s", result.error)
        elif result.value["receipt"]["run_count"]:
            log.info("automatic prune removed %d finished run(s)", result.value["receipt"]["run_count"])
