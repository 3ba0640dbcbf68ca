"""The renewal loop both leases share (`HostLease`, `RunnerLease`): tick, decide, carry out.

A lease is kept alive through the writer: its ticker tells the actor
`RenewTick` every interval, and the writer answers every command the lease
submits with a `WriteResult` addressed to it. `RenewalLoop` turns each of
these, and the actor's start (`Started`) and clean stop (`Stopping`), into
an event for the lease's step function

    decide(state, event, now) -> (new state, effects)

with `now` read from the injected clock; it keeps the new state and carries
out the effects in order. Every decision (when to renew, when the lease is
lost, suspended or regained, whether to give it back) is in the step
function of the lease's own module; this module decides nothing, so a lease
is tested by calling its step function with a chosen `now`, without threads.

The effects are plain frozen records. `Publish` writes the lease's board
section from the state *after* the step (the actor's `view`); `Release` is
the only blocking one (a `writer.call` at the edge of the actor's life,
from `on_stop`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.board import HostBoard
from piwf_actors.store.requests import WriteCommand, WriteResult

# --- events -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RenewTick:
    """Time to renew (sent by the lease's ticker)."""


@dataclass(frozen=True, slots=True)
class Started:
    """The actor has started (its first event, before the ticker runs)."""


@dataclass(frozen=True, slots=True)
class Stopping:
    """The actor is stopping cleanly (its last event, after the ticker stopped)."""


#: What a lease's step function is fed; a `WriteResult` is the writer's answer to a `Submit`.
Event = RenewTick | WriteResult | Started | Stopping


# --- effects ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submit:
    """Send write command `name` with `args`; its answer comes back as a `WriteResult` event."""

    name: str
    args: Mapping[str, Any]
    correlation_id: str


@dataclass(frozen=True, slots=True)
class Renewed:
    """Tell the writer handle the lease's new expiry (the writer refuses fenced writes past it)."""

    expires_at: float


@dataclass(frozen=True, slots=True)
class AdvanceEpoch:
    """Have the writer handle stamp `epoch` on every command from now on (the lease was taken again)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Publish:
    """Write the lease's board section from the state after this step."""


@dataclass(frozen=True, slots=True)
class Notify:
    """Tell the supervisor `message` (LeaseLostNotice, LeaseSuspended, LeaseRegained)."""

    message: Any


@dataclass(frozen=True, slots=True)
class Log:
    """Write `text` to the lease module's log at `level`."""

    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Release:
    """Give the lease back with write command `name` (blocking, up to 5 s; only on a clean stop).

    Logged as "`what` released" / "`what` was already gone", or on an error
    as "could not release `what_on_failure`: …" (expiry covers a release
    that did not happen)."""

    name: str
    args: Mapping[str, Any]
    what: str
    what_on_failure: str


Effect = Submit | Renewed | AdvanceEpoch | Publish | Notify | Log | Release


def may_send(sent_at: float | None, now: float, interval_s: float) -> bool:
    """Whether a new attempt may be submitted at `now`: none is with the writer, or the last one
    went at least an interval ago (so an answer that never comes cannot stall the lease)."""
    return sent_at is None or now - sent_at >= interval_s


# --- the loop -----------------------------------------------------------------------------------

StateT = TypeVar("StateT")


class RenewalLoop(CoreActor, Generic[StateT]):
    """A lease actor: a ticker, the writer, and a step function that decides.

    A subclass names its board section and logger, builds its first state
    in `__init__`, and implements `step` (its module's `decide` with its
    configuration) and `view` (what `Publish` writes and its Get message
    answers). All hooks below run in the actor's thread unless said
    otherwise.
    """

    #: The board section `Publish` writes (a `board.Section` constant).
    board_section: str
    #: The lease module's logger, so log lines keep naming the lease they are about.
    lease_log: logging.Logger

    def __init__(self, writer: WriterHandle, state: StateT, *, supervisor: pykka.ActorRef[Any] | None,
                 clock: Callable[[], float], interval_s: float, board: HostBoard | None) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__(supervisor)
        self._writer = writer
        self._state = state
        self._clock = clock
        self._interval = interval_s
        self._board = board
        self._ticker: Ticker | None = None

    def step(self, state: StateT, event: Event, now: float) -> tuple[StateT, tuple[Effect, ...]]:
        """The lease's decision: a pure function of `state`, `event` and `now` (the subclass's)."""
        raise NotImplementedError

    def view(self, state: StateT) -> dict[str, Any]:
        """The lease as status views show it, never the token (the subclass's)."""
        raise NotImplementedError

    def on_start(self) -> None:
        """Runs in the lease's thread: the `Started` step, then the renewal ticker."""
        self._handle(Started())
        self._ticker = Ticker(self.actor_ref, RenewTick(), self._interval, self.actor_name).start()

    def release_resources(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def on_stop(self) -> None:
        """Runs in the lease's thread on a clean stop: stops the ticker, then the `Stopping` step
        (which gives the lease back unless it is lost or suspended)."""
        self.release_resources()
        self._handle(Stopping())

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {RenewTick: self._handle, WriteResult: self._handle}

    def _answer_view(self, _message: Any) -> dict[str, Any]:
        """The handler of the subclass's Get message: its view of the current state."""
        return self.view(self._state)

    def _handle(self, event: Event) -> None:
        self._state, effects = self.step(self._state, event, self._clock())
        for effect in effects:
            self._carry_out(effect)

    def _carry_out(self, effect: Effect) -> None:
        match effect:
            case Submit(name, args, correlation_id):
                self._writer.submit(WriteCommand(name, dict(args), correlation_id=correlation_id), self.actor_ref)
            case Renewed(expires_at):
                self._writer.lease_renewed(expires_at)
            case AdvanceEpoch(epoch):
                self._writer.advance_epoch(epoch)
            case Publish():
                if self._board is not None:
                    self._board.publish(self.board_section, self.view(self._state))
            case Notify(message):
                safe_tell(self._supervisor, message)
            case Log(level, text):
                self.lease_log.log(level, "%s", text)
            case Release():
                self._release(effect)
            case _:
                raise TypeError(f"{self.actor_name} cannot carry out {effect!r}")

    def _release(self, effect: Release) -> None:
        try:
            released = self._writer.call(effect.name, dict(effect.args), timeout=5)
            self.lease_log.info("%s %s", effect.what, "released" if released else "was already gone")
        except Exception as exc:  # the writer may be failing; expiry covers it
            self.lease_log.warning("could not release %s: %s", effect.what_on_failure, exc)
