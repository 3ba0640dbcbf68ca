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

Every decision is the step function `decide(state, event, now)`, a pure
function of a frozen `HostLeaseState`, tested with a chosen `now`; the
ticker, the writer and the supervisor are the shared renewal loop's
(`lease_renewal.py`, which `RunnerLease` uses too).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pykka

from piwf_actors.actors.hostlock import holder_alive, process_start_identity
from piwf_actors.actors.lease_renewal import (
    AdvanceEpoch,
    Effect,
    Event,
    Log,
    Notify,
    Publish,
    Release,
    RenewalLoop,
    Renewed,
    RenewTick,
    Started,
    Stopping,
    Submit,
    may_send,
)
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.canonical import token_hash
from piwf_actors.errors import LeaseLost
from piwf_actors.store.requests import WriteResult

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
    start time, so a reused pid does not count as alive; an unreaped zombie
    is gone too: `hostlock.holder_alive`) the caller, which
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


# --- the step function ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostLeaseState:
    """What the lease knows between events (the token stays inside `claim`, never in a view)."""

    claim: LeaseClaim  # the epoch and expiry last granted
    heartbeat_at: float
    renew_sent_at: float | None = None  # a renewal or reacquire is with the writer since then
    renew_failures: int = 0  # renewals in a row that failed without a refusal
    storage_failing: bool = False  # the last of them failed because the database cannot be written
    suspended: bool = False
    lost: bool = False


def decide(state: HostLeaseState, event: Event, now: float, *, interval_s: float,
           claim_lease_s: float) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    """What the host lease does on `event` at `now`: (new state, effects in order).

    - `Started`: the writer learns the expiry; the board section is published.
    - `RenewTick`: a renewal, at most one with the writer per `interval_s`.
      Past the expiry the lease is lost, or suspended if the last renewal
      failed because the database cannot be written; a suspended lease
      sends `lease.reacquire` (with `claim_lease_s`) instead.
    - `WriteResult` of a renewal: success extends the lease; a refusal
      (`lease_lost`) loses it (suspends it after storage failures); another
      error counts a failure and, past the expiry, loses or suspends it.
    - `WriteResult` of a reacquire: success regains the lease at the new
      epoch; a refusal loses it; another error changes nothing.
    - `Stopping`: the lease is released unless it is lost or suspended (it
      may be another host's by then).
    A lost lease sends nothing more and answers nothing.
    """
    match event:
        case RenewTick():
            return _tick(state, now, interval_s, claim_lease_s)
        case WriteResult():
            return _answered(state, event, now)
        case Started():
            return state, (Renewed(state.claim.expires_at), Publish())
        case Stopping():
            if state.lost or state.suspended:
                return state, ()
            what = f"lease for epoch {state.claim.epoch}"
            return state, (Release("lease.release", state.claim.identity_args(), what, what),)
    raise TypeError(f"the host lease cannot decide on {event!r}")


def _tick(state: HostLeaseState, now: float, interval_s: float,
          claim_lease_s: float) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    if state.lost:
        return state, ()
    if state.suspended:
        return _send(state, "lease.reacquire", now, interval_s, claim_lease_s)
    if now >= state.claim.expires_at:
        if state.storage_failing:
            state, suspended = _suspend(state, "the lease expired while the database could not be written")
            state, sent = _send(state, "lease.reacquire", now, interval_s, claim_lease_s)
            return state, suspended + sent
        return _lose(state, "no successful renewal before the lease expired")
    return _send(state, "lease.renew", now, interval_s, claim_lease_s)


def _send(state: HostLeaseState, name: str, now: float, interval_s: float,
          claim_lease_s: float) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    if not may_send(state.renew_sent_at, now, interval_s):
        return state, ()  # the previous attempt is still with the writer
    args = {**state.claim.identity_args(), "lease_s": state.claim.lease_s}
    if name == "lease.reacquire":
        args["claim_lease_s"] = claim_lease_s
        return replace(state, renew_sent_at=now), (Submit(name, args, "reacquire"),)
    return replace(state, renew_sent_at=now), (Submit(name, args, "renew"),)


