"""The host: a short wiring function and the supervisor that stops it.

`start_host(config)` starts the parts in dependency order — lock file, store
check, supervisor, writer, lease, orphan reaping, then the rest — and
returns a `HostHandle`. Stopping goes in reverse, writer last, lock file
after it. Nothing here is global: two hosts on two state directories can run
in one process beside an application's own pykka actors, and stopping one
never touches anything it did not start (no `ActorRegistry.shut_down()`).

Standby: on a database that is not the state directory's own (`--database`,
which several hosts may name) another host may hold the lease. Then the host
starts as a **standby**: writer, gateway (reads only; mutations are answered
`unavailable` with a hint) and a `StandbyWatch` that takes the lease once it
runs out. The supervisor then starts the active parts (`_activate`, the same
function an active start uses) on a short-lived takeover thread it owns, and
turns the gateway active.

Runner host (`config.role == "runner"`, docs/runners.md): no host lease at
all. It takes a runner lease (`RunnerLease`), stamps its runner identity on
the writer handle, and starts a scheduler without the host's duties and a
gateway that serves reads (`_start_runner`). The active host watches the
runner leases (`RunnerWatch`) and recovers the work of a runner whose lease
is gone.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, Ping, safe_tell
from piwf_actors.actors.board import HostBoard
from piwf_actors.actors.channel_manager import ChannelManager
from piwf_actors.actors.gateway import BecomeActive, ClientGateway
from piwf_actors.actors.hostlock import HostLock
from piwf_actors.actors.lease import (
    GetLease,
    HostLease,
    LeaseClaim,
    LeaseLostNotice,
    LeaseRegained,
    LeaseSuspended,
    acquire_lease,
    new_host_id,
)
from piwf_actors.actors.run_events import RunEventsSubscription, Subscription
from piwf_actors.actors.runner_lease import (
    GetRunnerLease,
    RunnerClaim,
    RunnerLease,
    acquire_runner_lease,
    new_runner_id,
)
from piwf_actors.actors.runner_watch import RunnerWatch
from piwf_actors.actors.scheduler import GetSchedulerStatus, Scheduler
from piwf_actors.actors.schedules import ScheduleKeeper
from piwf_actors.actors.standby import LeaseTaken, StandbyWatch
from piwf_actors.actors.writer import WriterHandle, start_writer
from piwf_actors.api import (
    AnswerReceipt,
    ControlReceipt,
    EffectReceipt,
    PendingRequest,
    RunEvent,
    RunReceipt,
    RunSummary,
    RunView,
)
from piwf_actors.channels.config import default_config_dir
from piwf_actors.channels.telegram import TelegramOptions
from piwf_actors.config import HostConfig
from piwf_actors.errors import (
    HostAlreadyRunning,
    HostError,
    NotFound,
    RunnerHostRefusal,
    StandbyHost,
    StoreRefused,
)
from piwf_actors.operations import restart_run as _restart_run
from piwf_actors.operations import start_run as _start_run
from piwf_actors.paths import StatePaths, ensure_private_dir
from piwf_actors.runner.termination import is_same_process, machine_identity, terminate_tree
from piwf_actors.store import queries
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.reader import StoreReader
from piwf_actors.workflows.resolver import WorkflowResolver

if TYPE_CHECKING:  # imported by start_host only when metrics are on (prometheus_client stays unloaded)
    from piwf_actors.metrics import HostMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Ask the supervisor to stop the host (answered once everything is stopped)."""

    reason: str


@dataclass
class _Parts:
    """What one host started, in start order; stopped in reverse."""

    lock: HostLock | None = None
    writer: WriterHandle | None = None
    lease: pykka.ActorRef[Any] | None = None
    actors: list[tuple[str, pykka.ActorRef[Any]]] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)
    stop_reason: str | None = None
    stop_requested: bool = False  # a clean stop someone asked for (host.stop), not a failure
    stop_lock: threading.Lock = field(default_factory=threading.Lock)
    board: HostBoard = field(default_factory=HostBoard)
    resolver: WorkflowResolver = field(default_factory=WorkflowResolver)  # one cache for the API and the socket
    # The Prometheus exporter (config.metrics_address), owned by the host: created before the writer
    # (it provides the writer's batch hook), started after every actor, stopped first.
    metrics: HostMetrics | None = None
    #: The lease this host holds: set when it becomes active (at start, or when a standby takes over).
    claim: LeaseClaim | None = None
    #: Set once the active parts run (at once for an active start; at takeover for a standby).
    active: threading.Event = field(default_factory=threading.Event)
    #: A standby's takeover thread (see HostSupervisor._lease_taken), joined by shut_down.
    takeover: threading.Thread | None = None
    #: A runner host's runner lease (docs/runners.md); None on a host.
    runner: RunnerClaim | None = None

    def shut_down(self, reason: str) -> None:
        """Stop every part in reverse start order; safe to call twice, from any thread but a part's own."""
        with self.stop_lock:
            if self.stopped.is_set():
                return
            self.stop_reason = reason
            log.info("host stopping: %s", reason)
            if self.metrics is not None:
                self.metrics.stop()
            for name, ref in reversed(self.actors):
                _stop_ref(name, ref)
            if self.lease is not None:
                _stop_ref("lease", self.lease)
            if self.writer is not None:
                _stop_ref("writer", self.writer.ref)
            if self.lock is not None:
                self.lock.release()
            self.stopped.set()
            log.info("host stopped")
        takeover = self.takeover
        if takeover is not None and takeover is not threading.current_thread():
            takeover.join(timeout=30)


