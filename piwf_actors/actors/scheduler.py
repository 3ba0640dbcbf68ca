"""`Scheduler`: the run queue. Claims eligible runs up to `max_workers`,
starts and retires runner supervisors, renews their claims, stops runners
whose run was cancelled, and keeps a small pool of warm worker processes.

It reacts to the writer's change notices (a run was queued, cancelled …)
and to a slow tick (claim renewal, a safety net for missed notices). Only
one claim is in flight at a time, so two launches never race for a run in
this host; the claim command itself refuses runs that already have one.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, safe_tell
from piwf_actors.actors.board import HostBoard
from piwf_actors.actors.lease import LeaseRegained, LeaseSuspended
from piwf_actors.actors.runner_supervisor import Launch, RunnerFinished, RunnerSupervisor, StopRunner, WatchdogTick
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.canonical import token_hash
from piwf_actors.messages.content import INLINE_BYTES
from piwf_actors.runner.process import WorkerProcess
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SchedulerTick:
    pass


@dataclass(frozen=True, slots=True)
class GetSchedulerStatus:
    pass


@dataclass
class ActiveRun:
    ref: pykka.ActorRef[Any]
    launch: Launch
    worker: WorkerProcess
    stopping: bool = False


class Scheduler(CoreActor):
    actor_name = "scheduler"

    def __init__(self, writer: WriterHandle, db_path: Path, *, max_workers: int,
                 supervisor: pykka.ActorRef[Any] | None, claim_lease_s: float = 30.0, tick_s: float = 0.5,
                 warm_workers: int | None = None, grace_s: float = 3.0, worker_log_level: str = "WARNING",
                 worker_log_format: str = "text",
                 board: HostBoard | None = None, retention_days: float = 0.0, prune_every_s: float = 3600.0,
                 idempotency_days: float = 365.0, watchdog_grace_s: float = 5.0,
                 worker_ready_timeout_s: float = 30.0) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._idempotency_s = idempotency_days * 86400.0
        self._watchdog_grace_s = watchdog_grace_s
        self._ready_timeout_s = worker_ready_timeout_s
        # The lease ran out while the disk was full: claim nothing until it is held again.
        self._suspended = False
        self._writer = writer
        self._db_path = db_path
        self._max_workers = max_workers
        self._claim_lease_s = claim_lease_s
        self._tick_s = tick_s
        self._warm = max_workers if warm_workers is None else warm_workers
        self._grace_s = grace_s
        self._worker_log_level = worker_log_level
        self._worker_log_format = worker_log_format
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._active: dict[str, ActiveRun] = {}
        self._idle: list[WorkerProcess] = []
        self._claiming = False
        self._slots: list[tuple[WorkerProcess | None, str, str]] = []
        self._last_renewal = 0.0
        self._stopping = False
        self._launched = 0
        self._board = board
        self._expiring = False
        self._retention_s = retention_days * 86400.0
        self._prune_every_s = prune_every_s
        self._last_prune = time.time()
        self._pruning = False

    def on_start(self) -> None:
        """Runs in the scheduler's thread: reader, change notices, warm workers, ticker."""
        self._reader = StoreReader(self._db_path)
        self._writer.ref.tell(Subscribe(self.actor_ref))
        for _ in range(self._warm):
            self._idle.append(self._spawn_worker())
        self._ticker = Ticker(self.actor_ref, SchedulerTick(), self._tick_s, "scheduler").start()
        self._publish()
        self._try_claim()

    def release_resources(self) -> None:
        self._stopping = True
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        lent = [active.worker for active in self._active.values()]
        for active in list(self._active.values()):
            try:
                active.ref.stop(block=True, timeout=30)
            except pykka.ActorDeadError:
                pass
        self._active.clear()
        # A runner that finished while we were stopping handed its worker back in a
        # RunnerFinished this actor will never read: no worker may outlive the host.
        for worker in lent:
            if worker.alive():
                worker.shutdown()
            self._release_child(worker)
        # Warm workers, including those lent to a claim still in flight.
        for worker in self._idle + [w for w, _, _ in self._slots if w is not None]:
            worker.shutdown()
            self._release_child(worker)
        self._idle.clear()
        self._slots = []
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {SchedulerTick: self._tick, ChangeNotice: self._changed, WriteResult: self._written,
                RunnerFinished: self._finished, ActorFailed: self._runner_failed,
                GetSchedulerStatus: self._status, LeaseSuspended: self._lease_suspended,
                LeaseRegained: self._lease_regained}

    # --- the lease pausing and coming back ------------------------------------------

    def _lease_suspended(self, _message: LeaseSuspended) -> None:
        """The disk is full past the lease: claim nothing, let runners keep their workers
        (they hold their results and resend them) until the lease is held again."""
        self._suspended = True
        self._publish()

    def _lease_regained(self, _message: LeaseRegained) -> None:
        """The lease is held again at a higher epoch and the live claims moved with it
        (`lease.reacquire`): runners go on, claiming resumes."""
        self._suspended = False
        self._last_renewal = 0.0
        self._publish()
        self._try_claim()

    # --- workers -----------------------------------------------------------------

    def _spawn_worker(self) -> WorkerProcess:
        worker = WorkerProcess.spawn(log_level=self._worker_log_level, log_format=self._worker_log_format)
        self._writer.submit(WriteCommand("child.register", {"pid": worker.pid, "create_time": worker.create_time,
                                                            "kind": "worker"}))
        return worker

    def _release_child(self, worker: WorkerProcess) -> None:
        self._writer.submit(WriteCommand("child.release", {"pid": worker.pid, "create_time": worker.create_time}))

    # --- claiming ------------------------------------------------------------------

    def _try_claim(self) -> None:
        """Claim as many runs as there are free slots, in one command.

        Idle warm workers are matched to slots before the claim so that their
        pid is recorded with it; slots beyond the idle workers get a worker
        spawned after the claim. Nothing is sent when no run is eligible.
        """
        free = self._max_workers - len(self._active)
        if self._stopping or self._claiming or self._suspended or free <= 0:
            return
        assert self._reader is not None
        if not queries.claimable_exists(self._reader, list(self._active)):
            return
        self._claiming = True
        self._slots = []
        for _ in range(free):
            worker = self._idle_worker()
            self._slots.append((worker, secrets.token_urlsafe(24), uuid.uuid4().hex))
        slots = [{"token_hash": token_hash(token), "runner_epoch": epoch,
                  **({"pid": worker.pid, "create_time": worker.create_time} if worker else {})}
                 for worker, token, epoch in self._slots]
        args = {"exclude": list(self._active), "slots": slots, "claim_lease_s": self._claim_lease_s}
        self._writer.submit(WriteCommand("scheduler.claim_next", args, correlation_id="claim"), self.actor_ref)

    def _idle_worker(self) -> WorkerProcess | None:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive():
                return worker
            worker.process.wait()
            self._release_child(worker)
        return None

    def _written(self, result: WriteResult) -> None:
        if result.correlation_id == "prune":
            self._pruning = False
            if not result.ok:
                log.warning("automatic prune failed: %s", result.error)
            elif result.value["receipt"]["run_count"]:
                log.info("automatic prune removed %d finished run(s)", result.value["receipt"]["run_count"])
            return
        if result.correlation_id == "expire":
            self._expiring = False
            if not result.ok:
                log.warning("applying interaction deadlines failed: %s", result.error)
            return
        if result.correlation_id == "renew":
            self._renewed(result)
            return
        if result.correlation_id and result.correlation_id.startswith("unlaunched:"):
            if not result.ok:
                log.warning("settling a claim that could not be launched failed: %s", result.error)
            return
        if result.correlation_id == "settle":
            if result.ok and result.value:
                log.warning("settled run(s) whose runner left without a recorded exit: %s", result.value)
            return
        if result.correlation_id != "claim":
            return
        self._claiming = False
        slots, self._slots = self._slots, []
        claimed = result.value if result.ok else []
        if not result.ok:
            log.warning("claiming runs failed: %s", result.error)
        by_epoch = {run["runner_epoch"]: run for run in claimed}
        for worker, token, epoch in slots:
            run = by_epoch.get(epoch)
            if run is None or self._stopping:
                if worker is not None:
                    self._idle.append(worker)  # unused slot: the worker stays warm
                continue
            self._launch(run, token, worker)
        if claimed and not self._stopping:
            self._try_claim()

    def _launch(self, claimed: dict[str, Any], token: str, worker: WorkerProcess | None) -> None:
        """Start a runner supervisor for a claimed run. If that fails, the claim is settled like a
        runner that exited at once (the run parks `no_progress` with the reason) and the worker
        stays warm: a launch that cannot start never holds a slot."""
        try:
            launch = self._launch_record(claimed, token, attached=worker is not None)
            if worker is None:
                worker = self._spawn_worker()
            board = self._board
            ref = RunnerSupervisor.start(self._writer, self.actor_ref, worker, launch, grace_s=self._grace_s,
                                         db_path=self._db_path, watchdog_grace_s=self._watchdog_grace_s,
                                         ready_timeout_s=self._ready_timeout_s,
                                         output=None if board is None else lambda p: board.emit("node_output", p))
        except Exception as exc:
            log.exception("run %s: could not launch", claimed["run_id"])
            if worker is not None and worker.alive():
                self._idle.append(worker)
            self._writer.submit(WriteCommand("runner.exit", {
                "run_id": claimed["run_id"], "generation": claimed["generation"],
                "runner_epoch": claimed["runner_epoch"], "token_hash": token_hash(token), "outcome": "launchFailed",
                "exit_code": None, "diagnostic": f"could not launch: {type(exc).__name__}: {exc}"[:2000]},
                correlation_id=f"unlaunched:{claimed['run_id']}"), self.actor_ref)
            return
        self._active[launch.run_id] = ActiveRun(ref, launch, worker)
        self._launched += 1
        self._publish()

    def _launch_record(self, claimed: dict[str, Any], token: str, *, attached: bool) -> Launch:
        assert self._reader is not None
        source, size = queries.small_blob(self._reader, claimed["source_sha256"], INLINE_BYTES)
        envelope: dict[str, Any] = {
            "workflow": claimed["workflow"], "workflow_path": claimed["workflow_path"],
            "workflow_attr": claimed["workflow_attr"], "definition_digest": claimed["definition_digest"],
            "project_path": claimed["project_path"], "source": source or b"", "state": claimed.get("state")}
        if source is None and size >= 0:
            # A large snapshot travels as content the worker reads in chunks.
            envelope["source"] = None
            envelope["source_ref"] = {"digest": claimed["source_sha256"], "bytes": size}
        return Launch(run_id=claimed["run_id"], generation=claimed["generation"],
                      runner_epoch=claimed["runner_epoch"], token_hash=token_hash(token),
                      revision=claimed["revision"], envelope=envelope, attached=attached)

    # --- notices and ticks ------------------------------------------------------------

    def _changed(self, notice: ChangeNotice) -> None:
        if "run" in notice.tables:
            watched = [run_id for run_id in notice.runs if run_id in self._active]
            if watched:
                self._stop_cancelled(watched)
            self._try_claim()

    def _stop_cancelled(self, run_ids: list[str]) -> None:
        assert self._reader is not None
        for run_id in queries.cancel_requested(self._reader, run_ids):
            active = self._active.get(run_id)
            if active is not None and not active.stopping:
                active.stopping = True
                safe_tell(active.ref, StopRunner("cancelled"))

    def _tick(self, _message: SchedulerTick) -> None:
        now = time.time()
        for active in self._active.values():
            safe_tell(active.ref, WatchdogTick())
        if self._suspended:
            return  # nothing can be written until the lease is held again
        if now - self._last_renewal >= self._claim_lease_s / 3:
            self._last_renewal = now
            self._renew_claims()
            # Safety net for claims whose runner is gone without a recorded exit.
            self._writer.submit(WriteCommand("scheduler.settle_abandoned", {"active": list(self._active)},
                                             correlation_id="settle"), self.actor_ref)
        if self._active:
            self._stop_cancelled(list(self._active))
        self._expire_deadlines(now)
        self._prune_when_idle(now)
        self._try_claim()

    def _renew_claims(self) -> None:
        if not self._active:
            return
        claims = [{"run_id": a.launch.run_id, "generation": a.launch.generation,
                   "token_hash": a.launch.token_hash} for a in self._active.values()]
        self._writer.submit(WriteCommand("scheduler.renew_claims", {"claims": claims,
                                                                    "claim_lease_s": self._claim_lease_s},
                                         correlation_id="renew"), self.actor_ref)

    def _prune_when_idle(self, now: float) -> None:
        """Automatic retention: prune finished runs older than the retention, only while idle."""
        if (self._retention_s <= 0 or self._active or self._pruning
                or now - self._last_prune < self._prune_every_s):
            return
        self._last_prune = now
        self._pruning = True
        args: dict[str, Any] = {"before": now - self._retention_s, "apply": True, "max_runs": 1000}
        if self._idempotency_s > 0:
            # Idempotency records outlive their runs, for their own retention.
            args["idempotency_before"] = now - self._idempotency_s
        self._writer.submit(WriteCommand("state.prune", args, correlation_id="prune"), self.actor_ref)

    def _expire_deadlines(self, now: float) -> None:
        """Apply passed interaction deadlines (also those that passed while no host ran)."""
        assert self._reader is not None
        deadline = queries.next_deadline(self._reader)
        if deadline is not None and deadline <= now and not self._expiring:
            self._expiring = True
            self._writer.submit(WriteCommand("interaction.expire", {}, correlation_id="expire"), self.actor_ref)

    def _renewed(self, result: WriteResult) -> None:
        if not result.ok:
            log.warning("claim renewal failed: %s", result.error)
            return
        assert self._reader is not None
        for run_id, held in result.value.items():
            active = self._active.get(run_id)
            if held or active is None or active.stopping:
                continue
            status = queries.run_status(self._reader, run_id)
            if status is not None and status[0] not in ("starting", "running"):
                continue  # the run ended or parked and released its claim; its runner is finishing
            active.stopping = True
            log.warning("run %s: claim lost", run_id)
            safe_tell(active.ref, StopRunner("claimLost"))

    def _finished(self, message: RunnerFinished) -> None:
        active = self._active.pop(message.run_id, None)
        worker = message.worker
        if worker is not None and worker.alive() and not self._stopping and len(self._idle) < self._max_workers:
            self._idle.append(worker)
        elif active is not None:
            if active.worker.alive():
                active.worker.shutdown()
            self._release_child(active.worker)
        self._publish()
        self._try_claim()

    def _runner_failed(self, message: ActorFailed) -> None:
        log.error("a runner supervisor failed: %s", message.reason)

    def _publish(self) -> None:
        if self._board is not None:
            self._board.publish("scheduler", self._status(GetSchedulerStatus()))

    def _status(self, _message: GetSchedulerStatus) -> dict[str, Any]:
        return {
            "max_workers": self._max_workers,
            "active": [{"run_id": a.launch.run_id, "pid": a.worker.pid, "generation": a.launch.generation}
                       for a in self._active.values()],
            "idle_workers": [w.pid for w in self._idle],
            "launched": self._launched,
            "suspended": self._suspended,
        }
