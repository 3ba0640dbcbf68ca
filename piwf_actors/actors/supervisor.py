"""`HostSupervisor` and the parts of one host it stops: the escalation point of the house.

`HostParts` is what one host started, in start order (lock, writer, lease,
then the other actors); `shut_down` stops them in reverse, writer last, lock
file after it. The supervisor turns a core actor's failure, the loss of the
lease or a `Shutdown` into that stop (one-for-all), and starts a standby's
active parts once it took the lease (on a takeover thread it owns). The
wiring that fills `HostParts` is `actors/host.py`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pykka

from piwf_actors.actors.base import ActorFailed, CoreActor, safe_tell
from piwf_actors.actors.hostlock import HostLock
from piwf_actors.actors.lease import LeaseClaim, LeaseLostNotice, LeaseRegained, LeaseSuspended
from piwf_actors.actors.runner_lease import RunnerClaim
from piwf_actors.actors.standby import LeaseTaken
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard
from piwf_actors.workflows.resolver import WorkflowResolver

if TYPE_CHECKING:  # created by the wiring only when metrics are on (prometheus_client stays unloaded)
    from piwf_actors.metrics import HostMetrics

log = logging.getLogger("piwf_actors.actors.host")  # one logger for the host's start and stop lines


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Ask the supervisor to stop the host (answered once everything is stopped)."""

    reason: str


@dataclass
class HostParts:
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
    # One cache for the API, the socket and the schedule keeper, and the user-code threads that load
    # workflow files and call key functions (workflows/user_code.py); closed when the host stops.
    resolver: WorkflowResolver = field(default_factory=WorkflowResolver)
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
                stop_ref(name, ref)
            # After the actors, which may still wait for a call: workflow code still running is answered
            # and left to its daemon thread (never waited for: it may never return).
            self.resolver.close()
            if self.lease is not None:
                stop_ref("lease", self.lease)
            if self.writer is not None:
                stop_ref("writer", self.writer.ref)
            if self.lock is not None:
                self.lock.release()
            self.stopped.set()
            log.info("host stopped")
        takeover = self.takeover
        if takeover is not None and takeover is not threading.current_thread():
            takeover.join(timeout=30)


def stop_ref(name: str, ref: pykka.ActorRef[Any]) -> None:
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

    def __init__(self, parts: HostParts,
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
        that the host owns (`HostParts.takeover`, joined when it stops). It
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