def _stop_ref(name: str, ref: pykka.ActorRef[Any]) -> None:
    try:
        ref.stop(block=True, timeout=30)
    except pykka.ActorDeadError:
        pass
    except pykka.Timeout:
        log.error("%s did not stop within 30 s", name)


class HostSupervisor(CoreActor):
    """Escalation point: any core actor's failure or the lease's loss stops the host (one-for-all).

    Stopping happens on a separate short-lived thread because the supervisor
    must not block its own mailbox while waiting for actors that may be
    telling it things.
    """

    actor_name = "supervisor"

    def __init__(self, parts: _Parts,
                 take_over: Callable[[LeaseTaken, pykka.ActorRef[Any]], None] | None = None) -> None:
        """Runs in the caller's thread. `take_over(message)` starts the active parts of a standby that
        took the lease; it blocks on the writer, so it runs on a thread of its own (see _lease_taken)."""
        super().__init__(None)
        self._parts = parts
        self._take_over = take_over

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {ActorFailed: self._failed, LeaseLostNotice: self._lease_lost, Shutdown: self._shutdown,
                LeaseSuspended: self._to_scheduler, LeaseRegained: self._to_scheduler,
                LeaseTaken: self._lease_taken}

    def _lease_taken(self, message: LeaseTaken) -> None:
        """A standby holds the lease now: start the active parts.

        Starting them means waiting for the writer (orphans released, runs
        recovered) and for each actor's first answer, which an actor's
        handler must not do; like stopping, it runs on a short-lived thread
        that the host owns (`_Parts.takeover`, joined when it stops). It
        holds the stop lock while it starts parts, so a stop waits for it
        and then stops everything it started.
        """
        if self._take_over is None or self._parts.takeover is not None:
            return
        take_over = self._take_over
        self._parts.takeover = threading.Thread(target=take_over, args=(message, self.actor_ref),
                                                name="piwf-host-takeover", daemon=False)
        self._parts.takeover.start()

    def _to_scheduler(self, message: LeaseSuspended | LeaseRegained) -> None:
        """The lease paused (disk full) or came back at a higher epoch: the scheduler pauses claims,
        or adopts its live claims under the new epoch and resumes."""
        for name, ref in self._parts.actors:
            if name == "scheduler":
                safe_tell(ref, message)

    def _failed(self, message: ActorFailed) -> None:
        self._stop_in_background(f"{message.actor} failed: {message.reason}")

    def _lease_lost(self, message: LeaseLostNotice) -> None:
        reason = message.reason if "lost" in message.reason else f"lease for epoch {message.epoch} lost: {message.reason}"
        self._stop_in_background(reason)

    def _shutdown(self, message: Shutdown) -> None:
        self._parts.stop_requested = True
        self._stop_in_background(message.reason)

    def _stop_in_background(self, reason: str) -> None:
        if self._parts.stopped.is_set() or self._parts.stop_reason is not None:
            return
        self._parts.stop_reason = reason

        def run() -> None:
            self._parts.stop_reason = None
            self._parts.shut_down(reason)
            try:
                self.actor_ref.stop(block=False)
            except pykka.ActorDeadError:
                pass

        threading.Thread(target=run, name="piwf-host-stop", daemon=False).start()



def _embedded_peer() -> dict[str, Any]:
    """Who answers through the embedding API: this process (recorded with the answer)."""
    return {"via": "embedded", "pid": os.getpid(), "uid": os.getuid()}

