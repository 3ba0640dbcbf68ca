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

Write results come back under a token made when the command is sent; each
token names the handler of its answer (`_submit`), as in the gateway.

The host's chores that are not the queue (interaction deadlines, automatic
pruning) are the active host's `Housekeeper` (actors/housekeeping.py); it
reads whether any run is active from this actor's board section
(`Section.SCHEDULER`), which `_publish` rewrites whenever the slots change.

A runner host (docs/runners.md) runs this same scheduler with `host_duties`
off: it claims and executes runs from the shared queue, under its runner
lease (its writer handle stamps the runner identity on every command), and
leaves resource reconciles to the active host. It sees no change notice for
runs another host queues, so it looks at the queue on its tick (`tick_s`,
shorter on a runner host).
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, WriteReplies, safe_tell
from piwf_actors.actors.launches import claim_offer, reconcile_launch, run_launch, unlaunched_exit
from piwf_actors.actors.lease import LeaseRegained, LeaseSuspended
from piwf_actors.actors.runner_supervisor import (
    HoldRun,
    Launch,
    RunnerFinished,
    RunnerSupervisor,
    SlotReady,
    StopRunner,
    WatchdogTick,
    WorkerInfo,
)
from piwf_actors.actors.standing_claim import StandingClaim
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.worker_sockets import WorkerSockets
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.board import HostBoard, Section, Stream
from piwf_actors.canonical import token_hash
from piwf_actors.paths import DatabaseLocation
from piwf_actors.resources.fairness import after_launch, next_claim
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


