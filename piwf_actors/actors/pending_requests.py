"""`PendingRequests`: the gateway's client requests that wait for a write's result.

An operation that writes does not answer at once: its command goes to the
writer under a correlation token, and the writer's `WriteResult` comes back
to the gateway actor, which hands it here to find the request it answers.
This is the `GatewayPort` the catalog's operations answer through
(`protocol/catalog/registry.py`): the ways a write reaches the writer (from
the gateway's thread, built on the maintenance executor, or built on a
user-code thread) and the table that correlates the answers with their
requests. The socket and the dispatch stay with the gateway
(`actors/gateway.py`), which made this in its `on_start`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pykka

from piwf_actors.actors.base import safe_tell
from piwf_actors.actors.writer_handle import WriterHandle
from piwf_actors.errors import PiwfError, Rejected, outcome_for
from piwf_actors.protocol.catalog.registry import Verdict
from piwf_actors.protocol.envelope import Request
from piwf_actors.store.requests import WriteCommand, WriteResult
from piwf_actors.workflows.user_code import UserCode

# The gateway's log: these lines are its requests' failures.
log = logging.getLogger("piwf_actors.actors.gateway")


class Reply(Protocol):
    """The gateway's `reply`: post the response to `request` (safe from any thread: posting is)."""

    def __call__(self, conn_id: int, request: Request | None, outcome: str, *, receipt: Any = None,
                 revision: int | None = None, error: str | None = None) -> None: ...


@dataclass
class _Pending:
    """A request waiting for its write's result (a recorded command's value: {outcome, receipt, revision})."""

    conn_id: int
    request: Request
    #: Called with the value first; True if it answered (or will answer) the request itself.
    verdict: Verdict | None = None


class PendingRequests:
    """The port the operations answer through, and the requests waiting for their write.

    Made in the gateway's `on_start` and called in the gateway's thread, except `reply`, which is safe
    from any thread (posting is), and the builds, which run on the maintenance `executor` or on a
    user-code thread and submit their command from there. Every answer comes back to `gateway`.
    """

    def __init__(self, writer: WriterHandle, gateway: pykka.ActorRef[Any], reply: Reply,
                 executor: concurrent.futures.Executor, user_code: UserCode,
                 answered: Callable[[int], None]) -> None:
        """Runs in the gateway's thread. `answered(commit_seq)`: a write committed under that seq was
        answered (the live views' `answered`)."""
        self._writer = writer
        self._gateway = gateway
        self._reply = reply
        self._executor = executor
        self._user_code = user_code
        self._answered = answered
        self._pending: dict[str, _Pending] = {}

    def reply(self, conn_id: int, request: Request | None, outcome: str, *, receipt: Any = None,
              revision: int | None = None, error: str | None = None) -> None:
        """Post the response to `request` (safe from any thread: posting is)."""
        self._reply(conn_id, request, outcome, receipt=receipt, revision=revision, error=error)

    def expect(self, conn_id: int, request: Request, verdict: Verdict | None = None) -> str:
        """Register the answer a write will bring back; its correlation token."""
        token = f"req:{conn_id}:{secrets.token_hex(6)}"
        self._pending[token] = _Pending(conn_id, request, verdict)
        return token

    def forget(self, token: str) -> None:
        self._pending.pop(token, None)

    def write(self, conn_id: int, request: Request, command: WriteCommand, verdict: Verdict | None = None) -> None:
        token = self.expect(conn_id, request, verdict)
        self._writer.submit(WriteCommand(command.name, command.args, correlation_id=token), self._gateway)

    def write_from_executor(self, conn_id: int, request: Request, build: Callable[[], WriteCommand]) -> None:
        """Build the command on the executor (it loads a workflow file) and submit it from there, straight
        to the writer: the answer still comes back to the gateway under the token registered here."""
        token = self.expect(conn_id, request)
        writer, ref = self._writer, self._gateway

        def run() -> None:
            try:
                command = build()
            except PiwfError as err:
                failed = WriteResult(False, None, err.code, err.one_line(), token)
            except Exception as exc:
                log.exception("%s failed", request.operation)
                failed = WriteResult(False, None, Rejected.code, f"{type(exc).__name__}: {exc}", token)
            else:
                writer.submit(WriteCommand(command.name, command.args, correlation_id=token), ref)
                return
            safe_tell(ref, failed)  # answered like a refusal from the writer

        self._executor.submit(run)

    def write_from_user_code(self, conn_id: int, request: Request, build: Callable[[], WriteCommand]) -> None:
        """Build the command on a user-code thread (it runs workflow code, bounded in time) and submit it
        from there, straight to the writer; a failure or the time limit is answered like a refusal of
        the writer's, under the token registered here."""
        token = self.expect(conn_id, request)
        writer, ref = self._writer, self._gateway

        def done(command: WriteCommand | None, error: BaseException | None) -> None:
            """Runs on the user-code thread, on its watcher (a limit ran out) or here (refused at once)."""
            if error is None:
                assert command is not None
                writer.submit(WriteCommand(command.name, command.args, correlation_id=token), ref)
                return
            if isinstance(error, PiwfError):
                failed = WriteResult(False, None, error.code, error.one_line(), token)
            else:
                log.error("%s failed", request.operation, exc_info=error)
                failed = WriteResult(False, None, Rejected.code, f"{type(error).__name__}: {error}"[:1000], token)
            safe_tell(ref, failed)  # answered like a refusal from the writer

        self._user_code.submit(build, done)

    def in_executor(self, conn_id: int, request: Request, work: Callable[[], None]) -> None:
        """Run `work` off the gateway's thread; it answers the request itself (post is thread-safe)."""

        def run() -> None:
            try:
                work()
            except PiwfError as err:
                self.reply(conn_id, request, outcome_for(err.code), error=err.one_line())
            except Exception as exc:
                log.exception("%s failed", request.operation)
                self.reply(conn_id, request, "rejected", error=f"{type(exc).__name__}: {exc}")

        self._executor.submit(run)

    def answer(self, result: WriteResult) -> None:
        """A write's result: the pending request's answer (through its verdict, if it has one)."""
        pending = self._pending.pop(result.correlation_id or "", None)
        if pending is None:
            return
        if result.ok and result.commit_seq is not None:
            self._answered(result.commit_seq)
        if not result.ok:
            outcome = outcome_for(result.error_code)
            self.reply(pending.conn_id, pending.request, outcome, error=result.error or "refused")
            return
        value = result.value
        if pending.verdict is not None and pending.verdict(value):
            return
        self.reply(pending.conn_id, pending.request, value["outcome"], receipt=value.get("receipt"),
                   revision=value.get("revision"))

    def connection_closed(self, conn_id: int) -> None:
        """The client is gone: its writes still happen, their answers have nowhere to go."""
        for token in [t for t, p in self._pending.items() if p.conn_id == conn_id]:
            # A client that reconnects and replays the idempotency key gets it as `adopted`.
            self._pending[token].conn_id = -1