class HostHandle:
    """What `start_host` returns: the embedding API, the host's actor refs and its controls.

    Results are typed (`piwf_actors.api`: frozen dataclasses) and also read
    as the dicts the client protocol sends (`receipt["receipt"]["run_id"]`).
    Refusals are typed errors (`piwf_actors.errors`): `NotFound`, `Rejected`
    (not allowed in the run's state), `Conflict` (a stale `expected_revision`,
    an idempotency key reused for another request), `WorkflowNotFound` /
    `WorkflowLoadFailed`, `DiskFull` / `ReadOnlyDatabase`, `WriterStopped`, and
    `StandbyHost` for a mutation while the host is a standby (`role`).

    Every method here is an edge call: it may block for a read or for the
    writer's commit. Call them from the application's own threads (its main
    thread, a worker thread), not from inside an actor's handler; to follow
    runs from an actor, `subscribe` it.
    """

    #: The name subscriptions are listed under among the host's parts (`_Parts.actors`).
    _SUBSCRIPTION = "run-events"

    def __init__(self, config: HostConfig, paths: StatePaths, parts: _Parts,
                 supervisor: pykka.ActorRef[Any]) -> None:
        self.config = config
        self.paths = paths
        self._parts = parts
        self.supervisor = supervisor
        self._resolver = parts.resolver

    @property
    def claim(self) -> LeaseClaim | None:
        """The lease this host holds; None while it is a standby."""
        return self._parts.claim

    @property
    def role(self) -> str:
        """`active` (it holds the lease and runs everything), `standby` (it serves reads and waits) or
        `runner` (a runner host: it executes runs from the shared queue and serves reads)."""
        if self._parts.runner is not None:
            return "runner"
        return "active" if self._parts.active.is_set() else "standby"

    @property
    def runner(self) -> RunnerClaim | None:
        """A runner host's runner lease (token included: it stays in this process); None on a host."""
        return self._parts.runner

    def wait_active(self, timeout: float | None = None) -> bool:
        """Block until this host is active (a standby: until it took over); True if it is."""
        return self._parts.active.wait(timeout)

    @property
    def epoch(self) -> int | None:
        """The host epoch now (it grows when the host takes its lease again after a full disk);
        None while the host is a standby."""
        epoch = self.writer.host_epoch
        claim = self._parts.claim
        return epoch if epoch is not None else (claim.epoch if claim is not None else None)

    def _require_active(self) -> None:
        """Raise StandbyHost (naming the active host) unless this host is active."""
        if self._parts.active.is_set():
            return
        lease = self._read(lambda r: queries.lease_row(r, time.time()))
        if self._parts.runner is not None:
            raise RunnerHostRefusal(lease["host_id"], lease["epoch"], lease["live"])
        raise StandbyHost(lease["host_id"], lease["epoch"], lease["live"])

    @property
    def writer(self) -> WriterHandle:
        assert self._parts.writer is not None
        return self._parts.writer

    @property
    def lease(self) -> pykka.ActorRef[Any]:
        """The HostLease actor (only once the host is active)."""
        assert self._parts.lease is not None, "a standby host holds no lease"
        return self._parts.lease

    @property
    def stopped(self) -> bool:
        return self._parts.stopped.is_set()

    @property
    def stop_reason(self) -> str | None:
        return self._parts.stop_reason

    @property
    def stop_requested(self) -> bool:
        """True when the host stopped because someone asked it to (host.stop), not because of a failure."""
        return self._parts.stop_requested

    def actor(self, name: str) -> pykka.ActorRef[Any] | None:
        for actor_name, ref in self._parts.actors:
            if actor_name == name:
                return ref
        return None

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """Lease, writer and run counts, read through a fresh read-only connection."""
        reader = StoreReader(self.paths.database)
        try:
            now = time.time()
            stats = self.writer.stats(timeout)
            lease = self._parts.lease if self._parts.runner is None else None
            scheduler = self.actor("scheduler")
            runner_lease = self._parts.lease if self._parts.runner is not None else None
            return {
                "state_dir": str(self.paths.root),
                "role": self.role,
                # The lease row (on a standby or a runner: the active host's), and this host's own view of its lease.
                "lease": {**queries.lease_row(reader, now),
                          **(lease.ask(GetLease(), timeout=timeout) if lease is not None else {})},
                "runner": runner_lease.ask(GetRunnerLease(), timeout=timeout) if runner_lease is not None else None,
                "runners": queries.runner_hosts(reader, now),
                "writer": {"queue_depth": stats.queue_depth, "commits": stats.commits, "commands": stats.commands,
                           "commits_per_s": round(stats.commits_per_s, 2),
                           "commands_per_s": round(stats.commands_per_s, 2)},
                "runs": queries.run_counts(reader),
                "scheduler": scheduler.ask(GetSchedulerStatus(), timeout=timeout) if scheduler is not None else None,
            }
        finally:
            reader.close()

    # --- runs (the embedding API; the client protocol offers the same operations) ---

    def _read(self, fn: Callable[[StoreReader], Any]) -> Any:
        reader = StoreReader(self.paths.database)
        try:
            return fn(reader)
        finally:
            reader.close()

    def start_run(self, workflow: str, input: Any = None, *, project_path: str | None = None,
                  session_id: str | None = None, run_id: str | None = None, client_id: str | None = None,
                  idempotency_key: str | None = None) -> RunReceipt:
        """Queue a run of `workflow`: a discovered name, `module:attr` or `file.py[:attr]`.

        Names are resolved like the CLI does: `project_path` (default: the
        current directory) is the project, so a workflow in
        `./.piwf/workflows/` is found by name, and a relative file path is
        relative to it. The workflow file is read here, in the calling thread.
        With `client_id` and `idempotency_key`, a repeated call returns the
        first receipt with outcome `adopted`. Raises WorkflowNotFound,
        WorkflowLoadFailed, Rejected (input that is not JSON), Conflict.
        """
        self._require_active()
        project = os.path.abspath(project_path if project_path is not None else os.getcwd())
        return RunReceipt.from_wire(_start_run(
            self.writer, self._resolver, workflow=workflow, input=input, project_path=project,
            session_id=session_id, run_id=run_id, client_id=client_id, idempotency_key=idempotency_key))

    def get_run(self, run_id: str) -> RunView | None:
        """The run's view (status, values, nodes, effects) read in one snapshot; None if no such run."""
        view = self._read(lambda r: queries.run_view(r, run_id))
        return None if view is None else RunView.from_wire(view)

    def list_runs(self, status: str | None = None, limit: int = 100) -> list[RunSummary]:
        """The newest `limit` runs (with `status` only, if given), newest first."""
        return [RunSummary.from_wire(row) for row in self._read(lambda r: queries.run_list(r, status, limit))]

    def read_content(self, digest: str) -> bytes:
        """The bytes of a stored value that `get_run` showed as `{"$content": digest, …}` (its
        canonical JSON). Raises NotFound when no such value is stored."""

        def read(reader: StoreReader) -> bytes:
            data = bytearray()
            while True:
                chunk = queries.content_chunk(reader, digest, len(data))
                if chunk is None:
                    raise NotFound("content", digest)
                data += chunk["data"]
                if len(data) >= chunk["total_bytes"] or not chunk["data"]:
                    return bytes(data)

        return self._read(read)

    def run_events(self, run_id: str, after: int = 0, limit: int = 500) -> list[RunEvent]:
        """The run's trace: up to `limit` events with `seq` greater than `after`, in order."""
        return [RunEvent.from_wire(row) for row in self._read(lambda r: queries.run_events(r, run_id, after, limit))]

    def _control(self, name: str, run_id: str, expected_revision: int | None, client_id: str | None,
                 idempotency_key: str | None) -> ControlReceipt:
        self._require_active()
        args = {"run_id": run_id, "expected_revision": expected_revision, "client_id": client_id,
                "idempotency_key": idempotency_key}
        return ControlReceipt.from_wire(self.writer.call(name, {k: v for k, v in args.items() if v is not None}))

    def cancel_run(self, run_id: str, *, expected_revision: int | None = None, client_id: str | None = None,
                   idempotency_key: str | None = None) -> ControlReceipt:
        """Cancel a run: a queued or parked one at once (`cancelled`), an active one at its worker's
        next step (`cancelling`). Raises Rejected for a finished run, Conflict for a stale revision."""
        return self._control("run.cancel", run_id, expected_revision, client_id, idempotency_key)

    def pause_run(self, run_id: str, *, expected_revision: int | None = None, client_id: str | None = None,
                  idempotency_key: str | None = None) -> ControlReceipt:
        """Pause a run: a queued one parks at once, an active one at its next node boundary (`pausing`)."""
        return self._control("run.pause", run_id, expected_revision, client_id, idempotency_key)

    def resume_run(self, run_id: str, *, expected_revision: int | None = None, client_id: str | None = None,
                   idempotency_key: str | None = None) -> ControlReceipt:
        """Resume a paused run, or retry one parked `no_progress`."""
        return self._control("run.resume", run_id, expected_revision, client_id, idempotency_key)

    def restart_run(self, run_id: str, *, expected_revision: int, from_node: str | None = None,
                    same_code: bool = False, client_id: str | None = None,
                    idempotency_key: str | None = None) -> RunReceipt:
        """A new run (`parent_run_id` = `run_id`) with a finished run's input.

        Only a done, failed or cancelled run at `expected_revision`, without
        unsettled effects. It runs the workflow file's current code
        (`digest_changed` in the receipt says whether that differs from the
        parent's) or, with `same_code`, the parent's stored snapshot; with
        `from_node` it starts at that node, the parent's earlier outputs
        copied. One restart per (run, revision, from_node, code): a second is
        `adopted`. Raises Rejected, Conflict, NotFound.
        """
        self._require_active()
        return RunReceipt.from_wire(_restart_run(
            self.writer, self._resolver, self.paths.database, run_id=run_id, expected_revision=expected_revision,
            from_node=from_node, same_code=same_code, client_id=client_id, idempotency_key=idempotency_key))

    def resolve_effect(self, effect_id: str, action: str, output: Any = None, *, client_id: str | None = None,
                       idempotency_key: str | None = None) -> EffectReceipt:
        """Settle an `ambiguous` effect: `confirm` (it happened; `output` becomes the node's output)
        or `retry` (run the node again); the run goes back to the queue."""
        self._require_active()
        args = {"effect_id": effect_id, "action": action, "output": output, "client_id": client_id,
                "idempotency_key": idempotency_key,
                "payload": {"effect_id": effect_id, "action": action, "output": output}}
        return EffectReceipt.from_wire(self.writer.call("effect.resolve", args))

    # --- people in the loop ---

    def pending_interactions(self, session_id: str | None = None) -> list[PendingRequest]:
        """Open decisions, checkpoints and agent requests (those addressed to `session_id` or to
        nobody in particular; all of them when None), oldest first."""
        found = self._read(lambda r: queries.pending_interactions(r, session_id))
        return [PendingRequest.from_wire(request) for request in found["requests"]]

    def answer_decision(self, request_id: str, choice: str, *, input: dict[str, Any] | None = None,
                        expected_revision: int | None = None, session_id: str | None = None,
                        client_id: str | None = None, idempotency_key: str | None = None) -> AnswerReceipt:
        """Answer a human decision with one of its choices (and that choice's `input`, if it has one).

        Checked against the decision's contract (Rejected if it does not fit);
        the first valid answer wins, a later one is a Conflict, and so is a
        stale `expected_revision` (the request's revision in
        `pending_interactions`). The run goes back to the queue.
        """
        self._require_active()
        response: dict[str, Any] = {"choice": choice}
        if input is not None:
            response["input"] = input
        return AnswerReceipt.from_wire(self.writer.call("decision.answer", {
            "request_id": request_id, "response": response, "expected_revision": expected_revision,
            "session_id": session_id, "client_id": client_id, "idempotency_key": idempotency_key,
            "payload": {"request_id": request_id, "response": response}, "peer": _embedded_peer()}))

    def answer_checkpoint(self, request_id: str, value: Any, *, session_id: str | None = None,
                          client_id: str | None = None, idempotency_key: str | None = None) -> AnswerReceipt:
        """Answer a checkpoint: `value` (any JSON value) becomes the checkpoint node's output and the
        run goes back to the queue. A second answer is a Conflict."""
        self._require_active()
        return AnswerReceipt.from_wire(self.writer.call("checkpoint.answer", {
            "request_id": request_id, "input": value, "session_id": session_id, "client_id": client_id,
            "idempotency_key": idempotency_key, "payload": {"request_id": request_id, "input": value},
            "peer": _embedded_peer()}))

    # --- following runs ---

    def subscribe(self, actor_ref: pykka.ActorRef[Any], runs: Iterable[str] | str | None = None) -> Subscription:
        """Tell `actor_ref` what happens to runs: `RunStarted`, `NodeFinished`, `RunParked`,
        `RunFinished` (`piwf_actors.api`), without polling.

        `runs=None`: every run, from now on. `runs=[ids]`: those runs only,
        each from its first event (nothing is missed between `start_run` and
        `subscribe`). A small actor of the host does the reading; it only
        `tell`s, so the subscriber may be any actor and is never waited on.
        The subscription ends with `unsubscribe()`, with `host.stop()`, or
        when `actor_ref` has stopped. Safe to call from an actor's handler.
        Raises HostError once the host has stopped.
        """
        if not isinstance(actor_ref, pykka.ActorRef):
            raise TypeError(f"subscribe needs a pykka ActorRef, got {type(actor_ref).__name__}")
        wanted = None if runs is None else frozenset([runs] if isinstance(runs, str) else runs)
        with self._parts.stop_lock:  # held by shut_down while it stops the parts
            if self._parts.stopped.is_set():
                raise HostError(f"the host has stopped ({self._parts.stop_reason}); nothing to subscribe to")
            ref = RunEventsSubscription.start(self.writer.ref, self.paths.database, actor_ref, runs=wanted,
                                              since=time.time())
            # Owned by the host: shut_down stops it (first: it was started last). Ended ones are dropped
            # here; they always sit after the core actors, so no lookup of those is disturbed.
            for entry in [e for e in self._parts.actors if e[0] == self._SUBSCRIPTION and not e[1].is_alive()]:
                self._parts.actors.remove(entry)
            self._parts.actors.append((self._SUBSCRIPTION, ref))
        return Subscription(ref, wanted)

    def wait_for_run(self, run_id: str, statuses: tuple[str, ...] = ("done", "failed", "cancelled"),
                     timeout: float = 30.0, poll_s: float = 0.02) -> RunView:
        """Poll (with a deadline) until the run reaches one of `statuses`; returns its view.
        Raises TimeoutError. (An actor should `subscribe` instead.)"""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get_run(run_id)
            if view is not None and view.status in statuses:
                return view
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is {view and view.status} after {timeout} s")
            time.sleep(poll_s)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the host has stopped (for any reason); True if it has."""
        return self._parts.stopped.wait(timeout)

    def stop(self, reason: str = "stop requested") -> None:
        """Stop every actor this host started (reverse order: subscriptions first, writer last) and
        release the lock."""
        self._parts.shut_down(reason)
        try:
            self.supervisor.stop(block=True, timeout=10)
        except (pykka.ActorDeadError, pykka.Timeout):
            pass

    def __enter__(self) -> HostHandle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def start_host(config: HostConfig | None = None) -> HostHandle:
    """Start a host on `config.state_dir` and return its handle.

    On a database other hosts may name (`config.database` other than the
    state directory's own) whose lease another host holds, the host starts
    as a standby (`handle.role`, `handle.wait_active()`) unless
    `config.standby` is False. Raises HostAlreadyRunning, StoreRefused,
    UnsafePath or LeaseLost and then leaves nothing running. Runs in the
    caller's thread.
    """
    config = config or HostConfig()
    try:
        paths = StatePaths.resolve(config.state_dir, config.database)
    except ValueError as exc:
        raise StoreRefused(str(config.database), str(exc)) from None
    if config.role == "runner" and paths.default_database:
        raise HostError("a runner host needs --database naming the database the active host uses "
                        "(it shares that host's queue; see docs/runners.md)")
    ensure_private_dir(paths.root)
    parts = _Parts()
    parts.lock = HostLock.acquire(paths.lock, str(paths.root))
    supervisor: pykka.ActorRef[Any] | None = None
    try:
        options = StoreOptions(synchronous=config.synchronous.upper())
        open_store(paths.database, options).close()
        supervisor = HostSupervisor.start(parts, functools.partial(_take_over, parts, config, paths))
        if config.metrics_address is not None:
            from piwf_actors.metrics import HostMetrics

            parts.metrics = HostMetrics(config.metrics_address, paths.database, options, parts.board)
        parts.writer = start_writer(paths.database, options, supervisor=supervisor, board=parts.board,
                                    batch_observer=parts.metrics.observe_batch if parts.metrics else None)
        _require_started("writer", parts.writer.ref)
        if config.role == "runner":
            _start_runner(parts, config, paths, supervisor)
            if parts.metrics is not None:
                parts.metrics.start()
            assert parts.runner is not None
            log.info("runner host %s started at runner epoch %d (pid %d, %d worker(s), state %s, database %s)",
                     parts.runner.runner_id, parts.runner.epoch, parts.runner.pid, config.max_workers, paths.root,
                     paths.database)
            return HostHandle(config, paths, parts, supervisor)
        host_id = config.host_id or new_host_id()
        reader = StoreReader(paths.database, options)
        try:
            claim = acquire_lease(parts.writer, lambda: queries.lease_holder(reader), lease_s=config.lease_s,
                                  state_dir=str(paths.root), host_id=host_id,
                                  lock_guards_database=paths.default_database)
        except HostAlreadyRunning:
            if paths.default_database or not config.standby:
                raise
            claim = None
        finally:
            reader.close()
        if claim is not None:
            channels, keeper = _activate(parts, config, paths, claim, supervisor)
            _start_gateway(parts, config, paths, supervisor, channels=channels, schedules=keeper, standby=False)
        else:
            parts.board.publish("role", {"role": "standby", "host_id": host_id})
            _start_gateway(parts, config, paths, supervisor, channels=None, schedules=None, standby=True)
            watch = StandbyWatch.start(parts.writer, paths.database, supervisor=supervisor, host_id=host_id,
                                       lease_s=config.lease_s, state_dir=str(paths.root), board=parts.board)
            parts.actors.append(("standby", watch))
            _require_started("standby", watch)
        if parts.metrics is not None:
            parts.metrics.start()  # after every actor: a scrape sees the host whole
        # Logged once everything runs: a client may connect from this line on.
        if claim is not None:
            log.info("host started at epoch %d (pid %d, state %s)", claim.epoch, claim.pid, paths.root)
        else:
            log.info("host started as standby %s (pid %d, state %s, database %s); it takes over when the active "
                     "host's lease runs out", host_id, os.getpid(), paths.root, paths.database)
    except BaseException:
        parts.shut_down("start-up failed")
        if supervisor is not None:
            _stop_ref("supervisor", supervisor)
        raise
    return HostHandle(config, paths, parts, supervisor)


def _activate(parts: _Parts, config: HostConfig, paths: StatePaths, claim: LeaseClaim,
              supervisor: pykka.ActorRef[Any]) -> tuple[pykka.ActorRef[Any], pykka.ActorRef[Any] | None]:
    """Start what only the lease holder runs, in order: lease renewal, orphan reaping, recovery of
    earlier hosts' runs, scheduler, channels, schedules. Returns the channel manager and the schedule
    keeper (None when `config.schedules` is off): the gateway needs them.

    Runs in start_host's thread, or in a standby's takeover thread; either may block on the writer.
    """
    assert parts.writer is not None
    parts.claim = claim
    parts.writer.advance_epoch(claim.epoch)  # the one handle every part holds stamps the epoch from now on
    parts.lease = HostLease.start(parts.writer, claim, supervisor=supervisor, board=parts.board,
                                  claim_lease_s=config.claim_lease_s)
    _require_started("lease", parts.lease)
    reader = StoreReader(paths.database)
    try:
        reap_orphans(reader, parts.writer, grace_s=config.reap_grace_s, epoch=claim.epoch)
        recovered = parts.writer.call("host.recover", {})["runs"]
        if recovered:
            log.info("recovered %d run(s) from earlier hosts: %s", len(recovered),
                     ", ".join(f"{run_id} → {status}" for run_id, status in recovered.items()))
        reconciles = parts.writer.call("resource.recover", {})
        if reconciles:
            log.info("reconciles interrupted by an earlier host, due again: %s", ", ".join(reconciles))
    finally:
        reader.close()
    _start_scheduler(parts, config, paths, supervisor, host_duties=True)
    # Runner hosts that share the queue: their leases are watched, the work of a dead one recovered.
    watch = RunnerWatch.start(parts.writer, paths.database, supervisor=supervisor, board=parts.board,
                              poll_s=min(max(config.lease_s / 10, 0.05), 0.5), grace_s=config.reap_grace_s)
    parts.actors.append(("runner-watch", watch))
    _require_started("runner-watch", watch)
    channels = ChannelManager.start(
        parts.writer, paths.database,
        config_dir=Path(config.config_dir) if config.config_dir is not None else default_config_dir(),
        supervisor=supervisor, board=parts.board, poll_timeout_s=config.channel_poll_timeout_s,
        channel_options={"telegram": TelegramOptions(api_base=config.telegram_api_base)})
    parts.actors.append(("channels", channels))
    _require_started("channels", channels)
    keeper = None
    if config.schedules:  # only the active host fires schedules (actors/schedules.py)
        keeper = ScheduleKeeper.start(parts.writer, paths.database, projects=config.projects,
                                      supervisor=supervisor, board=parts.board, resolver=parts.resolver)
        parts.actors.append(("schedules", keeper))
        _require_started("schedules", keeper)
    parts.board.publish("role", {"role": "active", "host_id": claim.host_id})
    parts.active.set()
    return channels, keeper


def _start_scheduler(parts: _Parts, config: HostConfig, paths: StatePaths, supervisor: pykka.ActorRef[Any], *,
                     host_duties: bool) -> None:
    """The scheduler and its worker slots: the active host's (`host_duties`: also reconciles, deadlines and
    pruning), or a runner host's (runs only; it looks at the shared queue every 0.1 s, since the runs other
    hosts queue send it no change notice)."""
    assert parts.writer is not None
    scheduler = Scheduler.start(parts.writer, paths.database, max_workers=config.max_workers,
                                supervisor=supervisor, claim_lease_s=config.claim_lease_s,
                                warm_workers=config.warm_workers, grace_s=config.reap_grace_s,
                                board=parts.board, retention_days=config.retention_days if host_duties else 0.0,
                                prune_every_s=config.prune_every_s, idempotency_days=config.idempotency_days,
                                watchdog_grace_s=config.watchdog_grace_s,
                                worker_ready_timeout_s=config.worker_ready_timeout_s,
                                worker_log_level=config.log_level, worker_log_format=config.log_format,
                                host_duties=host_duties, tick_s=0.5 if host_duties else 0.1)
    parts.actors.append(("scheduler", scheduler))
    _require_started("scheduler", scheduler)


def _start_runner(parts: _Parts, config: HostConfig, paths: StatePaths, supervisor: pykka.ActorRef[Any]) -> None:
    """A runner host's parts, in order: its runner lease (taken here, renewed by `RunnerLease`), the writer
    handle stamped with its runner identity, the scheduler (runs only), the gateway (reads only).
    Nothing of the active host's: no host lease, recovery, reaping, channels, schedules or pruning."""
    assert parts.writer is not None
    claim = acquire_runner_lease(parts.writer, runner_id=config.host_id or new_runner_id(), lease_s=config.lease_s,
                                 max_workers=config.max_workers, state_dir=str(paths.root))
    parts.runner = claim
    parts.writer.as_runner(claim.runner_id, claim.epoch)
    parts.lease = RunnerLease.start(parts.writer, claim, supervisor=supervisor, board=parts.board)
    _require_started("runner-lease", parts.lease)
    parts.board.publish("role", {"role": "runner", "host_id": claim.runner_id})
    _start_scheduler(parts, config, paths, supervisor, host_duties=False)
    _start_gateway(parts, config, paths, supervisor, channels=None, schedules=None, standby=True, runner=True)