def _answered(state: HostLeaseState, result: WriteResult,
              now: float) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    state = replace(state, renew_sent_at=None)
    if state.lost:
        return state, ()
    if result.correlation_id == "reacquire":
        return _reacquired(state, result)
    if state.suspended:
        return state, ()  # a renewal that was in flight when the lease was suspended
    epoch = state.claim.epoch
    if result.ok:
        recovered = (Log(logging.INFO, f"lease renewal for epoch {epoch} recovered"),) if state.renew_failures else ()
        state = replace(state, claim=_with_epoch(state.claim, epoch, result.value["expires_at"]),
                        heartbeat_at=result.value["heartbeat_at"], renew_failures=0, storage_failing=False)
        return state, (Renewed(state.claim.expires_at), Publish(), *recovered)
    if result.error_code == LeaseLost.code:
        if state.storage_failing:
            # It ran out while the disk was full; whether someone else took it is
            # for lease.reacquire to find out (it checks the row's holder).
            return _suspend(state, result.error or "renewal refused after storage failures")
        return _lose(state, result.error or "renewal refused")
    state = replace(state, renew_failures=state.renew_failures + 1,
                    storage_failing=result.error_code in STORAGE_FAILURES)
    warned: tuple[Effect, ...] = (
        Log(logging.WARNING, f"lease renewal failed ({state.renew_failures} in a row): {result.error}"),)
    if now < state.claim.expires_at:
        return state, warned
    if state.storage_failing:
        state, suspended = _suspend(state, f"the lease expired while the database could not be written: "
                                           f"{result.error}")
        return state, warned + suspended
    state, lost = _lose(state, f"renewals kept failing: {result.error}")
    return state, warned + lost


def _reacquired(state: HostLeaseState, result: WriteResult) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    if result.ok:
        previous = state.claim.epoch
        claim = _with_epoch(state.claim, result.value["epoch"], result.value["expires_at"])
        state = replace(state, claim=claim, heartbeat_at=result.value["heartbeat_at"], suspended=False,
                        storage_failing=False, renew_failures=0)
        return state, (Renewed(claim.expires_at), AdvanceEpoch(claim.epoch), Publish(),
                       Log(logging.WARNING, f"lease taken again at epoch {claim.epoch} (was {previous}) now "
                                            "that writes succeed"),
                       Notify(LeaseRegained(previous, claim.epoch)))
    if result.error_code == LeaseLost.code:
        return _lose(state, result.error or "another host took the lease")
    return state, (Log(logging.DEBUG, f"taking the lease again failed: {result.error}"),)


def _suspend(state: HostLeaseState, reason: str) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    if state.suspended:
        return state, ()
    epoch = state.claim.epoch
    return replace(state, suspended=True), (
        Publish(),
        Log(logging.WARNING, f"lease for epoch {epoch} suspended: {reason}; serving reads, claiming nothing, "
                             "and taking the lease again once writes succeed"),
        Notify(LeaseSuspended(epoch, reason)))


def _lose(state: HostLeaseState, reason: str) -> tuple[HostLeaseState, tuple[Effect, ...]]:
    epoch = state.claim.epoch
    return replace(state, lost=True), (Publish(), Log(logging.ERROR, f"lease for epoch {epoch} lost: {reason}"),
                                       Notify(LeaseLostNotice(epoch, reason)))


def lease_view(state: HostLeaseState) -> dict[str, Any]:
    """The board's lease section and the answer to GetLease (the token withheld)."""
    claim = state.claim
    return {"epoch": claim.epoch, "host_id": claim.host_id, "pid": claim.pid,
            "process_start_identity": claim.process_start_identity, "expires_at": claim.expires_at,
            "heartbeat_at": state.heartbeat_at, "lease_s": claim.lease_s, "renew_failures": state.renew_failures,
            "lost": state.lost, "suspended": state.suspended}


def _with_epoch(claim: LeaseClaim, epoch: int, expires_at: float) -> LeaseClaim:
    return replace(claim, epoch=epoch, expires_at=expires_at)


# --- the actor -----------------------------------------------------------------------------------


class HostLease(RenewalLoop[HostLeaseState]):
    """The host lease's actor: the shared renewal loop (`lease_renewal.py`) driving `decide`."""

    actor_name = "lease"
    board_section = Section.LEASE
    lease_log = log

    def __init__(self, writer: WriterHandle, claim: LeaseClaim, *, supervisor: pykka.ActorRef[Any] | None,
                 clock: Callable[[], float] = time.time, renew_fraction: float = 1 / 3,
                 board: HostBoard | None = None, claim_lease_s: float = 30.0) -> None:
        """Runs in the caller's thread: stores arguments only (and reads the clock once: until the
        first renewal, the heartbeat is the moment the actor was made)."""
        super().__init__(writer, HostLeaseState(claim, heartbeat_at=clock()), supervisor=supervisor, clock=clock,
                         interval_s=max(claim.lease_s * renew_fraction, 0.05), board=board)
        self._claim_lease_s = claim_lease_s

    def step(self, state: HostLeaseState, event: Event,
             now: float) -> tuple[HostLeaseState, tuple[Effect, ...]]:
        return decide(state, event, now, interval_s=self._interval, claim_lease_s=self._claim_lease_s)

    def view(self, state: HostLeaseState) -> dict[str, Any]:
        return lease_view(state)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {**super().handlers(), GetLease: self._answer_view}