@dataclass
class _Slot:
    """One worker slot as the scheduler sees it."""

    index: int
    ref: pykka.ActorRef[Any]
    worker: WorkerInfo | None = None  # its worker, as last reported (recorded with a claim)
    launch: Launch | None = None  # the launch it serves, None when idle
    stopping: bool = False  # told to stop its launch (cancel, claim lost)
    held: bool = False  # told to hold its launch (a pause is pending)


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
        self._host_duties = host_duties
        self._watchdog_grace_s = watchdog_grace_s
        self._ready_timeout_s = worker_ready_timeout_s
        # The lease ran out while the disk was full: claim nothing until it is held again.
        self._suspended = False
        self._writer = writer
        self._database = database
        self._max_workers = max_workers
        self._claim_lease_s = claim_lease_s
        self._tick_s = tick_s
        self._warm = max_workers if warm_workers is None else warm_workers
        self._grace_s = grace_s
        self._worker_log_level = worker_log_level
        self._worker_log_format = worker_log_format
        self._worker_env = worker_env
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._sockets: WorkerSockets | None = None
        self._slots: list[_Slot] = []
        self._active: dict[str, _Slot] = {}  # run id → the slot serving it
        self._claiming = False  # one claim in flight at a time
        self._standing = StandingClaim(database, host_duties=host_duties)  # left with the writer while idle
        self._last_renewal = 0.0
        self._stopping = False
        self._launched = 0
        self._board = board
        # Write results come back under a token; each pending one names the handler of its answer.
        self._replies: WriteReplies | None = None  # made in on_start: it needs this actor's ref
        # Reconciles: their claims' lease and last renewal, and which kind the next claim prefers.
        self._reconcile_lease_s = reconcile_lease_s
        self._last_reconcile_renewal = 0.0
        self._prefer_reconcile = False

    def on_start(self) -> None:
        """Runs in the scheduler's thread: reader, change notices, warm workers, ticker."""
        self._reader = StoreReader(self._database)
        self._replies = WriteReplies(self._writer, self.actor_ref)
        self._writer.ref.tell(Subscribe(self.actor_ref, frozenset({"run", "run_control"})))
        self._sockets = WorkerSockets().start()
        self._slots = [_Slot(index, self._start_supervisor(index)) for index in range(self._max_workers)]
        self._ticker = Ticker(self.actor_ref, SchedulerTick(), self._tick_s, "scheduler").start()
        self._publish()
        self._try_claim()

    def release_resources(self) -> None:
        # The board keeps the last published `active` set: only the housekeeper reads it, and it
        # was started after this actor, so it has stopped already (the host stops in reverse).
        self._stopping = True
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self._withdraw_offer()
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        # Each supervisor stops its worker; one serving a launch reports its exit first
        # (the run goes back to the queue).
        for slot in self._slots:
            try:
                slot.ref.stop(block=True, timeout=30)
            except pykka.ActorDeadError:
                pass
        self._slots = []
        self._active.clear()
        if self._sockets is not None:
            self._sockets.close()
            self._sockets = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {SchedulerTick: self._tick, ChangeNotice: self._changed, WriteResult: self._written,
                RunnerFinished: self._finished, SlotReady: self._slot_ready, ActorFailed: self._runner_failed,
                GetSchedulerStatus: self._status, LeaseSuspended: self._lease_suspended,
                LeaseRegained: self._lease_regained}

    # --- the lease pausing and coming back ------------------------------------------

    def _lease_suspended(self, _message: LeaseSuspended) -> None:
        """The disk is full past the lease: claim nothing, let runners keep their workers
        (they hold their results and resend them) until the lease is held again."""
        self._suspended = True
        self._withdraw_offer()
        self._publish()

    def _lease_regained(self, _message: LeaseRegained) -> None:
        """The lease is held again at a higher epoch and the live claims moved with it
        (`lease.reacquire`): runners go on, claiming resumes."""
        self._suspended = False
        self._last_renewal = 0.0
        self._publish()
        self._try_claim()

    # --- slots ------------------------------------------------------------------------

    def _start_supervisor(self, index: int) -> pykka.ActorRef[Any]:
        assert self._sockets is not None
        board = self._board
        return RunnerSupervisor.start(
            self._writer, self.actor_ref, self._sockets, index, keep_warm=index < self._warm,
            grace_s=self._grace_s, database=self._database, watchdog_grace_s=self._watchdog_grace_s,
            ready_timeout_s=self._ready_timeout_s, worker_log_level=self._worker_log_level,
            worker_log_format=self._worker_log_format, worker_env=self._worker_env,
            output=None if board is None else lambda p: board.emit(Stream.NODE_OUTPUT, p))

    def _slot_ready(self, message: SlotReady) -> None:
        """A slot's worker changed (spawned, replaced, gone), busy or not."""
        if message.slot < len(self._slots):
            self._slots[message.slot].worker = message.worker
            self._publish()
            self._try_claim()

    # --- claiming ------------------------------------------------------------------

    def _try_claim(self) -> None:
        """Claim as many runs as there are idle slots, in one command.

        Each slot's worker (pid, create_time) is recorded with its claim, so a
        launch on a warm worker needs no `runner.attach`. Nothing is sent when
        no run is eligible.
        """
        if self._standing.standing and not self._withdraw_offer():
            return  # the writer took the standing claim: its answer is on the way
        if self._stopping or self._claiming or self._suspended:
            return
        idle = [slot for slot in self._slots if slot.launch is None and slot.ref.is_alive()]
        if not idle:
            return
        assert self._reader is not None
        plan = next_claim(len(idle), prefer_reconcile=self._prefer_reconcile,
                          runs_waiting=queries.claimable_exists(self._reader, list(self._active)),
                          reconciles_waiting=self._host_duties
                          and resource_queries.reconcile_due(self._reader, time.time()))
        if plan is None:
            if self._standing.allowed(self._reader):
                self._offer_claim(idle)
            return
        kind, count = plan
        if kind == "reconcile":
            self._claim_reconcile(idle[0])
            return
        offered, args = claim_offer(idle[:count], self._active, self._claim_lease_s)
        self._claiming = True
        self._submit("scheduler.claim_next", args, lambda result: self._claimed(result, offered))

    def _offer_claim(self, idle: list[_Slot]) -> None:
        """Nothing to claim now: the claim for the idle slots stands with the writer (standing_claim.py)."""
        if self._replies is None:
            return
        offered, args = claim_offer(idle, self._active, self._claim_lease_s)
        self._claiming = True
        self._standing.offer(self._replies, args, lambda result: self._claimed(result, offered))

    def _withdraw_offer(self) -> bool:
        """Take the standing claim back; False when the writer took it already (its answer is coming)."""
        if not self._standing.standing:
            return True
        if not self._standing.withdraw(self._replies):
            return False
        self._claiming = False
        return True

    # --- write results -----------------------------------------------------------------

    def _submit(self, name: str, args: dict[str, Any], on_result: Callable[[WriteResult], None]) -> None:
        """Send a write command; its answer is handed to `on_result` (in the scheduler's thread)."""
        assert self._replies is not None
        self._replies.submit(name, args, on_result)

    def _written(self, result: WriteResult) -> None:
        """Runs in the scheduler's thread: the answer goes to the handler its command was sent with."""
        if self._replies is not None:
            self._replies.answer(result)

    def _claimed(self, result: WriteResult, offered: list[tuple[_Slot, str, str]]) -> None:
        self._claiming = False
        claimed = result.value if result.ok else []
        if not result.ok:
            log.warning("claiming runs failed: %s", result.error)
        by_launch = {run["launch_id"]: run for run in claimed}
        for slot, token, launch_id in offered:
            run = by_launch.get(launch_id)
            if run is not None:
                self._launch_or_settle(slot, run_launch(run, token))
        if claimed:
            self._prefer_reconcile = after_launch("run")
        if claimed and not self._stopping:
            self._try_claim()

    # --- launching ---------------------------------------------------------------------

    def _launch_or_settle(self, slot: _Slot, launch: Launch) -> None:
        """Hand a claimed launch (a run or a reconcile) to its slot's supervisor. If that supervisor
        is gone, or the scheduler is stopping, the claim is settled like a runner that exited at once
        (outcome `launchFailed`): a launch that cannot start never holds a slot."""
        if not self._stopping and safe_tell(slot.ref, launch):
            slot.launch, slot.stopping, slot.held = launch, False, False
            self._active[launch.run_id] = slot
            self._launched += 1
            self._publish()
            return
        name, args = unlaunched_exit(launch, stopping=self._stopping)
        self._submit(name, args, self._unlaunched_settled)

    @staticmethod
    def _unlaunched_settled(result: WriteResult) -> None:
        if not result.ok:
            log.warning("settling a claim that could not be launched failed: %s", result.error)

    # --- reconciles (resource managers) --------------------------------------------------

    def _claim_reconcile(self, slot: _Slot) -> None:
        """Claim the resource due the longest for `slot` (one command; one claim in flight at a time)."""
        self._claiming = True
        token, launch_id = secrets.token_urlsafe(24), uuid.uuid4().hex
        args = {"token_hash": token_hash(token), "launch_id": launch_id, "claim_lease_s": self._reconcile_lease_s,
                "exclude": list(self._active)}
        self._submit("reconcile.claim", args, lambda result: self._reconcile_claimed(result, slot))

    def _reconcile_claimed(self, result: WriteResult, slot: _Slot) -> None:
        self._claiming = False
        if not result.ok:
            log.warning("claiming a reconcile failed: %s", result.error)
            return
        if result.value is None:
            return  # taken meanwhile (or not due after all): the next notice or tick looks again
        launch = reconcile_launch(result.value, slot.worker.pid if slot.worker else None)
        self._prefer_reconcile = after_launch("reconcile")
        self._launch_or_settle(slot, launch)
        if not self._stopping:
            self._try_claim()

    def _renew_reconciles(self) -> None:
        claims = [{**s.launch.fence, "claim_generation": s.launch.generation, "token_hash": s.launch.token_hash}
                  for s in self._active.values() if s.launch is not None and s.launch.kind == "reconcile"
                  and s.launch.fence is not None]
        if claims:
            self._submit("reconcile.renew", {"claims": claims, "claim_lease_s": self._reconcile_lease_s},
                         self._reconciles_renewed)

    def _reconciles_renewed(self, result: WriteResult) -> None:
        if not result.ok:
            log.warning("reconcile claim renewal failed: %s", result.error)
            return
        for reconcile_id, held in result.value.items():
            slot = self._active.get(reconcile_id)
            if held or slot is None or slot.stopping:
                continue
            slot.stopping = True
            log.warning("%s: claim lost", reconcile_id)
            safe_tell(slot.ref, StopRunner("claimLost", reconcile_id))

    # --- notices and ticks ------------------------------------------------------------

    def _changed(self, notice: ChangeNotice) -> None:
        if "run_control" in notice.tables:  # a cancel or pause was requested (store/commands/runs.py)
            watched = [run_id for run_id in notice.runs if run_id in self._active]
            if watched:
                self._stop_cancelled(watched)
        if "run" in notice.tables:
            self._try_claim()

    def _stop_cancelled(self, run_ids: list[str]) -> None:
        """Stop the runners of cancelled runs now; tell those of runs with a pause pending to hold
        (the pause itself lands at the next node boundary, in the writer)."""
        assert self._reader is not None
        for run_id, cancel, pause in queries.control_requests(self._reader, run_ids):
            slot = self._active.get(run_id)
            if slot is None or slot.stopping:
                continue
            if cancel:
                slot.stopping = True
                safe_tell(slot.ref, StopRunner("cancelled", run_id))
            elif pause and not slot.held:
                slot.held = True
                safe_tell(slot.ref, HoldRun(run_id))

    def _tick(self, _message: SchedulerTick) -> None:
        now = time.time()
        for slot in self._active.values():
            safe_tell(slot.ref, WatchdogTick())
        self._replace_dead_supervisors()
        if self._suspended:
            return  # nothing can be written until the lease is held again
        if now - self._last_renewal >= self._claim_lease_s / 3:
            self._last_renewal = now
            self._renew_claims()
            # Safety net for claims whose runner is gone without a recorded exit. It stays with the
            # renewals (same beat, same active set, on runner hosts too): the writer applies commands
            # in the order they were sent, so a claim still in flight is committed before it with a
            # fresh lease, and it settles expired claims only.
            self._submit("scheduler.settle_abandoned", {"active": list(self._active)}, self._settled)
        if now - self._last_reconcile_renewal >= self._reconcile_lease_s / 4:
            self._last_reconcile_renewal = now
            self._renew_reconciles()
        if self._active:
            self._stop_cancelled(list(self._active))
        self._try_claim()

    def _renew_claims(self) -> None:
        if not self._active:
            return
        claims = [{"run_id": s.launch.run_id, "generation": s.launch.generation,
                   "token_hash": s.launch.token_hash} for s in self._active.values()
                  if s.launch is not None and s.launch.kind == "run"]
        if not claims:
            return
        self._submit("scheduler.renew_claims", {"claims": claims, "claim_lease_s": self._claim_lease_s},
                     self._renewed)

    def _renewed(self, result: WriteResult) -> None:
        if not result.ok:
            log.warning("claim renewal failed: %s", result.error)
            return
        assert self._reader is not None
        for run_id, held in result.value.items():
            slot = self._active.get(run_id)
            if held or slot is None or slot.stopping:
                continue
            status = queries.run_status(self._reader, run_id)
            if status is not None and status[0] not in ("starting", "running"):
                continue  # the run ended or parked and released its claim; its runner is finishing
            slot.stopping = True
            log.warning("run %s: claim lost", run_id)
            safe_tell(slot.ref, StopRunner("claimLost", run_id))

    @staticmethod
    def _settled(result: WriteResult) -> None:
        if result.ok and result.value:
            log.warning("settled run(s) whose runner left without a recorded exit: %s", result.value)

    def _finished(self, message: RunnerFinished) -> None:
        slot = self._active.pop(message.run_id, None)
        if slot is None and message.slot < len(self._slots):
            slot = self._slots[message.slot]
        if slot is not None:
            slot.launch, slot.stopping, slot.held, slot.worker = None, False, False, message.worker
        self._publish()
        self._try_claim()

    def _runner_failed(self, message: ActorFailed) -> None:
        log.error("%s failed: %s", message.actor, message.reason)
        self._replace_dead_supervisors()

    def _replace_dead_supervisors(self) -> None:
        """One-for-one: a slot whose supervisor died gets a new one (its launch was settled by the
        old one's `on_failure`, or is settled by `settle_abandoned` when even that failed)."""
        if self._stopping:
            return
        replaced = False
        for slot in self._slots:
            if slot.ref.is_alive():
                continue
            log.warning("slot %d: starting a new runner supervisor", slot.index)
            if slot.launch is not None:
                self._active.pop(slot.launch.run_id, None)
            slot.launch, slot.stopping, slot.worker = None, False, None
            slot.ref = self._start_supervisor(slot.index)
            replaced = True
        if replaced:
            self._publish()  # the board's `active` is what the housekeeper reads as idle or not

    def _publish(self) -> None:
        if self._board is not None:
            self._board.publish(Section.SCHEDULER, self._status(GetSchedulerStatus()))

    def _status(self, _message: GetSchedulerStatus) -> dict[str, Any]:
        return {
            "max_workers": self._max_workers,
            "active": [{"run_id": s.launch.run_id, "pid": s.worker.pid if s.worker else None,
                        "generation": s.launch.generation, "kind": s.launch.kind}
                       for s in self._active.values() if s.launch is not None],
            "idle_workers": [s.worker.pid for s in self._slots if s.launch is None and s.worker is not None],
            "launched": self._launched,
            "suspended": self._suspended,
            "host_duties": self._host_duties,
        }
