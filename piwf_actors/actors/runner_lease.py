"""`RunnerLease`: a runner host's lease (docs/runners.md), kept alive like the host's.

A runner host holds no host lease. It takes a **runner lease** at start
(`acquire_runner_lease`, at the edge, before its scheduler exists): the
`runner_host` row of its runner id at epoch + 1, with a random token whose
hash is stored. Every write it sends carries (runner id, epoch) and is
fenced by that row inside the writer's transaction (`store/batch.py`), so a
runner that lost its lease can change nothing.

This actor renews the row every `lease_s / 3` through the writer. A renewal
that is refused (the lease expired, or another process took this runner id)
or no successful renewal before the lease runs out means the lease is lost:
the actor tells the supervisor, which stops the runner host (`piwf-host`
exits with status 1). There is no suspended state as the host lease has
(a full disk): a runner that cannot write is simply stopped, and its runs
are recovered by the active host once its lease has run out. On a clean
stop the lease is released, after the scheduler handed its runs back.

The decision is a step function (`decide(state, event, now)`) of a frozen
`RunnerLeaseState` and a chosen `now`, so it is tested without threads; the
ticker, the writer and the supervisor are the renewal loop it shares with
the host lease (`lease_renewal.py`).
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

from piwf_actors.actors.hostlock import process_start_identity
from piwf_actors.actors.lease import LeaseLostNotice
from piwf_actors.actors.lease_renewal import (
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
from piwf_actors.errors import RunnerLeaseLost
from piwf_actors.store.requests import WriteResult
from piwf_actors.worker.termination import machine_identity

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunnerClaim:
    """The runner lease this process holds. The token never leaves the process; only its hash is stored."""

    runner_id: str
    epoch: int
    token: str
    pid: int
    lease_s: float
    max_workers: int
    expires_at: float
    heartbeat_at: float

    def identity_args(self) -> dict[str, Any]:
        return {"runner_id": self.runner_id, "epoch": self.epoch, "token_hash": token_hash(self.token)}


def new_runner_id() -> str:
    return f"runner-{secrets.token_hex(6)}"


def acquire_runner_lease(writer: WriterHandle, *, runner_id: str, lease_s: float, max_workers: int,
                         state_dir: str) -> RunnerClaim:
    """Take the runner lease of `runner_id` through the writer (an edge call: blocks on the writer).
    Raises RunnerAlreadyRunning while another process's lease on that id is live."""
    pid = os.getpid()
    token = secrets.token_urlsafe(32)
    result = writer.call("runner_lease.acquire", {
        "runner_id": runner_id, "token_hash": token_hash(token), "pid": pid,
        "process_start_identity": process_start_identity(pid), "machine_id": machine_identity(),
        "state_dir": state_dir, "max_workers": max_workers, "lease_s": lease_s})
    return RunnerClaim(runner_id, int(result["epoch"]), token, pid, float(lease_s), max_workers,
                       float(result["expires_at"]), float(result["heartbeat_at"]))


# --- the step function ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunnerLeaseState:
    """What the runner lease knows between events (the token stays inside `claim`)."""

    claim: RunnerClaim  # the identity; its own expires_at / heartbeat_at are the first grant's
    expires_at: float
    heartbeat_at: float
    renew_sent_at: float | None = None  # a renewal is with the writer since then
    failures: int = 0  # renewals in a row that failed without a refusal
    lost: str | None = None  # why the lease is lost (then nothing more is sent)


def initial_state(claim: RunnerClaim) -> RunnerLeaseState:
    return RunnerLeaseState(claim, expires_at=claim.expires_at, heartbeat_at=claim.heartbeat_at)


