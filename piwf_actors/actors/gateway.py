"""`ClientGateway`: the Unix socket where people and programs talk to the host.

The socket I/O runs on a selector thread owned by this actor
(`protocol.socket_loop`); every decoded frame comes here as a
`ClientRequest` and is dispatched through the one table of operations
(`protocol.catalog.OPERATIONS`). Reads are answered from the gateway's own
read-only connection; writes go to the writer as commands and are answered
when the writer's result comes back (never blocking this actor); slow work
(loading a workflow file, backup, verify) runs on a small executor owned by
the actor.

A write's path to the writer, in thread hand-offs: the socket thread decodes
the frame and tells this actor (1); this actor builds the command and puts it
on the writer's queue (2). `run.start` keeps to those two whenever the
workflow's resolution is cached and its file unchanged (the usual case: the
same workflow started again); a workflow not loaded yet goes socket thread →
gateway → executor (which loads it) → writer, three. The writer's answer
comes back to this actor, which posts the response to the socket thread.

Watches follow the writer's change notices, coalesced: the runs a notice
names are the only ones read again (`RunWindow`), each view is built and
packed once per flush for all its watchers, and an event is sent only when
a watch's view changed.

On a standby host (docs/standby.md) the gateway answers the operations the
catalog marks `served_by_standby` (reads, host.stop) and every other one
`unavailable` with a hint naming the active host; another host does the
writing, so no change notice comes, and watches and `run.list` follow the
database instead: every STANDBY_POLL_S each watch's view is built again
(an event still goes out only when it changed). `BecomeActive` (from the
host, once this host took the lease) ends all of that.

A runner host's gateway (docs/runners.md) is a standby's for good: reads,
and mutations answered `unavailable` with a hint naming the active host.
An active host's gateway follows the database the same way while runner
hosts are live (the host board's `runners` section, kept by RunnerWatch):
runs they execute change without a change notice here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.channel_manager import ChannelsReloaded, ReloadChannels
from piwf_actors.actors.gateway_resources import ResourceOperations
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.board import HostBoard, Section, Stream
from piwf_actors.errors import PiwfError, Rejected, RunnerHostRefusal, StandbyHost, outcome_for
from piwf_actors.messages.limits import Limits
from piwf_actors.operations import restart_run_command, start_run_command
from piwf_actors.paths import DatabaseLocation
from piwf_actors.protocol import views
from piwf_actors.protocol.catalog import OPERATIONS
from piwf_actors.protocol.envelope import BadRequest, Request, hello, parse_request, response
from piwf_actors.protocol.live_views import LiveViews
from piwf_actors.protocol.payloads import check_payload
from piwf_actors.protocol.schedule_ops import ScheduleOperations
from piwf_actors.protocol.socket_loop import Peer, SocketLoop
from piwf_actors.protocol.watches import WatchRefused
from piwf_actors.statuses import RUN_STATUSES
from piwf_actors.store import channel_queries, queries
from piwf_actors.store.command_records import lookup_recorded, recordable
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult
from piwf_actors.workflows.discovery import ResolvedWorkflow
from piwf_actors.workflows.resolver import WorkflowResolver

log = logging.getLogger(__name__)

Handler = Callable[[int, Request, dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class ClientRequest:
    conn_id: int
    frame: dict[str, Any]
    peer: Peer | None = None


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    conn_id: int


@dataclass(frozen=True, slots=True)
class FlushWatches:
    pass


@dataclass(frozen=True, slots=True)
class StandbyPoll:
    """A standby's gateway: time to look at the database for what the active host changed."""


@dataclass(frozen=True, slots=True)
class BecomeActive:
    """Told by the host once this standby holds the lease and runs its active parts."""

    epoch: int
    channels: pykka.ActorRef[Any] | None
    schedules: pykka.ActorRef[Any] | None = None


#: How often a standby's watches look at the database (another host writes; no change notice comes).
STANDBY_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class NodeOutput:
    """Live output of a running shell node (from the board's "node_output" stream)."""

    payload: dict[str, Any]


