"""The table of client operations, and the context their functions run in.

An operation is a free function `fn(ctx, payload)` registered by a decorator
together with its catalog entry: the payload's fields, whether the request
envelope must carry `run_id` (and `expected_revision`), whether it is
recorded for idempotency, whether it is read-only. The topic modules of this
package fill the table; the package's `__init__` imports each of them by
name and exposes the finished table as `OPERATIONS`. The gateway looks an
operation up there, checks the payload against its entry, refuses a
mutation on a standby, then calls its function (docs/protocol.md).

A write operation (`write_operation`) registers how its write command is
built instead: `build(env, request, payload) -> WriteCommand`, a function of
the request alone and of `env` (the workflow resolver and the database). The
gateway sends what it builds to the writer and answers with the writer's
result; the embedding API (`HostHandle`) builds the same `Request` for its
calls and runs the same check and builder, so a call through either door is
one command with one idempotency fingerprint.

Everything here runs in the gateway's thread unless it says otherwise: a
function hands slow work of the host's own (a backup, a verify) to the
gateway's maintenance executor with `ctx.in_executor(work)` or
`ctx.write_from_executor(build)`, and a build that runs workflow code (loads
a file, calls a key function) to a user-code thread with
`ctx.write_from_user_code(build)` (workflows/user_code.py): the two never
share threads, so hung workflow code cannot hold up maintenance.
"""

from __future__ import annotations

import functools
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pykka

from piwf_actors.board import HostBoard
from piwf_actors.paths import DatabaseLocation
from piwf_actors.protocol.envelope import Request
from piwf_actors.protocol.live_views import LiveViews
from piwf_actors.protocol.uploads import ClientUploads
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand
from piwf_actors.workflows.resolver import WorkflowResolver

#: A payload's fields: name → (type name, required). Type names: see `payloads.check_payload`.
Spec = dict[str, tuple[str, bool]]
#: Called with a write's value ({outcome, receipt, revision}) before it is answered; True if it
#: answered (or will answer) the request itself.
Verdict = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class BuildEnv:
    """What building a write command may use besides the request: the workflow resolver (run.start
    resolves its workflow, which reads and runs the file) and the database (run.restart reads the
    parent run, state.backup looks for its record)."""

    resolver: WorkflowResolver
    database: DatabaseLocation