def decide(state: RunnerLeaseState, event: Event, now: float, *,
           interval_s: float) -> tuple[RunnerLeaseState, tuple[Effect, ...]]:
    """What the runner lease does on `event` at `now`: (new state, effects in order).

    - `Started`: the writer learns the expiry; the board section is published.
    - `RenewTick`: past the expiry without a renewal the lease is lost;
      otherwise a renewal, at most one with the writer per `interval_s`.
    - `WriteResult`: success extends the lease; a refusal
      (`runner_lease_lost`) loses it; another error counts a failure and,
      past the expiry, loses it. There is no suspended state.
    - `Stopping`: the lease is released unless it was lost.
    A lost lease sends nothing more; the supervisor is told once.
    """
    claim = state.claim
    match event:
        case RenewTick():
            if state.lost is not None:
                return state, ()
            if now >= state.expires_at:
                return _lose(state, "no successful renewal before the lease expired")
            if not may_send(state.renew_sent_at, now, interval_s):
                return state, ()
            args = {**claim.identity_args(), "lease_s": claim.lease_s}
            return replace(state, renew_sent_at=now), (Submit("runner_lease.renew", args, "renew"),)
        case WriteResult():
            return _answered(state, event, now)
        case Started():
            return state, (Renewed(state.expires_at), Publish())
        case Stopping():
            if state.lost is not None:
                return state, ()
            return state, (Release("runner_lease.release", claim.identity_args(),
                                   f"runner lease of {claim.runner_id} (epoch {claim.epoch})",
                                   f"the runner lease of {claim.runner_id}"),)
    raise TypeError(f"the runner lease cannot decide on {event!r}")


def _answered(state: RunnerLeaseState, result: WriteResult,
              now: float) -> tuple[RunnerLeaseState, tuple[Effect, ...]]:
    if state.lost is not None:
        return state, ()
    if result.ok:
        state = replace(state, expires_at=float(result.value["expires_at"]),
                        heartbeat_at=float(result.value["heartbeat_at"]), renew_sent_at=None, failures=0)
        return state, (Renewed(state.expires_at), Publish())
    if result.error_code == RunnerLeaseLost.code:
        detail = (result.error or "").split(" lost: ", 1)[-1]  # the refusal names the lease; the notice does too
        return _lose(replace(state, renew_sent_at=None), f"renewal refused: {detail or 'refused'}")
    failed = replace(state, renew_sent_at=None, failures=state.failures + 1)
    if now >= state.expires_at:
        return _lose(failed, f"renewals kept failing: {result.error}")
    return failed, (Log(logging.WARNING, f"runner lease renewal failed ({failed.failures} in a row): "
                                         f"{result.error}"),)


def _lose(state: RunnerLeaseState, why: str) -> tuple[RunnerLeaseState, tuple[Effect, ...]]:
    claim = state.claim
    reason = f"runner lease of {claim.runner_id} (epoch {claim.epoch}) lost: {why}"
    return replace(state, lost=why), (Publish(), Log(logging.ERROR, reason),
                                      Notify(LeaseLostNotice(claim.epoch, reason)))


def runner_lease_view(state: RunnerLeaseState) -> dict[str, Any]:
    """The board's runner lease section and the answer to GetRunnerLease (the token withheld)."""
    claim = state.claim
    return {"runner_id": claim.runner_id, "epoch": claim.epoch, "pid": claim.pid,
            "expires_at": state.expires_at, "heartbeat_at": state.heartbeat_at,
            "lease_s": claim.lease_s, "max_workers": claim.max_workers,
            "renew_failures": state.failures, "lost": state.lost is not None}


# --- the actor -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetRunnerLease:
    """Answered with the runner lease's view (token withheld)."""


class RunnerLease(RenewalLoop[RunnerLeaseState]):
    """The runner lease's actor: the shared renewal loop (`lease_renewal.py`) driving `decide`."""

    actor_name = "runner-lease"
    board_section = Section.RUNNER_LEASE
    lease_log = log

    def __init__(self, writer: WriterHandle, claim: RunnerClaim, *, supervisor: pykka.ActorRef[Any] | None,
                 clock: Callable[[], float] = time.time, board: HostBoard | None = None) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(writer, initial_state(claim), supervisor=supervisor, clock=clock,
                         interval_s=max(claim.lease_s / 3, 0.05), board=board)

    def step(self, state: RunnerLeaseState, event: Event,
             now: float) -> tuple[RunnerLeaseState, tuple[Effect, ...]]:
        return decide(state, event, now, interval_s=self._interval)

    def view(self, state: RunnerLeaseState) -> dict[str, Any]:
        return runner_lease_view(state)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {**super().handlers(), GetRunnerLease: self._answer_view}
