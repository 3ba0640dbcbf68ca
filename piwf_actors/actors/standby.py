"""`StandbyWatch`: a standby host's eye on the host lease, and its hand when the lease comes free.

Several hosts may name one database (`--database`); one of them holds the
host lease and is **active**, the others are **standby**: they serve reads
on their own sockets and wait. This actor is what waits. Every `poll_s` (a
tenth of the lease, at most half a second) it reads the lease row through
its own read-only connection and asks `decide` what to do. While the row
names a holder whose lease runs, nothing. Once the lease has run out (its
holder died or is paused) or was released (its holder stopped cleanly), it
sends `lease.acquire` through the writer. That command judges again inside
its own transaction, so of two standbys that both saw the lease free
exactly one wins (epoch + 1); the other is refused and keeps watching.

The winner tells the supervisor `LeaseTaken(claim)` and watches no more; the
supervisor starts what only the active host runs (lease renewal, orphan
reaping, recovery, scheduler, channels) and turns the gateway active.

Takeover time after the active host dies: at most `lease_s` until its last
renewal runs out (it renews every third of it), plus one poll, plus the
start of the active parts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import PollingActor, safe_tell
from piwf_actors.actors.lease import LeaseClaim, claim_from, lease_request
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard, Section
from piwf_actors.errors import HostAlreadyRunning
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand, WriteResult

log = logging.getLogger(__name__)

#: A lease.acquire that brought no answer for this long is given up and may be sent again (the
#: writer always answers; this only keeps a lost answer from ending the watch for good).
ATTEMPT_TIMEOUT_S = 30.0


def poll_interval(lease_s: float) -> float:
    """How often a standby reads the lease: a tenth of it, between 50 ms and 500 ms."""
    return min(max(lease_s / 10, 0.05), 0.5)


# --- the step function ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaseSeen:
    """The lease row as one poll read it."""

    epoch: int
    host_id: str | None
    expires_at: float | None

    def free_at(self, now: float) -> bool:
        """Nobody holds it (released), or its holder's lease has run out by `now`."""
        return self.host_id is None or self.expires_at is None or self.expires_at <= now


@dataclass(frozen=True, slots=True)
class StandbyState:
    seen: LeaseSeen | None = None  # the holder last reported in the log
    acquiring_since: float | None = None  # a lease.acquire is with the writer since then


@dataclass(frozen=True, slots=True)
class StandbyStep:
    state: StandbyState
    acquire: bool = False  # send lease.acquire now
    report: str | None = None  # a log line: the lease changed hands (or is seen for the first time)


def decide(state: StandbyState, seen: LeaseSeen, now: float, *,
           attempt_timeout_s: float = ATTEMPT_TIMEOUT_S) -> StandbyStep:
    """What a standby does after reading the lease row `seen` at `now`.

    One attempt at a time: while a lease.acquire is with the writer (for
    less than `attempt_timeout_s`) nothing happens. A free lease is tried at
    once. A change of holder or epoch is reported once.
    """
    if state.acquiring_since is not None and now - state.acquiring_since < attempt_timeout_s:
        return StandbyStep(state)
    report = None
    if state.seen is None or (seen.epoch, seen.host_id) != (state.seen.epoch, state.seen.host_id):
        report = describe_lease(seen, now)
    if seen.free_at(now):
        return StandbyStep(StandbyState(seen, now), acquire=True, report=report)
    return StandbyStep(StandbyState(seen, None), report=report)


def attempt_refused(state: StandbyState) -> StandbyState:
    """The lease.acquire came back refused (another host was quicker, or a storage error): watch on."""
    return StandbyState(state.seen, None)


def describe_lease(seen: LeaseSeen, now: float) -> str:
    if seen.host_id is None:
        return f"no host holds the lease (released at epoch {seen.epoch})"
    if seen.expires_at is None or seen.expires_at <= now:
        return f"the lease of host {seen.host_id} (epoch {seen.epoch}) has run out"
    return f"host {seen.host_id} is active at epoch {seen.epoch} (lease expires in {seen.expires_at - now:.1f} s)"


# --- the actor ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WatchTick:
    """Time to read the lease (sent by the watch's ticker)."""


@dataclass(frozen=True, slots=True)
class LeaseTaken:
    """Told to the supervisor: this standby holds the lease now; start the active parts."""

    claim: LeaseClaim
    previous_host_id: str | None
    previous_epoch: int


class StandbyWatch(PollingActor):
    actor_name = "standby"

    def __init__(self, writer: WriterHandle, db_path: Path, *, supervisor: pykka.ActorRef[Any] | None,
                 host_id: str, lease_s: float, state_dir: str, board: HostBoard | None = None,
                 clock: Callable[[], float] = time.time, poll_s: float | None = None) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._db_path = db_path
        self._host_id = host_id
        self._lease_s = lease_s
        self._state_dir = state_dir
        self._board = board
        self._clock = clock
        self._poll_s = poll_interval(lease_s) if poll_s is None else poll_s
        self._state = StandbyState()
        self._request: tuple[dict[str, Any], str] | None = None
        self._reader: StoreReader | None = None
        self._ticker: Ticker | None = None
        self._taken = False
        self._read_failing = False

    def on_start(self) -> None:
        """Runs in the watch's thread: opens its reader, reads the lease once, starts the ticker."""
        self._reader = StoreReader(self._db_path)
        self._tick(WatchTick())
        self._ticker = Ticker(self.actor_ref, WatchTick(), self._poll_s, "standby").start()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {WatchTick: self._tick, WriteResult: self._written}

    def _read(self) -> LeaseSeen | None:
        assert self._reader is not None
        try:
            row = queries.lease_row(self._reader, self._clock())
        except Exception as exc:  # a read that fails now (a busy file, a network hiccup) is tried again
            if not self._read_failing:
                log.warning("standby: cannot read the lease: %s", exc)
            self._read_failing = True
            return None
        self._read_failing = False
        return LeaseSeen(int(row["epoch"]), row["host_id"], row["expires_at"])

    def _tick(self, _message: WatchTick) -> None:
        if self._taken:
            return
        seen = self._read()
        if seen is None:
            return
        now = self._clock()
        step = decide(self._state, seen, now)
        self._state = step.state
        if step.report is not None:
            log.info("standby: %s", step.report)
            self._publish(seen)
        if step.acquire:
            self._request = lease_request(lease_s=self._lease_s, state_dir=self._state_dir, host_id=self._host_id)
            self._writer.submit(WriteCommand("lease.acquire", self._request[0], correlation_id="acquire"),
                                self.actor_ref)

    def _written(self, result: WriteResult) -> None:
        if self._taken or result.correlation_id != "acquire" or self._request is None:
            return
        args, token = self._request
        self._request = None
        if not result.ok:
            self._state = attempt_refused(self._state)
            if result.error_code == HostAlreadyRunning.code:
                log.info("standby: another host took the lease first; watching on")
            else:
                log.warning("standby: taking the lease failed: %s", result.error)
            return
        self._taken = True
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        claim = claim_from(args, token, result.value)
        seen = self._state.seen
        log.warning("standby: took the lease at epoch %d%s; becoming active", claim.epoch,
                    f" from host {seen.host_id}" if seen is not None and seen.host_id else "")
        safe_tell(self._supervisor, LeaseTaken(claim, seen.host_id if seen else None, seen.epoch if seen else 0))

    def _publish(self, seen: LeaseSeen) -> None:
        if self._board is not None:
            self._board.publish(Section.STANDBY, {"host_id": self._host_id, "watched_epoch": seen.epoch,
                                            "watched_host_id": seen.host_id, "poll_s": self._poll_s})