def _start_gateway(parts: _Parts, config: HostConfig, paths: StatePaths, supervisor: pykka.ActorRef[Any], *,
                   channels: pykka.ActorRef[Any] | None, schedules: pykka.ActorRef[Any] | None,
                   standby: bool, runner: bool = False) -> None:
    assert parts.writer is not None
    gateway = ClientGateway.start(
        parts.writer, paths.database, paths.socket, host_epoch=parts.claim.epoch if parts.claim else 0,
        supervisor=supervisor, board=parts.board, limits=config.limits, resolver=parts.resolver,
        channels=channels, schedules=schedules, shutdown=lambda reason: supervisor.tell(Shutdown(reason)),
        standby=standby, runner=runner)
    parts.actors.append(("gateway", gateway))
    _require_started("gateway", gateway)


def _take_over(parts: _Parts, config: HostConfig, paths: StatePaths, message: LeaseTaken,
               supervisor: pykka.ActorRef[Any]) -> None:
    """A standby took the lease: start the active parts, then turn the gateway active.

    Runs on the supervisor's takeover thread, holding the stop lock (a stop
    waits, then stops all of it). A failure here stops the host: it holds a
    lease it cannot serve; the stop gives it back.
    """
    claim = message.claim
    try:
        with parts.stop_lock:
            if parts.stopped.is_set() or parts.stop_reason is not None:
                log.info("took the lease at epoch %d while stopping; giving it back", claim.epoch)
                if parts.writer is not None:
                    parts.writer.execute("lease.release", claim.identity_args(), timeout=5)
                return
            channels, keeper = _activate(parts, config, paths, claim, supervisor)
            for name, ref in list(parts.actors):
                if name == "gateway":
                    safe_tell(ref, BecomeActive(claim.epoch, channels, keeper))
                elif name == "standby":  # the watch has done its job
                    parts.actors.remove((name, ref))
                    _stop_ref(name, ref)
        log.warning("host active at epoch %d: took over from %s (epoch %d)", claim.epoch,
                    message.previous_host_id or "no host", message.previous_epoch)
    except Exception as exc:
        log.exception("taking over failed")
        safe_tell(supervisor, ActorFailed("takeover", f"{type(exc).__name__}: {exc}"))