Build = Callable[[BuildEnv, Request, dict[str, Any]], WriteCommand]
Handler = Callable[["OperationContext", dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Operation:
    """One client operation: its catalog entry and the functions that answer it.

    `recorded`: it changes durable state and is recorded by (client id, idempotency key) in the
    same transaction. `recorded_if` names a payload flag without which the operation is a dry run
    that changes nothing and is not recorded (state.prune's `apply`). `read_only`: it changes
    nothing at all. An operation that is neither changes the running host but no durable state
    (host.stop, channel.reload). `build`: how its write command is made (write operations only).
    """

    name: str
    fn: Handler
    payload: Spec = field(default_factory=dict)
    needs_run: bool = False
    needs_revision: bool = False
    recorded: bool = False
    recorded_if: str | None = None
    read_only: bool = False
    build: Build | None = None

    def __post_init__(self) -> None:
        if self.recorded and self.read_only:
            raise ValueError(f"{self.name}: an operation is recorded or read-only, not both")
        if self.recorded_if is not None and not self.recorded:
            raise ValueError(f"{self.name}: recorded_if applies to a recorded operation")

    @property
    def served_by_standby(self) -> bool:
        """Whether a standby host answers it (reads, and host.stop, which stops that standby); a standby
        answers every other operation `unavailable` (docs/standby.md)."""
        return self.read_only or self.name == "host.stop"

    def records(self, payload: dict[str, Any]) -> bool:
        """Whether this request is recorded for idempotency (False for a dry run)."""
        return self.recorded and (self.recorded_if is None or bool(payload.get(self.recorded_if)))


_OPERATIONS: dict[str, Operation] = {}
#: The table as the package exposes it (read-only; complete once `protocol.catalog` is imported).
TABLE: Mapping[str, Operation] = types.MappingProxyType(_OPERATIONS)


def _register(entry: Operation) -> None:
    if entry.name in _OPERATIONS:
        raise ValueError(f"client operation {entry.name!r} registered twice")
    _OPERATIONS[entry.name] = entry


def operation(name: str, *, payload: Spec | None = None, needs_run: bool = False, needs_revision: bool = False,
              recorded: bool = False, read_only: bool = False) -> Callable[[Handler], Handler]:
    """Register `fn(ctx, payload)` as what answers `name` (a read, a host control, or a recorded
    operation whose command is built elsewhere: schedule.trigger)."""

    def register(fn: Handler) -> Handler:
        _register(Operation(name, fn, dict(payload or {}), needs_run, needs_revision, recorded, None, read_only))
        return fn

    return register


def write_operation(name: str, *, payload: Spec | None = None, needs_run: bool = False,
                    needs_revision: bool = False, recorded_if: str | None = None, off_thread: bool = False,
                    handler: Handler | None = None) -> Callable[[Build], Build]:
    """Register `build(env, request, payload)` as how the recorded operation `name` makes its write
    command. Its function, unless `handler` is given: build the command in the gateway's thread and
    send it to the writer (`off_thread`: build it on a user-code thread, for builds that run a
    workflow file, and submit it from there), answering with the writer's result."""

    def register(build: Build) -> Build:
        fn = handler or (_send_built_off_thread if off_thread else _send_built)
        _register(Operation(name, fn, dict(payload or {}), needs_run, needs_revision, True, recorded_if, False,
                            build))
        return build

    return register


def _send_built(ctx: OperationContext, payload: dict[str, Any]) -> None:
    ctx.write(ctx.build(payload))


def _send_built_off_thread(ctx: OperationContext, payload: dict[str, Any]) -> None:
    ctx.write_from_user_code(functools.partial(ctx.build, payload))


def client_args(request: Request) -> dict[str, Any]:
    """What a write command carries for idempotency: the client id and key only when its operation
    records this request (a dry run is not), the request id, and the envelope and payload that the
    writer fingerprints (`store.command_records.args_fingerprint`)."""
    recorded = _OPERATIONS[request.operation].records(request.payload)
    return {"client_id": request.client_id if recorded else None,
            "idempotency_key": request.idempotency_key if recorded else None,
            "client_request_id": request.request_id, "run_id": request.run_id,
            "expected_revision": request.expected_revision, "payload": request.payload}


# --- the context -----------------------------------------------------------------------------


class GatewayPort(Protocol):
    """The gateway's plumbing, as its operations use it (through `OperationContext`). Called in the
    gateway's thread, except `reply`, which is also safe from the executor (posting is thread-safe)."""

    def reply(self, conn_id: int, request: Request, outcome: str, *, receipt: Any = None,
              revision: int | None = None, error: str | None = None) -> None: ...

    def write(self, conn_id: int, request: Request, command: WriteCommand, verdict: Verdict | None = None) -> None:
        """Send `command` to the writer; its result answers the request (after `verdict`, if given)."""

    def write_from_executor(self, conn_id: int, request: Request, build: Callable[[], WriteCommand]) -> None:
        """Run `build` on the maintenance executor and submit its command from there; a raised error is
        the answer."""

    def write_from_user_code(self, conn_id: int, request: Request, build: Callable[[], WriteCommand]) -> None:
        """Run `build` (which runs workflow code) on a user-code thread, bounded in time, and submit its
        command from there; a raised error, or the time limit, is the answer."""

    def in_executor(self, conn_id: int, request: Request, work: Callable[[], None]) -> None:
        """Run `work` on the executor; it answers the request itself; a raised error is the answer."""

    def expect(self, conn_id: int, request: Request) -> str:
        """Register the answer a write sent by another actor will bring back; its correlation token."""

    def forget(self, token: str) -> None:
        """Drop an expected answer that will not come."""


@dataclass(slots=True)
class GatewayStats:
    requests: int = 0
    by_operation: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class GatewayServices:
    """What the gateway holds for its operations, made in its `on_start` (the gateway's thread) and
    used from that thread only. `channels` and `schedules` change when a standby becomes active."""

    port: GatewayPort
    #: The gateway actor: where the answers of other actors (a reload, a manual fire) come back.
    gateway: pykka.ActorRef[Any]
    reader: StoreReader
    board: HostBoard
    views: LiveViews
    env: BuildEnv
    #: `env` with a resolver that only has what is cached: a miss raises instead of running a file.
    cached_env: BuildEnv
    connections: Callable[[], int]
    #: Timer time (piwf_actors/clock.py): what a view's `remaining_s` counts to. Host time unless the
    #: host was given a timer clock (a test host), so a client sees what the embedding handle sees.
    timer_now: Callable[[], float] = time.time
    stats: GatewayStats = field(default_factory=GatewayStats)
    shutdown: Callable[[str], None] | None = None
    channels: pykka.ActorRef[Any] | None = None
    schedules: pykka.ActorRef[Any] | None = None
    #: interaction.submit answers waiting for the worker's verdict: submission id → (request, outcome).
    verdicts: dict[str, tuple[OperationContext, str]] = field(default_factory=dict)
    #: channel.reload answers waiting for the channel manager: token → request.
    reloads: dict[str, OperationContext] = field(default_factory=dict)
    #: Values sent ahead of the requests that refer to them (content.upload), per connection.
    uploads: ClientUploads = field(default_factory=ClientUploads)
    #: Tell the other doors that an HTTP token was added or revoked (`DoorPosts.tokens_changed`).
    tokens_changed: Callable[[], None] = lambda: None


@dataclass(frozen=True, slots=True)
class OperationContext:
    """One request being answered: what its operation's function may use, and how it answers."""

    services: GatewayServices
    operation: Operation
    conn_id: int
    request: Request

    @property
    def reader(self) -> StoreReader:
        return self.services.reader

    @property
    def board(self) -> HostBoard:
        return self.services.board

    @property
    def views(self) -> LiveViews:
        return self.services.views

    @property
    def env(self) -> BuildEnv:
        return self.services.env

    def timer_now(self) -> float:
        """Timer time now: what a view's clocks (`remaining_s`) count to."""
        return self.services.timer_now()

    def reply(self, outcome: str, *, receipt: Any = None, revision: int | None = None,
              error: str | None = None) -> None:
        self.services.port.reply(self.conn_id, self.request, outcome, receipt=receipt, revision=revision, error=error)

    def build(self, payload: dict[str, Any], env: BuildEnv | None = None) -> WriteCommand:
        """This operation's write command for this request (with `env`, default: the full resolver)."""
        assert self.operation.build is not None, f"{self.operation.name} builds no write command"
        return self.operation.build(env or self.services.env, self.request, payload)

    def client_args(self) -> dict[str, Any]:
        return client_args(self.request)

    def write(self, command: WriteCommand, verdict: Verdict | None = None) -> None:
        self.services.port.write(self.conn_id, self.request, command, verdict)

    def write_from_executor(self, build: Callable[[], WriteCommand]) -> None:
        self.services.port.write_from_executor(self.conn_id, self.request, build)

    def write_from_user_code(self, build: Callable[[], WriteCommand]) -> None:
        self.services.port.write_from_user_code(self.conn_id, self.request, build)

    def in_executor(self, work: Callable[[], None]) -> None:
        self.services.port.in_executor(self.conn_id, self.request, work)

    def expect(self) -> str:
        return self.services.port.expect(self.conn_id, self.request)

    def forget(self, token: str) -> None:
        self.services.port.forget(token)