class _NotCached(Exception):
    """The workflow is not resolved yet (or its file changed): loading it is the executor's job."""


class _CachedOnly(WorkflowResolver):
    """The shared resolver's cached resolutions, and nothing else: a miss raises `_NotCached`
    instead of loading the file (which runs it) in the gateway's thread."""

    def __init__(self, shared: WorkflowResolver) -> None:
        super().__init__()
        self._shared = shared

    def resolve(self, spec: str, project_path: str | None) -> ResolvedWorkflow:
        found = self._shared.cached(spec, project_path)
        if found is None:
            raise _NotCached(spec)
        return found


@dataclass
class _Pending:
    """A request waiting for its write's result (a recorded command's value: {outcome, receipt, revision})."""

    conn_id: int
    request: Request
    #: Called with the value first; True if it answered (or will answer) the request itself.
    verdict: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class GatewayStats:
    requests: int = 0
    by_operation: dict[str, int] = field(default_factory=dict)


class ClientGateway(ScheduleOperations, ResourceOperations, CoreActor):
    actor_name = "gateway"

    def __init__(self, writer: WriterHandle, db_path: DatabaseLocation, socket_path: Path, *, host_epoch: int,
                 supervisor: pykka.ActorRef[Any] | None, board: HostBoard, limits: Limits = Limits(),
                 resolver: WorkflowResolver | None = None, shutdown: Callable[[str], None] | None = None,
                 channels: pykka.ActorRef[Any] | None = None, schedules: pykka.ActorRef[Any] | None = None,
                 standby: bool = False, standby_poll_s: float = STANDBY_POLL_S, runner: bool = False) -> None:
        """Runs in the caller's thread: stores arguments only. `standby`: this host does not hold the
        lease (yet); `runner`: a runner host's gateway (with `standby`: it never holds it); see the
        module docstring."""
        super().__init__(supervisor)
        self._standby = standby
        self._runner = runner
        self._standby_poll_s = standby_poll_s
        self._standby_ticker: Ticker | None = None
        self._writer = writer
        self._db_path = db_path
        self._socket_path = socket_path
        self._epoch = host_epoch
        self._board = board
        self._limits = limits
        self._resolver = resolver or WorkflowResolver()
        self._cached_only = _CachedOnly(self._resolver)
        self._shutdown = shutdown
        self._loop: SocketLoop | None = None
        self._reader: StoreReader | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: dict[str, _Pending] = {}
        self._views: LiveViews | None = None
        self._flush_scheduled = False
        self._handlers: dict[str, Handler] = {}
        self._stats = GatewayStats()
        self._verdicts: dict[str, tuple[int, Request, str]] = {}
        self._channels = channels
        self._schedules = schedules  # the schedule keeper (schedule.trigger), None when the host runs none
        self._reloads: dict[str, tuple[int, Request]] = {}

    # --- lifecycle ---------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the gateway's thread: handlers, reader, executor, change notices, then the socket."""
        self._handlers = {name: getattr(self, operation.handler) for name, operation in OPERATIONS.items()}
        self._reader = StoreReader(self._db_path)
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="piwf-gateway")
        self._writer.ref.tell(Subscribe(self.actor_ref))
        ref = self.actor_ref
        self._board.listen(Stream.NODE_OUTPUT, self._on_output)
        self._loop = SocketLoop(
            self._socket_path,
            on_open=lambda conn_id: hello(f"c{conn_id}-{secrets.token_hex(4)}", self._writer.host_epoch or self._epoch),
            on_frame=lambda conn_id, frame, peer: safe_tell(ref, ClientRequest(conn_id, frame, peer)),
            on_closed=lambda conn_id: safe_tell(ref, ConnectionClosed(conn_id)),
            limits=self._limits,
            on_alarm=lambda: safe_tell(ref, FlushWatches()),
        )
        self._views = LiveViews(self._reader, self._board, self._loop)
        self._views.external_writes = self._standby
        # A standby or runner host polls the database for every view; an active host only while runner
        # hosts are live (see _standby_poll).
        self._standby_ticker = Ticker(ref, StandbyPoll(), self._standby_poll_s, "gateway-poll").start()
        self._loop.start()
        mode = " (runner host: reads only)" if self._runner else " (standby: reads only)" if self._standby else ""
        log.info("listening on %s%s", self._socket_path, mode)

    def _on_output(self, payload: dict[str, Any]) -> None:
        """Runs in a runner's reader thread: hand the output to this actor."""
        safe_tell(self.actor_ref, NodeOutput(payload))

    def release_resources(self) -> None:
        if self._standby_ticker is not None:
            self._standby_ticker.stop()
            self._standby_ticker = None
        self._board.unlisten(Stream.NODE_OUTPUT, self._on_output)
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {ClientRequest: self._request, ConnectionClosed: self._closed, ChangeNotice: self._changed,
                FlushWatches: self._flush_watches, WriteResult: self._written,
                ChannelsReloaded: self._channels_reloaded, NodeOutput: self._node_output,
                StandbyPoll: self._standby_poll, BecomeActive: self._become_active}

    # --- plumbing ------------------------------------------------------------------------

    def _post(self, conn_id: int, frame: dict[str, Any], *, is_response: bool = True) -> None:
        if self._loop is not None:
            self._loop.post(conn_id, frame, is_response=is_response)

    def _reply(self, conn_id: int, request: Request | None, outcome: str, **kwargs: Any) -> None:
        self._post(conn_id, response(request.request_id if request else None, outcome, **kwargs))

    def _in_executor(self, conn_id: int, request: Request, work: Callable[[], Any]) -> None:
        """Run `work` off the actor thread; it answers the request itself (post is thread-safe)."""
        assert self._executor is not None

        def run() -> None:
            try:
                work()
            except PiwfError as err:
                self._reply(conn_id, request, outcome_for(err.code), error=err.one_line())
            except Exception as exc:
                log.exception("%s failed", request.operation)
                self._reply(conn_id, request, "rejected", error=f"{type(exc).__name__}: {exc}")

        self._executor.submit(run)

    # --- requests ------------------------------------------------------------------------

    def _request(self, message: ClientRequest) -> None:
        conn_id = message.conn_id
        try:
            request = parse_request(message.frame)
        except BadRequest as bad:
            self._post(conn_id, response(bad.request_id, "rejected", error=str(bad)))
            return
        if message.peer is not None:
            request = dataclasses.replace(request, peer=message.peer.to_wire())
        self._stats.requests += 1
        self._stats.by_operation[request.operation] = self._stats.by_operation.get(request.operation, 0) + 1
        operation = OPERATIONS.get(request.operation)
        if operation is None:
            self._reply(conn_id, request, "rejected", error=f"operation {request.operation!r} is not available")
            return
        try:
            payload = check_payload(request, operation)
            if self._standby and not operation.served_by_standby:
                raise self._standby_refusal()
            self._handlers[operation.name](conn_id, request, payload)
        except BadRequest as bad:
            self._reply(conn_id, request, "rejected", error=str(bad))
        except PiwfError as err:
            self._reply(conn_id, request, outcome_for(err.code), error=err.one_line())

    # --- standby -------------------------------------------------------------------------------

    def _standby_refusal(self) -> StandbyHost | RunnerHostRefusal:
        """The one-line answer to a mutation on a standby or a runner host: who is active, and when to retry."""
        assert self._reader is not None
        lease = queries.lease_row(self._reader, time.time())
        if self._runner:
            return RunnerHostRefusal(lease["host_id"], lease["epoch"], lease["live"])
        return StandbyHost(lease["host_id"], lease["epoch"], lease["live"])

    def _standby_poll(self, _message: StandbyPoll) -> None:
        if self._standby:
            self._read_views_again()
            return
        # An active host: runner hosts write what no change notice here tells of.
        runners_live = bool(self._board.snapshot(Section.RUNNERS).get("live"))
        if self._views is not None and self._views.external_writes != runners_live:
            self._views.external_writes = runners_live
        if runners_live:
            self._read_views_again()

    def _read_views_again(self) -> None:
        """Mark every watch for a fresh look at the database (they send only what changed)."""
        if self._views is not None and self._views.poll_database() is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.actor_ref.tell(FlushWatches())

    def _become_active(self, message: BecomeActive) -> None:
        """This host holds the lease now: mutations go to the writer, watches follow its change notices
        (and the database while runner hosts are live)."""
        self._standby = False
        self._epoch = message.epoch
        self._channels = message.channels
        self._schedules = message.schedules
        if self._views is not None:
            self._views.external_writes = False
            self._read_views_again()  # once more: what the last host changed before this one's first notice
        log.info("gateway active at epoch %d", message.epoch)

    def _client_args(self, request: Request) -> dict[str, Any]:
        """What a write command carries for idempotency: the client id and key only when the catalog
        says this request is recorded (a dry run is not)."""
        recorded = OPERATIONS[request.operation].records(request.payload)
        return {"client_id": request.client_id if recorded else None,
                "idempotency_key": request.idempotency_key if recorded else None,
                "client_request_id": request.request_id, "run_id": request.run_id,
                "expected_revision": request.expected_revision, "payload": request.payload}

    def _expect(self, conn_id: int, request: Request,
                verdict: Callable[[dict[str, Any]], bool] | None = None) -> str:
        """Register the answer a write will bring back; its correlation token."""
        token = f"req:{conn_id}:{secrets.token_hex(6)}"
        self._pending[token] = _Pending(conn_id, request, verdict)
        return token

    def _send_write(self, conn_id: int, request: Request, command: WriteCommand,
                    verdict: Callable[[dict[str, Any]], bool] | None = None) -> None:
        token = self._expect(conn_id, request, verdict)
        self._writer.submit(WriteCommand(command.name, command.args, correlation_id=token), self.actor_ref)

    def _write_from_executor(self, conn_id: int, request: Request, build: Callable[[], WriteCommand]) -> None:
        """Build the command on the executor (it loads a workflow file) and submit it from there, straight
        to the writer: the answer still comes back to this actor under the token registered here."""
        assert self._executor is not None
        token = self._expect(conn_id, request)
        writer, ref = self._writer, self.actor_ref

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

    def _written(self, result: WriteResult) -> None:
        pending = self._pending.pop(result.correlation_id or "", None)
        if pending is None:
            return
        if result.ok and result.commit_seq is not None and self._views is not None:
            self._views.answered(result.commit_seq)
        if not result.ok:
            outcome = outcome_for(result.error_code)
            self._reply(pending.conn_id, pending.request, outcome, error=result.error or "refused")
            return
        value = result.value
        if pending.verdict is not None and pending.verdict(value):
            return
        self._reply(pending.conn_id, pending.request, value["outcome"], receipt=value.get("receipt"),
                    revision=value.get("revision"))

    # --- host -----------------------------------------------------------------------------

    def _host_status(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        assert self._reader is not None
        view = views.host_view(self._reader, self._board)
        view["gateway"] = {"connections": self._loop.connection_count() if self._loop else 0,
                           "watches": len(self._views.watches) if self._views else 0, "requests": self._stats.requests}
        self._reply(conn_id, request, "accepted", receipt=view)

    def _host_stop(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        self._reply(conn_id, request, "accepted", receipt={"stopping": True})
        if self._shutdown is not None:
            self._shutdown(f"host.stop from client {request.client_id}")

    # --- runs -----------------------------------------------------------------------------

    def _run_start(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """Two hand-offs when the workflow is cached: the command is built here and goes to the writer;
        otherwise the executor loads the workflow and submits it (see the module docstring)."""
        build = functools.partial(start_run_command, workflow=payload["workflow"], input=payload.get("input"),
                                  project_path=payload.get("project_path"), session_id=payload.get("session_id"),
                                  run_id=payload.get("run_id"), client_id=request.client_id,
                                  idempotency_key=request.idempotency_key, request_id=request.request_id)
        try:
            command = build(self._cached_only)
        except _NotCached:
            self._write_from_executor(conn_id, request, lambda: build(self._resolver))
            return
        self._send_write(conn_id, request, command)

    def _run_list(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """From memory when the gateway's run window holds the answer (see LiveViews.run_list)."""
        status = payload.get("status")
        if status is not None and status not in RUN_STATUSES:
            raise BadRequest(f"run.list: unknown status {status!r}", request.request_id)
        assert self._views is not None
        runs = self._views.run_list(status, min(payload.get("limit") or 100, 1000), payload.get("workflow"),
                                    payload.get("since"))
        self._reply(conn_id, request, "accepted", receipt={"runs": runs})

    def _ids_match(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """The full ids that start with a prefix (what `piwf` does with `piwf show run_01m8`)."""
        assert self._reader is not None
        kind, prefix = payload["kind"], payload["prefix"]
        if kind not in queries.ID_KINDS:
            raise BadRequest(f"ids.match: unknown kind {kind!r} (kinds: {', '.join(queries.ID_KINDS)})",
                             request.request_id)
        if not prefix:
            raise BadRequest("ids.match: prefix must not be empty", request.request_id)
        limit = min(payload.get("limit") or queries.ID_MATCH_DEFAULT, queries.ID_MATCH_MAX)
        matches, more = queries.match_ids(self._reader, kind, prefix, limit)
        self._reply(conn_id, request, "accepted", receipt={"matches": matches, "more": more})

    def _run_get(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        assert self._reader is not None and request.run_id is not None
        view = queries.run_view(self._reader, request.run_id)
        if view is None:
            self._reply(conn_id, request, "notFound", error=f"run {request.run_id} not found")
            return
        self._reply(conn_id, request, "accepted", receipt=view, revision=view["revision"])

    def _run_events(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._reader is not None and request.run_id is not None
        status = queries.run_status(self._reader, request.run_id)
        if status is None:
            self._reply(conn_id, request, "notFound", error=f"run {request.run_id} not found")
            return
        limit = min(payload.get("limit") or 500, 5000)
        events = queries.run_events(self._reader, request.run_id, payload.get("after") or 0, limit)
        events, cut = views.fit(events)
        next_after = events[-1]["seq"] if events else (payload.get("after") or 0)
        self._reply(conn_id, request, "accepted", revision=status[1],
                    receipt={"events": events, "next_after": next_after, "more": cut or len(events) == limit})

    def _content_read(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """A chunk of a stored value that a view showed as `{"$content": digest, …}`."""
        assert self._reader is not None
        length = payload.get("length")
        chunk = queries.content_chunk(self._reader, payload["digest"], payload.get("offset") or 0,
                                      queries.CONTENT_CHUNK_BYTES if length is None else length)
        if chunk is None:
            self._reply(conn_id, request, "notFound", error=f"no content {payload['digest'][:64]}")
            return
        self._reply(conn_id, request, "accepted", receipt=chunk)

    def _run_control(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        self._send_write(conn_id, request, WriteCommand(request.operation, self._client_args(request)))

    def _run_restart(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """Reads the parent and resolves its workflow again (which runs its file): on the executor,
        which submits the command to the writer itself."""
        assert request.run_id is not None
        self._write_from_executor(conn_id, request, functools.partial(
            restart_run_command, self._resolver, self._db_path, run_id=request.run_id,
            expected_revision=request.expected_revision, from_node=payload.get("from_node"),
            same_code=bool(payload.get("same_code", False)), client_id=request.client_id,
            idempotency_key=request.idempotency_key, request_id=request.request_id))

    def _effect_resolve(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        if payload["action"] not in ("confirm", "retry"):
            raise BadRequest("effect.resolve: action must be confirm or retry", request.request_id)
        args = {**self._client_args(request), "effect_id": payload["effect_id"], "action": payload["action"],
                "output": payload.get("output")}
        self._send_write(conn_id, request, WriteCommand("effect.resolve", args))

    # --- state maintenance ---------------------------------------------------------------------

    def _state_status(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        from piwf_actors.store import maintenance

        def status() -> None:
            receipt = maintenance.state_status(self._db_path)
            # Whether writes stand still for a full disk (the writer's own word, on the board).
            receipt["disk_full"] = (self._board.snapshot(Section.WRITER) or {}).get("disk_full")
            self._reply(conn_id, request, "accepted", receipt=receipt)

        self._in_executor(conn_id, request, status)

    def _state_verify(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        from piwf_actors.store import maintenance

        self._in_executor(conn_id, request, lambda: self._reply(
            conn_id, request, "accepted", receipt=maintenance.verify(self._db_path, time.time())))

    def _state_backup(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """A recorded command whose effect is a file: the executor looks for the request's record, makes
        the copy only if there is none, and sends the receipt (or the refusal) to be recorded; the
        writer answers a replay from the record (`adopted` with the first receipt)."""
        from piwf_actors.store import maintenance

        destination = payload["destination"]
        if not os.path.isabs(destination):
            raise BadRequest("state.backup: destination must be an absolute path", request.request_id)
        args = self._client_args(request)

        def build() -> WriteCommand:
            if lookup_recorded(self._db_path, "state.backup", args) is None:
                try:
                    args["receipt"] = maintenance.backup(self._db_path, destination)
                except PiwfError as err:
                    if not recordable(err.code):
                        raise
                    args["refusal"] = {"code": err.code, "message": err.one_line()}
            return WriteCommand("state.backup", args)

        self._write_from_executor(conn_id, request, build)

    def _state_prune(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        # A dry run changes nothing, so it is not recorded (the catalog's recorded_if="apply").
        args = {**self._client_args(request), "before": float(payload["before"]),
                "apply": bool(payload.get("apply", False))}
        if payload.get("idempotency_before") is not None:
            args["idempotency_before"] = float(payload["idempotency_before"])
        self._send_write(conn_id, request, WriteCommand("state.prune", args))

    # --- decision channels ------------------------------------------------------------------------

    def _channel_status(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        assert self._reader is not None
        status = dict(self._board.snapshot(Section.CHANNELS) or {"configured": False, "profiles": []})
        status.update(channel_queries.deliveries_status(self._reader))
        self._reply(conn_id, request, "accepted", receipt=status)

    def _channel_reload(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        if self._channels is None:
            self._reply(conn_id, request, "unavailable", error="decision channels are not running in this host")
            return
        token = f"reload:{conn_id}:{secrets.token_hex(6)}"
        self._reloads[token] = (conn_id, request)
        safe_tell(self._channels, ReloadChannels(self.actor_ref, token))

    def _channels_reloaded(self, message: ChannelsReloaded) -> None:
        waiting = self._reloads.pop(message.token, None)
        if waiting is not None:
            assert self._reader is not None
            status = {**message.status, **channel_queries.deliveries_status(self._reader)}
            self._reply(waiting[0], waiting[1], "accepted", receipt=status)

    def _channel_recover(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        if payload["action"] not in ("confirm", "retry"):
            raise BadRequest("channel.recover: action must be confirm or retry", request.request_id)
        args = {**self._client_args(request), "profile": payload["profile"], "message_id": payload["message_id"],
                "action": payload["action"]}
        self._send_write(conn_id, request, WriteCommand("channel.recover", args))

    # --- interactions ----------------------------------------------------------------------------

    def _interaction_list(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._reader is not None
        self._reply(conn_id, request, "accepted", receipt=views.interactions_view(self._reader, payload.get("session_id")))

    def _answer(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        args = {**self._client_args(request), **payload}
        args["payload"] = request.payload
        args["peer"] = request.peer  # who answered, kept with the submission (not in the fingerprint)
        if request.operation == "interaction.submit":
            # The submitter waits for the worker's verdict on its submission.
            def after_write(value: dict[str, Any]) -> bool:
                return self._await_verdict(conn_id, request, value)

            self._send_write(conn_id, request, WriteCommand(request.operation, args), verdict=after_write)
            return
        self._send_write(conn_id, request, WriteCommand(request.operation, args))

    def _await_verdict(self, conn_id: int, request: Request, value: dict[str, Any]) -> bool:
        """Hold the answer to interaction.submit until the submission is decided. True if answered now."""
        receipt = value.get("receipt") or {}
        submission_id = receipt.get("submission_id")
        if submission_id is None:
            return False
        self._verdicts[submission_id] = (conn_id, request, value.get("outcome", "accepted"))
        self._check_verdicts()
        return True

    def _check_verdicts(self) -> None:
        assert self._reader is not None
        for submission_id, (conn_id, request, outcome) in list(self._verdicts.items()):
            decided = queries.submission_state(self._reader, submission_id)
            if decided is None or decided["outcome"] == "validating" and decided["request_status"] != "cancelled":
                continue
            del self._verdicts[submission_id]
            receipt = {"submission_id": submission_id, "request_id": decided["request_id"],
                       "outcome": decided["outcome"]}
            if decided["outcome"] == "accepted":
                self._reply(conn_id, request, outcome if outcome == "adopted" else "accepted", receipt=receipt)
            elif decided["outcome"] == "rejected":
                self._reply(conn_id, request, "rejected", receipt=receipt,
                            error=(decided.get("receipt") or {}).get("error") or "submission rejected")
            else:
                self._reply(conn_id, request, "rejected", receipt=receipt,
                            error="the request was cancelled before the submission was validated")

    # --- watches --------------------------------------------------------------------------------

    def _watch(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._views is not None
        run_id = payload.get("run_id") or request.run_id
        try:
            watch = self._views.watches.add(conn_id, payload["subscription_id"], payload["topic"], run_id,
                                      payload.get("session_id"))
        except WatchRefused as refused:
            self._reply(conn_id, request, "rejected", error=str(refused))
            return
        assert self._reader is not None
        if watch.topic == "run" and queries.run_status(self._reader, run_id or "") is None:
            self._views.watches.remove(conn_id, watch.subscription_id)
            self._reply(conn_id, request, "notFound", error=f"run {run_id} not found")
            return
        self._reply(conn_id, request, "accepted", receipt={"subscription_id": watch.subscription_id,
                                                           "topic": watch.topic})
        self._views.refresh([watch], time.monotonic(), fresh=True)

    def _unwatch(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        assert self._views is not None
        if not self._views.watches.remove(conn_id, payload["subscription_id"]):
            self._reply(conn_id, request, "notFound", error=f"no subscription {payload['subscription_id']}")
            return
        self._reply(conn_id, request, "accepted", receipt={"subscription_id": payload["subscription_id"]})

    def _closed(self, message: ConnectionClosed) -> None:
        assert self._views is not None
        self._views.watches.drop_connection(message.conn_id)
        for token in [t for t, p in self._pending.items() if p.conn_id == message.conn_id]:
            # The write still happens; its answer has nowhere to go. A client that
            # reconnects and replays the idempotency key gets it as `adopted`.
            self._pending[token].conn_id = -1

    def _changed(self, notice: ChangeNotice) -> None:
        if self._verdicts and set(notice.tables) & {"interactive_submission", "interactive_request", "run"}:
            self._check_verdicts()
        assert self._views is not None
        now = time.monotonic()
        earliest = self._views.take_in(notice, now)
        if earliest is None or earliest > now or self._flush_scheduled:
            return
        if self.actor_inbox.empty():
            self._views.flush()  # nothing queued to coalesce with
        else:
            # Coalesce: the notices (and requests) already queued are handled before this flush.
            self._flush_scheduled = True
            self.actor_ref.tell(FlushWatches())

    def _flush_watches(self, _message: FlushWatches) -> None:
        self._flush_scheduled = False
        if self._views is not None:
            self._views.flush()

    def _node_output(self, message: NodeOutput) -> None:
        if self._views is not None:
            self._views.node_output(message.payload)
