"""The host: a short wiring function and the supervisor that stops it.

`start_host(config)` starts the parts in dependency order — lock file, store
check, supervisor, writer, lease, orphan reaping, then the rest — and
returns a `HostHandle`. Stopping goes in reverse, writer last, lock file
after it. Nothing here is global: two hosts on two state directories can run
in one process beside an application's own pykka actors, and stopping one
never touches anything it did not start (no `ActorRegistry.shut_down()`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, Ping, safe_tell
from piwf_actors.actors.channel_manager import ChannelManager
from piwf_actors.actors.gateway import ClientGateway
from piwf_actors.actors.lease import (
    GetLease,
    HostLease,
    LeaseClaim,
    LeaseLostNotice,
    LeaseRegained,
    LeaseSuspended,
    acquire_lease,
)
from piwf_actors.actors.scheduler import GetSchedulerStatus, Scheduler
from piwf_actors.actors.writer import WriterHandle, start_writer
from piwf_actors.board import HostBoard
from piwf_actors.channels.config import default_config_dir
from piwf_actors.channels.telegram import TelegramOptions
from piwf_actors.config import HostConfig
from piwf_actors.errors import HostError, NotFound
from piwf_actors.hostlock import HostLock
from piwf_actors.operations import WorkflowResolver
from piwf_actors.operations import start_run as _start_run
from piwf_actors.runner.termination import is_same_process, terminate_tree
from piwf_actors.store import queries
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.paths import StatePaths, ensure_private_dir
from piwf_actors.store.reader import StoreReader

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

    def shut_down(self, reason: str) -> None:
        """Stop every part in reverse start order; safe to call twice, from any thread but a part's own."""
        with self.stop_lock:
            if self.stopped.is_set():
                return
            self.stop_reason = reason
            log.info("host stopping: %s", reason)
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

    def __init__(self, parts: _Parts) -> None:
        super().__init__(None)
        self._parts = parts

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {ActorFailed: self._failed, LeaseLostNotice: self._lease_lost, Shutdown: self._shutdown,
                LeaseSuspended: self._to_scheduler, LeaseRegained: self._to_scheduler}

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


