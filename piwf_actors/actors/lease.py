"""`HostLease`: keeps the host's lease row alive and notices when it is lost.

The lease is taken at start-up (`acquire_lease`, at the edge, before any
other actor exists) and then renewed every `lease_s / 3` through the
writer. A renewal that is refused, or no successful renewal before the lease
runs out, means another host may own the state now: the actor tells the
supervisor, which stops the host within one lease period. On a clean stop
the lease is released so the next host need not wait for it to expire.

One exception: when the renewals failed only because the database cannot
be written (disk full, read-only file), the lease is *suspended* rather
than lost. Writes are fenced off by the expired lease anyway; the host keeps
serving reads and its workers keep their results. The actor keeps trying
to take the lease again at a higher epoch (`lease.reacquire`, accepted only
while the row still names this holder: the lock file proves no other host
took this state directory; the live run claims move to the new epoch in
the same transaction) and, once it succeeds, tells the supervisor, which
has the scheduler claim again.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.hostlock import holder_alive, process_start_identity
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.canonical import token_hash
from piwf_actors.errors import LeaseLost
from piwf_actors.store.requests import WriteCommand, WriteResult

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseClaim:
    """What this host holds. The token never leaves the process; only its hash is stored."""

    epoch: int
    host_id: str
    token: str
    pid: int
    process_start_identity: str
    lease_s: float
    expires_at: float

    def identity_args(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "host_id": self.host_id, "token_hash": token_hash(self.token),
                "pid": self.pid, "process_start_identity": self.process_start_identity}


@dataclass(frozen=True, slots=True)
class RenewTick:
    """Time to renew (sent by the lease's ticker)."""


@dataclass(frozen=True, slots=True)
class LeaseLostNotice:
    """Told to the supervisor: stop the host."""

    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class LeaseSuspended:
    """Told to the supervisor: the lease ran out while the disk could not be written; claims pause."""

    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class LeaseRegained:
    """Told to the supervisor: the lease is held again, at `epoch` (> `previous_epoch`)."""

    previous_epoch: int
    epoch: int


#: Renewal failures that mean "this host cannot write", not "another host may own the state".
STORAGE_FAILURES = frozenset({"disk_full", "read_only"})


@dataclass(frozen=True, slots=True)
class GetLease:
    """Answered with the current LeaseClaim (token withheld) and last heartbeat."""


def lease_request(*, lease_s: float, state_dir: str, host_id: str | None = None) -> tuple[dict[str, Any], str]:
    """The arguments of `lease.acquire` for this process, and the token whose hash they carry."""
    pid = os.getpid()
    token = secrets.token_urlsafe(32)
    return {"host_id": host_id or new_host_id(), "pid": pid, "process_start_identity": process_start_identity(pid),
            "lease_s": lease_s, "state_dir": state_dir, "token_hash": token_hash(token)}, token


def new_host_id() -> str:
    return f"host-{secrets.token_hex(8)}"


def claim_from(args: dict[str, Any], token: str, result: dict[str, Any]) -> LeaseClaim:
    """The LeaseClaim that `lease.acquire`'s `result` grants to the request `args` (see lease_request)."""
    return LeaseClaim(result["epoch"], args["host_id"], token, args["pid"], args["process_start_identity"],
                      float(args["lease_s"]), result["expires_at"])


def acquire_lease(writer: WriterHandle, reader_row: Callable[[], tuple[Any, ...]], *, lease_s: float,
                  state_dir: str, host_id: str | None = None, lock_guards_database: bool = True) -> LeaseClaim:
    """Take the lease through the writer; raise HostAlreadyRunning or LeaseLost.

    `reader_row` returns the current (pid, process_start_identity) of the
    lease row. When the recorded holder process is gone (checked by pid AND
    start time, so a reused pid does not count as alive) the caller, which
    already holds the lock file, may take an unexpired lease at once instead
    of waiting for it to run out. That holds only while the lock file guards
    the database (`lock_guards_database`: the state directory's own
    `state.db`); a database that other state directories (or machines) may
    name is free only when the holder's lease has run out.
    """
    claim_args, token = lease_request(lease_s=lease_s, state_dir=state_dir, host_id=host_id)
    pid = claim_args["pid"]
    holder_pid, holder_identity = reader_row()
    # The caller holds the lock file, so no live host owns this state dir: a
    # lease recorded for a process that is gone — or for this very process (a
    # host embedded here that failed before it could release) — is stale.
    if lock_guards_database and holder_pid is not None and (
            holder_pid == pid or not holder_alive(holder_pid, holder_identity)):
        claim_args["holder_dead"] = {"pid": holder_pid, "process_start_identity": holder_identity}
    result = writer.call("lease.acquire", claim_args)
    return claim_from(claim_args, token, result)


class HostLease(CoreActor):
    actor_name = "lease"

    def __init__(self, writer: WriterHandle, claim: LeaseClaim, *, supervisor: pykka.ActorRef[Any] | None,
                 clock: Callable[[], float] = time.time, renew_fraction: float = 1 / 3,
                 board: HostBoard | None = None, claim_lease_s: float = 30.0) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._claim_lease_s = claim_lease_s
        self._writer = writer
        self._claim = claim
        self._clock = clock
        self._interval = max(claim.lease_s * renew_fraction, 0.05)
        self._ticker: Ticker | None = None
        self._renew_sent_at: float | None = None
        self._heartbeat_at = clock()
        self._lost = False
        self._renew_failures = 0
        self._storage_failing = False
        self._suspended = False
        self._board = board

    def on_start(self) -> None:
        """Runs in the lease's thread: starts the renewal ticker."""
        self._writer.lease_renewed(self._claim.expires_at)
        self._ticker = Ticker(self.actor_ref, RenewTick(), self._interval, "lease").start()
        self._publish()

    def release_resources(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def on_stop(self) -> None:
        """Runs in the lease's thread on a clean stop: gives the lease back."""
        self.release_resources()
        if not self._lost and not self._suspended:
            try:
                released = self._writer.call("lease.release", self._claim.identity_args(), timeout=5)
                log.info("lease for epoch %d %s", self._claim.epoch, "released" if released else "was already gone")
            except Exception as exc:  # the writer may be failing; expiry covers it
                log.warning("could not release lease for epoch %d: %s", self._claim.epoch, exc)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {RenewTick: self._tick, WriteResult: self._renewed, GetLease: self._get}

    def _publish(self) -> None:
        if self._board is not None:
            self._board.publish(Section.LEASE, self._get(GetLease()))

    def _get(self, _message: GetLease) -> dict[str, Any]:
        return {"epoch": self._claim.epoch, "host_id": self._claim.host_id, "pid": self._claim.pid,
                "process_start_identity": self._claim.process_start_identity,
                "expires_at": self._claim.expires_at, "heartbeat_at": self._heartbeat_at,
                "lease_s": self._claim.lease_s, "renew_failures": self._renew_failures, "lost": self._lost,
                "suspended": self._suspended}

    def _tick(self, _message: RenewTick) -> None:
        if self._lost:
            return
        now = self._clock()
        if self._suspended:
            self._send("lease.reacquire", "reacquire", now)
            return
        if now >= self._claim.expires_at:
            if self._storage_failing:
                self._suspend("the lease expired while the database could not be written")
                self._send("lease.reacquire", "reacquire", now)
            else:
                self._lose("no successful renewal before the lease expired")
            return
        self._send("lease.renew", "renew", now)

    def _send(self, name: str, correlation: str, now: float) -> None:
        if self._renew_sent_at is not None and now - self._renew_sent_at < self._interval:
            return  # the previous attempt is still with the writer
        self._renew_sent_at = now
        args = {**self._claim.identity_args(), "lease_s": self._claim.lease_s}
        if name == "lease.reacquire":
            args["claim_lease_s"] = self._claim_lease_s
        self._writer.submit(WriteCommand(name, args, correlation_id=correlation), self.actor_ref)

    def _renewed(self, result: WriteResult) -> None:
        self._renew_sent_at = None
        if self._lost:
            return
        if result.correlation_id == "reacquire":
            self._reacquired(result)
            return
        if self._suspended:
            return  # a renewal that was in flight when the lease was suspended
        if result.ok:
            self._claim = _with_expiry(self._claim, result.value["expires_at"])
            self._writer.lease_renewed(self._claim.expires_at)
            self._heartbeat_at = result.value["heartbeat_at"]
            self._publish()
            if self._renew_failures:
                log.info("lease renewal for epoch %d recovered", self._claim.epoch)
            self._renew_failures = 0
            self._storage_failing = False
            return
        if result.error_code == LeaseLost.code:
            if self._storage_failing:
                # It ran out while the disk was full; whether someone else took it is
                # for lease.reacquire to find out (it checks the row's holder).
                self._suspend(result.error or "renewal refused after storage failures")
                return
            self._lose(result.error or "renewal refused")
            return
        self._renew_failures += 1
        self._storage_failing = result.error_code in STORAGE_FAILURES
        log.warning("lease renewal failed (%d in a row): %s", self._renew_failures, result.error)
        if self._clock() >= self._claim.expires_at:
            if self._storage_failing:
                self._suspend(f"the lease expired while the database could not be written: {result.error}")
            else:
                self._lose(f"renewals kept failing: {result.error}")

    def _suspend(self, reason: str) -> None:
        if self._suspended:
            return
        self._suspended = True
        self._publish()
        log.warning("lease for epoch %d suspended: %s; serving reads, claiming nothing, and taking the lease "
                    "again once writes succeed", self._claim.epoch, reason)
        safe_tell(self._supervisor, LeaseSuspended(self._claim.epoch, reason))

    def _reacquired(self, result: WriteResult) -> None:
        if result.ok:
            previous = self._claim.epoch
            self._claim = _with_epoch(self._claim, result.value["epoch"], result.value["expires_at"])
            self._heartbeat_at = result.value["heartbeat_at"]
            self._writer.lease_renewed(self._claim.expires_at)
            self._writer.advance_epoch(self._claim.epoch)
            self._suspended = False
            self._storage_failing = False
            self._renew_failures = 0
            self._publish()
            log.warning("lease taken again at epoch %d (was %d) now that writes succeed", self._claim.epoch,
                        previous)
            safe_tell(self._supervisor, LeaseRegained(previous, self._claim.epoch))
            return
        if result.error_code == LeaseLost.code:
            self._lose(result.error or "another host took the lease")
            return
        log.debug("taking the lease again failed: %s", result.error)

    def _lose(self, reason: str) -> None:
        self._lost = True
        self._publish()
        log.error("lease for epoch %d lost: %s", self._claim.epoch, reason)
        safe_tell(self._supervisor, LeaseLostNotice(self._claim.epoch, reason))


def _with_expiry(claim: LeaseClaim, expires_at: float) -> LeaseClaim:
    return _with_epoch(claim, claim.epoch, expires_at)


def _with_epoch(claim: LeaseClaim, epoch: int, expires_at: float) -> LeaseClaim:
    return LeaseClaim(epoch, claim.host_id, claim.token, claim.pid, claim.process_start_identity,
                      claim.lease_s, expires_at)