def _require_started(name: str, ref: pykka.ActorRef[Any]) -> None:
    try:
        ref.ask(Ping(), timeout=30)
    except pykka.ActorDeadError:
        raise HostError(f"{name} failed to start (see the log)") from None


def reap_orphans(reader: StoreReader, writer: WriterHandle, *, grace_s: float, epoch: int | None = None,
                 machine_id: str | None = None) -> int:
    """Terminate every registered child an earlier host left running on this machine; return how many.

    Each child is matched by (pid, create_time), so a pid reused by an
    unrelated process is never signalled, and by the machine that
    registered it (`machine_id`, default this one's): a pid registered on
    another machine means nothing here, so such a child is only released
    (the runs it served are recovered all the same) and never signalled.
    A row without a machine (registered before schema v7) is from this
    machine: the state directory's own database was the only one then.
    A runner host's children are not an earlier host's: they are left to
    the runner while its lease lives and to `RunnerWatch` after.
    Children registered at `epoch` or later are not an earlier host's and
    are left alone. Runs before the scheduler starts.
    """
    here = machine_identity() if machine_id is None else machine_id
    reaped = 0
    for child in queries.unreleased_children(reader):
        if epoch is not None and child["host_epoch"] >= epoch:
            continue
        if child["runner_id"] is not None:
            continue  # a runner host's: its own while its lease lives, then RunnerWatch's (runners.recover)
        elsewhere = child["machine_id"] not in (None, here)
        if elsewhere:
            log.info("released %s pid %d (run %s) of machine %s without signalling it: not this machine",
                     child["kind"], child["pid"], child["run_id"], child["machine_id"])
        elif is_same_process(child["pid"], child["create_time"]):
            terminate_tree(child["pid"], child["create_time"], grace_s=grace_s)
            reaped += 1
            log.info("reaped orphan %s pid %d (run %s)", child["kind"], child["pid"], child["run_id"])
        writer.call("child.release", {"pid": child["pid"], "create_time": child["create_time"],
                                      "run_id": child["run_id"]})
    return reaped