class HostHandle:
    """What `start_host` returns: the actor refs and the host's controls."""

    def __init__(self, config: HostConfig, paths: StatePaths, parts: _Parts, claim: LeaseClaim,
                 supervisor: pykka.ActorRef[Any]) -> None:
        self.config = config
        self.paths = paths
        self._parts = parts
        self.claim = claim
        self.supervisor = supervisor
        self._resolver = parts.resolver

    @property
    def epoch(self) -> int:
        """The host epoch now (it grows when the host takes its lease again after a full disk)."""
        epoch = self.writer.host_epoch
        return self.claim.epoch if epoch is None else epoch

    @property
    def writer(self) -> WriterHandle:
        assert self._parts.writer is not None
        return self._parts.writer

    @property
    def lease(self) -> pykka.ActorRef[Any]:
        assert self._parts.lease is not None
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
            return {
                "state_dir": str(self.paths.root),
                "lease": {**queries.lease_row(reader, now), **self.lease.ask(GetLease(), timeout=timeout)},
                "writer": {"queue_depth": stats.queue_depth, "commits": stats.commits, "commands": stats.commands,
                           "commits_per_s": round(stats.commits_per_s, 2),
                           "commands_per_s": round(stats.commands_per_s, 2)},
                "runs": queries.run_counts(reader),
                "scheduler": self.actor("scheduler").ask(GetSchedulerStatus(), timeout=timeout),
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
                  idempotency_key: str | None = None) -> dict[str, Any]:
        """Queue a run of `workflow` (a discovered name, `module:attr` or `file.py[:attr]`).

        Returns {outcome: accepted | adopted, receipt: {run_id, status, revision}}. With a client id and
        idempotency key, a repeated call returns the first receipt (`adopted`).
        """
        return _start_run(self.writer, self._resolver, workflow=workflow, input=input, project_path=project_path,
                          session_id=session_id, run_id=run_id, client_id=client_id,
                          idempotency_key=idempotency_key)

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        return self._read(lambda r: queries.run_view(r, run_id))

    def list_runs(self, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return self._read(lambda r: queries.run_list(r, status, limit))

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

    def run_events(self, run_id: str, after: int = 0, limit: int = 500) -> list[dict[str, Any]]:
        return self._read(lambda r: queries.run_events(r, run_id, after, limit))

    def _control(self, name: str, run_id: str, **kwargs: Any) -> dict[str, Any]:
        args = {"run_id": run_id, **{k: v for k, v in kwargs.items() if v is not None}}
        return self.writer.call(name, args)

    def cancel_run(self, run_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._control("run.cancel", run_id, **kwargs)

    def pause_run(self, run_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._control("run.pause", run_id, **kwargs)

    def resume_run(self, run_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._control("run.resume", run_id, **kwargs)

    def restart_run(self, run_id: str, *, expected_revision: int, **kwargs: Any) -> dict[str, Any]:
        """A new run of a finished run's snapshot and input (only a done, failed or cancelled run
        without unsettled effects; one per revision: a second call is `adopted`)."""
        return self._control("run.restart", run_id, expected_revision=expected_revision, **kwargs)

    def resolve_effect(self, effect_id: str, action: str, output: Any = None) -> dict[str, Any]:
        return self.writer.call("effect.resolve", {"effect_id": effect_id, "action": action, "output": output})

    def wait_for_run(self, run_id: str, statuses: tuple[str, ...] = ("done", "failed", "cancelled"),
                     timeout: float = 30.0, poll_s: float = 0.02) -> dict[str, Any]:
        """Poll (with a deadline) until the run reaches one of `statuses`; returns its view."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get_run(run_id)
            if view is not None and view["status"] in statuses:
                return view
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is {view and view['status']} after {timeout} s")
            time.sleep(poll_s)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the host has stopped (for any reason); True if it has."""
        return self._parts.stopped.wait(timeout)

    def stop(self, reason: str = "stop requested") -> None:
        """Stop every actor this host started (reverse order) and release the lock."""
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

    Raises HostAlreadyRunning, StoreRefused, UnsafePath or LeaseLost and then
    leaves nothing running. Runs in the caller's thread.
    """
    config = config or HostConfig()
    paths = StatePaths.resolve(config.state_dir)
    ensure_private_dir(paths.root)
    parts = _Parts()
    parts.lock = HostLock.acquire(paths.lock, str(paths.root))
    supervisor: pykka.ActorRef[Any] | None = None
    try:
        options = StoreOptions(synchronous=config.synchronous.upper())
        open_store(paths.database, options).close()
        supervisor = HostSupervisor.start(parts)
        parts.writer = start_writer(paths.database, options, supervisor=supervisor, board=parts.board)
        _require_started("writer", parts.writer.ref)
        reader = StoreReader(paths.database, options)
        try:
            claim = acquire_lease(parts.writer, lambda: queries.lease_holder(reader), lease_s=config.lease_s,
                                  state_dir=str(paths.root), host_id=config.host_id)
            parts.writer = parts.writer.with_epoch(claim.epoch)
            parts.lease = HostLease.start(parts.writer, claim, supervisor=supervisor, board=parts.board,
                                          claim_lease_s=config.claim_lease_s)
            _require_started("lease", parts.lease)
            reap_orphans(reader, parts.writer, grace_s=config.reap_grace_s)
            recovered = parts.writer.call("host.recover", {})["runs"]
            if recovered:
                log.info("recovered %d run(s) from earlier hosts: %s", len(recovered),
                         ", ".join(f"{run_id} → {status}" for run_id, status in recovered.items()))
        finally:
            reader.close()
        scheduler = Scheduler.start(parts.writer, paths.database, max_workers=config.max_workers,
                                    supervisor=supervisor, claim_lease_s=config.claim_lease_s,
                                    warm_workers=config.warm_workers, grace_s=config.reap_grace_s,
                                    board=parts.board, retention_days=config.retention_days,
                                    prune_every_s=config.prune_every_s, idempotency_days=config.idempotency_days,
                                    watchdog_grace_s=config.watchdog_grace_s,
                                    worker_ready_timeout_s=config.worker_ready_timeout_s)
        parts.actors.append(("scheduler", scheduler))
        _require_started("scheduler", scheduler)
        channels = ChannelManager.start(
            parts.writer, paths.database,
            config_dir=Path(config.config_dir) if config.config_dir is not None else default_config_dir(),
            supervisor=supervisor, board=parts.board, poll_timeout_s=config.channel_poll_timeout_s,
            channel_options={"telegram": TelegramOptions(api_base=config.telegram_api_base)})
        parts.actors.append(("channels", channels))
        _require_started("channels", channels)
        sup = supervisor
        gateway = ClientGateway.start(
            parts.writer, paths.database, paths.socket, host_epoch=claim.epoch, supervisor=supervisor,
            board=parts.board, limits=config.limits, resolver=parts.resolver, channels=channels,
            shutdown=lambda reason: sup.tell(Shutdown(reason)))
        parts.actors.append(("gateway", gateway))
        _require_started("gateway", gateway)
        # Logged once everything runs: a client may connect from this line on.
        log.info("host started at epoch %d (pid %d, state %s)", claim.epoch, claim.pid, paths.root)
    except BaseException:
        parts.shut_down("start-up failed")
        if supervisor is not None:
            _stop_ref("supervisor", supervisor)
        raise
    return HostHandle(config, paths, parts, claim, supervisor)


def _require_started(name: str, ref: pykka.ActorRef[Any]) -> None:
    try:
        ref.ask(Ping(), timeout=30)
    except pykka.ActorDeadError:
        raise HostError(f"{name} failed to start (see the log)") from None


def reap_orphans(reader: StoreReader, writer: WriterHandle, *, grace_s: float) -> int:
    """Terminate every registered child a previous host left running; return how many.

    Each child is matched by (pid, create_time), so a pid reused by an
    unrelated process is never signalled. Runs before the scheduler starts.
    """
    reaped = 0
    for child in queries.unreleased_children(reader):
        if is_same_process(child["pid"], child["create_time"]):
            terminate_tree(child["pid"], child["create_time"], grace_s=grace_s)
            reaped += 1
            log.info("reaped orphan %s pid %d (run %s)", child["kind"], child["pid"], child["run_id"])
        writer.call("child.release", {"pid": child["pid"], "create_time": child["create_time"],
                                      "run_id": child["run_id"]})
    return reaped
