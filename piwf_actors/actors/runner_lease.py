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

The decision is a step function (`renewal_step`) of the lease state and a
chosen `now`, so it is tested without threads.
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

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.hostlock import process_start_identity
from piwf_actors.actors.lease import LeaseLostNotice
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.canonical import token_hash
from piwf_actors.errors import RunnerLeaseLost
from piwf_actors.runner.termination import machine_identity
from piwf_actors.store.requests import WriteCommand, WriteResult

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
class RenewalState:
    expires_at: float
    renew_sent_at: float | None = None  # a renewal is with the writer since then
    failures: int = 0
    lost: str | None = None  # why the lease is lost (then nothing more is sent)


def renewal_step(state: RenewalState, now: float, interval_s: float) -> tuple[RenewalState, bool]:
    """A tick: (new state, whether to send a renewal). Past the expiry without a renewal the lease
    is lost; a renewal still with the writer is not sent twice within one interval."""
    if state.lost is not None:
        return state, False
    if now >= state.expires_at:
        return replace(state, lost="no successful renewal before the lease expired"), False
    if state.renew_sent_at is not None and now - state.renew_sent_at < interval_s:
        return state, False
    return replace(state, renew_sent_at=now), True


def renewed_step(state: RenewalState, result: WriteResult, now: float) -> RenewalState:
    """The writer's answer to a renewal."""
    if state.lost is not None:
        return state
    if result.ok:
        return RenewalState(expires_at=float(result.value["expires_at"]))
    if result.error_code == RunnerLeaseLost.code:
        detail = (result.error or "").split(" lost: ", 1)[-1]  # the refusal names the lease; the notice does too
        return replace(state, renew_sent_at=None, lost=f"renewal refused: {detail or 'refused'}")
    failed = replace(state, renew_sent_at=None, failures=state.failures + 1)
    if now >= state.expires_at:
        return replace(failed, lost=f"renewals kept failing: {result.error}")
    return failed


# --- the actor -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunnerRenewTick:
    """Time to renew (sent by the runner lease's ticker)."""


@dataclass(frozen=True, slots=True)
class GetRunnerLease:
    """Answered with the runner lease's view (token withheld)."""


class RunnerLease(CoreActor):
    actor_name = "runner-lease"

    def __init__(self, writer: WriterHandle, claim: RunnerClaim, *, supervisor: pykka.ActorRef[Any] | None,
                 clock: Callable[[], float] = time.time, board: HostBoard | None = None) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._claim = claim
        self._clock = clock
        self._board = board
        self._interval = max(claim.lease_s / 3, 0.05)
        self._state = RenewalState(expires_at=claim.expires_at)
        self._heartbeat_at = claim.heartbeat_at
        self._ticker: Ticker | None = None

    def on_start(self) -> None:
        """Runs in the lease's thread: starts the renewal ticker."""
        self._writer.lease_renewed(self._claim.expires_at)
        self._ticker = Ticker(self.actor_ref, RunnerRenewTick(), self._interval, "runner-lease").start()
        self._publish()

    def release_resources(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def on_stop(self) -> None:
        """Runs in the lease's thread on a clean stop: gives the lease back (unless it was lost)."""
        self.release_resources()
        if self._state.lost is None:
            try:
                released = self._writer.call("runner_lease.release", self._claim.identity_args(), timeout=5)
                log.info("runner lease of %s (epoch %d) %s", self._claim.runner_id, self._claim.epoch,
                         "released" if released else "was already gone")
            except Exception as exc:  # the writer may be failing; expiry covers it
                log.warning("could not release the runner lease of %s: %s", self._claim.runner_id, exc)

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {RunnerRenewTick: self._tick, WriteResult: self._renewed, GetRunnerLease: self._view}

    def _view(self, _message: GetRunnerLease | None = None) -> dict[str, Any]:
        return {"runner_id": self._claim.runner_id, "epoch": self._claim.epoch, "pid": self._claim.pid,
                "expires_at": self._state.expires_at, "heartbeat_at": self._heartbeat_at,
                "lease_s": self._claim.lease_s, "max_workers": self._claim.max_workers,
                "renew_failures": self._state.failures, "lost": self._state.lost is not None}

    def _publish(self) -> None:
        if self._board is not None:
            self._board.publish(Section.RUNNER_LEASE, self._view())

    def _tick(self, _message: RunnerRenewTick) -> None:
        was_lost = self._state.lost
        self._state, send = renewal_step(self._state, self._clock(), self._interval)
        if send:
            args = {**self._claim.identity_args(), "lease_s": self._claim.lease_s}
            self._writer.submit(WriteCommand("runner_lease.renew", args, correlation_id="renew"), self.actor_ref)
        self._after(was_lost)

    def _renewed(self, result: WriteResult) -> None:
        was_lost = self._state.lost
        self._state = renewed_step(self._state, result, self._clock())
        if result.ok and self._state.lost is None:
            self._heartbeat_at = float(result.value["heartbeat_at"])
            self._writer.lease_renewed(self._state.expires_at)
            self._publish()
        elif not result.ok and self._state.lost is None:
            log.warning("runner lease renewal failed (%d in a row): %s", self._state.failures, result.error)
        self._after(was_lost)

    def _after(self, was_lost: str | None) -> None:
        """Tell the supervisor once, when the lease has just been lost."""
        if was_lost is None and self._state.lost is not None:
            self._publish()
            reason = (f"runner lease of {self._claim.runner_id} (epoch {self._claim.epoch}) lost: "
                      f"{self._state.lost}")
            log.error("%s", reason)
            safe_tell(self._supervisor, LeaseLostNotice(self._claim.epoch, reason))
