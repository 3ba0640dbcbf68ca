"""`Scheduler`: the run queue. Claims eligible runs for its idle worker slots,
hands each to the slot's runner supervisor, renews their claims, settles its
claims whose runner left without a recorded exit, and stops runners whose
run was cancelled.

There is one `RunnerSupervisor` per slot (`max_workers` of them), for the
host's lifetime, each with its own worker process (warm from the start for
the first `warm_workers` slots), and one `WorkerSockets` thread that reads
every worker's socket. A supervisor that crashes is replaced (one-for-one);
its launch was settled by its own `on_failure`.

It reacts to the writer's change notices (a run was queued, cancelled …)
and to a slow tick (claim renewal, a safety net for missed notices). Only
one claim is in flight at a time, so two launches never race for a run in
this host; the claim command itself refuses runs that already have one.

Resource managers' reconciles share the slots (and so `max_workers`) with
runs: a reconcile is a launch of kind `reconcile` on the same warm workers,
supervised the same way (watchdog, claim renewal, exit settlement). The
scheduler alternates between the two kinds when both wait
(`resources.fairness`), and renews reconcile claims on their own, slower
beat (a 120 s lease renewed every 30 s).

Every decision is the step function `decide` (scheduling.py), a pure function
of a frozen `SchedulerState`, tested with a chosen `now`; this actor is its
loop: it turns messages into events, carries out the effects, and decides at
once on the answer of an effect that answers (a read, the standing claim
taken back, a launch its supervisor could not take). Write results come back
under a token made when the command is sent (`WriteReplies`), each turned
into the event its command was sent for.

The host's chores that are not the queue (interaction deadlines, automatic
pruning) are the active host's `Housekeeper` (actors/housekeeping.py); it
reads whether any run is active from this actor's board section
(`Section.SCHEDULER`), which a `Publish` effect rewrites whenever the slots change.

A runner host (docs/runners.md) runs this same scheduler with `host_duties`
off: it claims and executes runs from the shared queue, under its runner
lease (its writer handle stamps the runner identity on every command), and
leaves resource reconciles to the active host. It sees no change notice for
runs another host queues, so it looks at the queue on its tick (`tick_s`,
shorter on a runner host).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, WriteReplies, safe_tell
from piwf_actors.actors.launches import claim_offer, reconcile_offer
from piwf_actors.actors.lease import LeaseRegained, LeaseSuspended
from piwf_actors.actors.runner_supervisor import RunnerFinished, RunnerSupervisor, SlotReady
from piwf_actors.actors.scheduling import decide
from piwf_actors.actors.scheduling_records import (
    AskStanding,
    ClaimReconcile,
    ClaimRuns,
    ControlsSeen,
    Effect,
    Event,
    Hand,
    Log,
    LookForWork,
    NotHanded,
    OfferWithdrawn,
    Publish,
    ReadControls,
    ReadRunStatuses,
    ReconcileClaimed,
    RunsClaimed,
    SchedulerState,
    SchedulingConfig,
    StandingSeen,
    Started,
    StartSupervisor,
    StatusesSeen,
    Stopping,
    Submit,
    SupervisorFailed,
    Tell,
    Ticked,
    WithdrawOffer,
    WorkSeen,
    Written,
    initial_state,
    scheduler_view,
)
from piwf_actors.actors.standing_claim import StandingClaim
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.worker_sockets import WorkerSockets
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.board import HostBoard, Section, Stream
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries, resource_queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteResult

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SchedulerTick:
    pass


@dataclass(frozen=True, slots=True)
class GetSchedulerStatus:
    pass


class Scheduler(CoreActor):
    actor_name = "scheduler"

    def __init__(self, writer: WriterHandle, database: DatabaseLocation, *, max_workers: int,
                 supervisor: pykka.ActorRef[Any] | None, claim_lease_s: float = 30.0, tick_s: float = 0.5,
                 warm_workers: int | None = None, grace_s: float = 3.0, worker_log_level: str = "WARNING",
                 worker_log_format: str = "text", board: HostBoard | None = None,
                 watchdog_grace_s: float = 5.0, worker_ready_timeout_s: float = 30.0,
                 reconcile_lease_s: float = 120.0, host_duties: bool = True,
                 worker_env: dict[str, str] | None = None) -> None:
        """Runs in the caller's thread: stores arguments only. `host_duties` False: a runner host's
        scheduler (runs only; no reconciles). `worker_env`: variables added to the workers' environment."""
        super().__init__(supervisor)
        self._config = SchedulingConfig(claim_lease_s=claim_lease_s, reconcile_lease_s=reconcile_lease_s,
                                        host_duties=host_duties)
        self._state: SchedulerState = initial_state(max_workers)
        self._watchdog_grace_s = watchdog_grace_s
        self._ready_timeout_s = worker_ready_timeout_s
        self._writer = writer
        self._database = database
        self._max_workers = max_workers
        self._tick_s = tick_s
        self._warm = max_workers if warm_workers is None else warm_workers
        self._grace_s = grace_s
        self._worker_log_level = worker_log_level
        self._worker_log_format = worker_log_format
        self._worker_env = worker_env
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._sockets: WorkerSockets | None = None
        self._refs: list[pykka.ActorRef[Any]] = []  # each slot's supervisor
        self._standing = StandingClaim(database, host_duties=host_duties)  # left with the writer while idle
        self._board = board
        # Write results come back under a token; each pending one names the event its answer becomes.
        self._replies: WriteReplies | None = None  # made in on_start: it needs this actor's ref

    def on_start(self) -> None:
        """Runs in the scheduler's thread: reader, change notices, warm workers, ticker."""
        self._reader = StoreReader(self._database)
        self._replies = WriteReplies(self._writer, self.actor_ref)
        self._writer.ref.tell(Subscribe(self.actor_ref, frozenset({"run", "run_control"})))
        self._sockets = WorkerSockets().start()
        self._refs = [self._start_supervisor(index) for index in range(self._max_workers)]
        self._ticker = Ticker(self.actor_ref, SchedulerTick(), self._tick_s, "scheduler").start()
        self._handle(Started())

    def release_resources(self) -> None:
        # The board keeps the last published `active` set: only the housekeeper reads it, and it
        # was started after this actor, so it has stopped already (the host stops in reverse).
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self._handle(Stopping())  # claims nothing more; a standing claim is taken back
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        # Each supervisor stops its worker; one serving a launch reports its exit first
        # (the run goes back to the queue).
        for ref in self._refs:
            try:
                ref.stop(block=True, timeout=30)
            except pykka.ActorDeadError:
                pass
        self._refs = []
        if self._sockets is not None:
            self._sockets.close()
            self._sockets = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {SchedulerTick: lambda _m: self._handle(Ticked(self._dead())), ChangeNotice: self._handle,
                WriteResult: self._written, RunnerFinished: self._handle, SlotReady: self._handle,
                ActorFailed: lambda m: self._handle(SupervisorFailed(m.actor, m.reason, self._dead())),
                GetSchedulerStatus: self._status, LeaseSuspended: self._handle, LeaseRegained: self._handle}

    def _status(self, _message: GetSchedulerStatus) -> dict[str, Any]:
        return scheduler_view(self._state, host_duties=self._config.host_duties)

    def _dead(self) -> frozenset[int]:
        """The slots whose supervisor has died (a fact for `decide`, gathered just before it)."""
        return frozenset(index for index, ref in enumerate(self._refs) if not ref.is_alive())

    def _start_supervisor(self, index: int) -> pykka.ActorRef[Any]:
        assert self._sockets is not None
        board = self._board
        return RunnerSupervisor.start(
            self._writer, self.actor_ref, self._sockets, index, keep_warm=index < self._warm,
            grace_s=self._grace_s, database=self._database, watchdog_grace_s=self._watchdog_grace_s,
            ready_timeout_s=self._ready_timeout_s, worker_log_level=self._worker_log_level,
            worker_log_format=self._worker_log_format, worker_env=self._worker_env,
            output=None if board is None else lambda p: board.emit(Stream.NODE_OUTPUT, p))

    def _written(self, result: WriteResult) -> None:
        """Runs in the scheduler's thread: the answer becomes the event its command was sent for (an
        answer under a token this actor did not send is ignored)."""
        if self._replies is not None:
            self._replies.answer(result)

    # --- the loop: decide, then carry out ------------------------------------------------------

    def _handle(self, event: Event) -> None:
        """Runs in the scheduler's thread: decide on `event`, then carry out the effects in order;
        the answer of an effect that answers is decided on at once, before the next effect."""
        self._state, effects = decide(self._state, event, time.time(), config=self._config)
        for effect in effects:
            answer = self._carry_out(effect)
            if answer is not None:
                self._handle(answer)

    def _carry_out(self, effect: Effect) -> Event | None:
        match effect:
            case Publish():
                if self._board is not None:
                    self._board.publish(Section.SCHEDULER, self._status(GetSchedulerStatus()))
            case Log(level, text):
                log.log(level, "%s", text)
            case Tell(slot, message):
                safe_tell(self._refs[slot] if slot < len(self._refs) else None, message)
            case Hand(slot, launch):
                if not safe_tell(self._refs[slot] if slot < len(self._refs) else None, launch):
                    return NotHanded(slot, launch)
            case StartSupervisor(slot):
                self._refs[slot] = self._start_supervisor(slot)
            case Submit(name, args, reply):
                self._submit(name, args, lambda result: self._handle(Written(reply, result)))
            case ClaimRuns():
                self._claim_runs(effect)
            case ClaimReconcile(slot, exclude, claim_lease_s):
                self._submit("reconcile.claim", reconcile_offer(exclude, claim_lease_s),
                             lambda result: self._handle(ReconcileClaimed(result, slot)))
            case _:
                return self._look(effect)
        return None

    def _look(self, effect: Effect) -> Event:
        """Carry out an effect that answers: a read, or the standing claim taken back."""
        assert self._reader is not None
        match effect:
            case LookForWork(idle, exclude, reconciles):
                alive = tuple(slot for slot in idle if slot < len(self._refs) and self._refs[slot].is_alive())
                if not alive:
                    return WorkSeen((), False, False)
                return WorkSeen(alive, queries.claimable_exists(self._reader, list(exclude)),
                                reconciles and resource_queries.reconcile_due(self._reader, time.time()))
            case AskStanding(idle):
                return StandingSeen(idle, self._standing.allowed(self._reader))
            case ReadControls(run_ids):
                return ControlsSeen(tuple(queries.control_requests(self._reader, list(run_ids))))
            case ReadRunStatuses(run_ids):
                statuses = ((run_id, queries.run_status(self._reader, run_id)) for run_id in run_ids)
                return StatusesSeen(tuple((run_id, None if status is None else status[0])
                                          for run_id, status in statuses))
            case WithdrawOffer():
                return OfferWithdrawn(self._standing.withdraw(self._replies))
        raise TypeError(f"the scheduler cannot carry out {effect!r}")

    def _submit(self, name: str, args: dict[str, Any], on_result: Callable[[WriteResult], None]) -> None:
        """Send a write command; its answer is handed to `on_result` (in the scheduler's thread)."""
        assert self._replies is not None
        self._replies.submit(name, args, on_result)

    def _claim_runs(self, effect: ClaimRuns) -> None:
        """`scheduler.claim_next` for the effect's slots, sent, or left with the writer as the standing
        claim. Each slot's worker (pid, create_time) is recorded with its claim, so a launch on a warm
        worker needs no `runner.attach`."""
        assert self._replies is not None
        offered, args = claim_offer(effect.slots, effect.exclude, effect.claim_lease_s)
        slots = tuple((slot.index, token, launch_id) for slot, token, launch_id in offered)

        def claimed(result: WriteResult) -> None:
            self._handle(RunsClaimed(result, slots))

        if effect.standing:
            self._standing.offer(self._replies, args, claimed)
        else:
            self._submit("scheduler.claim_next", args, claimed)
