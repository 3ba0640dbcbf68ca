"""What every core actor shares: typed dispatch and failure escalation.

Core actors (writer, lease, scheduler, gateway) are supervised one-for-all:
when one of them dies of an unexpected exception it tells the host
supervisor, which stops the whole host cleanly. pykka calls `on_failure`
only for exceptions escaping a `tell` handler; an exception in `on_start`
stops the actor without it, which `start_host` detects by pinging each actor
after starting it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import pykka

from piwf_actors.actor_refs import safe_tell
from piwf_actors.store.requests import WriteCommand, WriteResult, WriteResults

__all__ = ["ActorFailed", "CoreActor", "Ping", "PollingActor", "WriteReplies", "safe_tell"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ActorFailed:
    """Told to the supervisor when a core actor dies."""

    actor: str
    reason: str


@dataclass(frozen=True, slots=True)
class Ping:
    """Answered with True by every core actor once `on_start` has succeeded."""




class CoreActor(pykka.ThreadingActor):
    """A ThreadingActor whose `on_receive` dispatches on the message's type.

    Subclasses fill `handlers()` with `{MessageType: bound_method}`; an
    unknown message type is a programming error and raises.
    """

    #: Shown in logs and in ActorFailed notices.
    actor_name = "actor"

    def __init__(self, supervisor: pykka.ActorRef[Any] | None = None) -> None:
        super().__init__()
        self._supervisor = supervisor
        self._dispatch: dict[type, Callable[[Any], Any]] = {}

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {}

    def on_receive(self, message: Any) -> Any:
        if not self._dispatch:
            self._dispatch = {Ping: lambda _m: True, **self.handlers()}
        handler = self._dispatch.get(type(message))
        if handler is None:
            if type(message) is WriteResults:
                # The writer's results of one batch, in order: each as if told alone.
                for result in message.results:
                    self.on_receive(result)
                return None
            raise TypeError(f"{self.actor_name} cannot handle {type(message).__name__}")
        return handler(message)

    def on_failure(self, exception_type: type[BaseException] | None,
                   exception_value: BaseException | None, traceback: TracebackType | None) -> None:
        """Runs in the actor's thread after an unhandled exception: release, then escalate."""
        try:
            self.release_resources()
        finally:
            reason = f"{type(exception_value).__name__}: {exception_value}"
            log.error("%s failed: %s", self.actor_name, reason)
            safe_tell(self._supervisor, ActorFailed(self.actor_name, reason))

    def on_stop(self) -> None:
        """Runs in the actor's thread after its last message."""
        self.release_resources()

    def release_resources(self) -> None:
        """Close connections, stop tickers. Must be safe to call twice."""


class PollingActor(CoreActor):
    """A core actor that reads the database through a reader of its own and wakes on a ticker of
    its own (the standby watch, the runner watch, the schedule keeper, the housekeeper). The subclass opens both in
    `on_start` (as `_reader` and `_ticker`); they are released here, safely twice."""

    _reader: Any = None
    _ticker: Any = None

    def release_resources(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class _Submits(Protocol):
    """What `WriteReplies` needs of a `WriterHandle` (whose module imports this one)."""

    def submit(self, command: WriteCommand, reply_to: Any = None) -> None: ...

    def offer(self, command: WriteCommand, reply_to: Any) -> None: ...

    def withdraw_offer(self, correlation_id: str | None) -> bool: ...


class WriteReplies:
    """An actor's writes in flight, each with the handler of its answer.

    `submit` sends a command under a fresh token and keeps its handler;
    `answer` (from the actor's `WriteResult` handler) hands each result to the
    handler its command was sent with, and ignores a token it does not know.
    Used from the owning actor's thread only; made in its `on_start`, where
    its ref is known. (The gateway keeps its own map: its answers go to a
    connection, not to a method.)
    """

    def __init__(self, writer: _Submits, reply_to: pykka.ActorRef[Any]) -> None:
        self._writer = writer
        self._reply_to = reply_to
        self._pending: dict[str, Callable[[WriteResult], None]] = {}

    def submit(self, name: str, args: dict[str, Any], on_result: Callable[[WriteResult], None]) -> None:
        token = f"{name}:{secrets.token_hex(6)}"
        self._pending[token] = on_result
        self._writer.submit(WriteCommand(name, args, correlation_id=token), self._reply_to)

    def offer(self, name: str, args: dict[str, Any], on_result: Callable[[WriteResult], None]) -> str:
        """`submit`, but left with the writer as its standing offer (WriterQueue.offer); returns the
        token that `withdraw` takes back."""
        token = f"{name}:{secrets.token_hex(6)}"
        self._pending[token] = on_result
        self._writer.offer(WriteCommand(name, args, correlation_id=token), self._reply_to)
        return token

    def withdraw(self, token: str) -> bool:
        """Take the offer back; False when the writer took it already (its answer is on the way)."""
        if not self._writer.withdraw_offer(token):
            return False
        self._pending.pop(token, None)
        return True

    def answer(self, result: WriteResult) -> None:
        on_result = self._pending.pop(result.correlation_id or "", None)
        if on_result is not None:
            on_result(result)
