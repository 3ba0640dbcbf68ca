"""`ClientGateway`: the Unix socket where people and programs talk to the host.

The socket I/O runs on a selector thread owned by this actor
(`protocol.socket_loop`); every decoded frame comes here as a
`ClientRequest` and is dispatched through the one table of operations
(`protocol.catalog.OPERATIONS`): the payload is checked against the
operation's entry, a mutation on a standby is refused, and the operation's
function answers (the functions live in the catalog's topic modules; this
actor keeps the socket and the dispatch, and its `PendingRequests`
(actors/pending_requests.py) the correlation of writes with their
requests). Reads are answered from the gateway's own read-only
connection; writes go to the writer as commands and are answered when the
writer's result comes back (never blocking this actor). No workflow code
runs on this actor's thread: loading a workflow file and calling a
concurrency key function run on the resolver's user-code threads
(workflows/user_code.py), bounded in time; the host's own slow work
(state.backup, state.verify, state.status) runs on a small maintenance
executor owned by the actor, which never runs workflow code.

The HTTP door (actors/http_door.py) is another way in: it tells this actor
the same `ClientRequest`s under connection ids of its own and attaches a sink
(`AttachDoor`) where `DoorPosts` (protocol/doors.py) sends what answers them.

A write's path to the writer, in thread hand-offs: the socket thread decodes
the frame and tells this actor (1); this actor builds the command and puts it
on the writer's queue (2). `run.start` keeps to those two whenever the
workflow's resolution is cached, its file unchanged and it has no key
function (the usual case: the same workflow started again); otherwise it goes
socket thread → gateway → user-code thread (which loads it, calls its key) →
writer, three. The writer's answer comes back to this actor, which posts the
response to the socket thread.

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
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.pending_requests import PendingRequests
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import Subscribe, Subscribed, Unsubscribe, WriterHandle
from piwf_actors.board import HostBoard, Section, Stream
from piwf_actors.clock import TimerClock
from piwf_actors.errors import PiwfError, RunnerHostRefusal, StandbyHost, outcome_for
from piwf_actors.paths import DatabaseLocation
from piwf_actors.protocol.catalog import OPERATIONS, channels, interactions, runs
from piwf_actors.protocol.catalog.registry import BuildEnv, GatewayServices, OperationContext
from piwf_actors.protocol.doors import DoorPeer, DoorPosts, DoorSink
from piwf_actors.protocol.envelope import BadRequest, Request, hello, parse_request, response
from piwf_actors.protocol.gateway_messages import ChannelsReloaded
from piwf_actors.protocol.live_views import LiveViews
from piwf_actors.protocol.payloads import check_payload
from piwf_actors.protocol.socket_loop import Peer, SocketLoop
from piwf_actors.protocol.uploads import ClientUploads
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteResult
from piwf_actors.wire.limits import Limits
from piwf_actors.workflows.resolver import WorkflowResolver

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClientRequest:
    """A request frame from a door: the socket (`peer` by the kernel's word) or another door, which
    numbers its requests from its own base (`protocol.doors`) and names who sent it (`DoorPeer`)."""

    conn_id: int
    frame: dict[str, Any]
    peer: Peer | DoorPeer | None = None


@dataclass(frozen=True, slots=True)
class AttachDoor:
    """From another door (the HTTP door): post what answers its connection ids from `first_id` up to `sink`."""

    first_id: int
    sink: DoorSink


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


class ClientGateway(CoreActor):
    actor_name = "gateway"

    def __init__(self, writer: WriterHandle, db_path: DatabaseLocation, socket_path: Path, *, host_epoch: int,
                 supervisor: pykka.ActorRef[Any] | None, board: HostBoard, limits: Limits = Limits(),
                 resolver: WorkflowResolver | None = None, shutdown: Callable[[str], None] | None = None,
                 channels: pykka.ActorRef[Any] | None = None, schedules: pykka.ActorRef[Any] | None = None,
                 standby: bool = False, standby_poll_s: float = STANDBY_POLL_S, runner: bool = False,
                 timer_clock: TimerClock | None = None) -> None:
        """Runs in the caller's thread: stores arguments only. `standby`: this host does not hold the
        lease (yet); `runner`: a runner host's gateway (with `standby`: it never holds it); see the
        module docstring. `timer_clock`: what the views' `remaining_s` count to (None: host time)."""
        super().__init__(supervisor)
        self._standby = standby
        self._runner = runner
        self._standby_poll_s = standby_poll_s
        self._timer_now = time.time if timer_clock is None else timer_clock.now
        self._standby_ticker: Ticker | None = None
        self._writer = writer
        self._db_path = db_path
        self._socket_path = socket_path
        self._epoch = host_epoch
        self._board = board
        self._limits = limits
        self._resolver = resolver if resolver is not None else WorkflowResolver()  # (an empty one is falsy)
        self._shutdown = shutdown
        self._channels = channels
        self._schedules = schedules  # the schedule keeper (schedule.trigger), None when the host runs none
        self._loop: SocketLoop | None = None
        self._posts: DoorPosts | None = None  # the socket loop, and the sinks of the other doors
        self._reader: StoreReader | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._requests: PendingRequests | None = None
        self._views: LiveViews | None = None
        self._services: GatewayServices | None = None
        self._flush_scheduled = False

    # --- lifecycle ---------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the gateway's thread: reader, executor, change notices, the services the operations
        use, then the socket."""
        self._reader = StoreReader(self._db_path)
        # The host's own slow work only (state.*, file hashes): workflow code runs on the resolver's user code.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="piwf-maintenance")
        # Acknowledged: the views trust the notices only from the writer's `Subscribed` (_subscribed).
        self._writer.ref.tell(Subscribe(self.actor_ref, ack=True))
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
        self._posts = DoorPosts(self._loop)
        self._views = LiveViews(self._reader, self._board, self._posts, timer_now=self._timer_now)
        self._views.external_writes = self._standby
        self._requests = PendingRequests(self._writer, ref, self.reply, self._executor, self._resolver.user_code,
                                         self._views.answered)
        env = BuildEnv(self._resolver, self._db_path)
        self._services = GatewayServices(
            port=self._requests, gateway=ref, reader=self._reader, board=self._board, views=self._views, env=env,
            cached_env=runs.cached_env(env), connections=self._loop.connection_count, shutdown=self._shutdown,
            channels=self._channels, schedules=self._schedules, timer_now=self._timer_now,
            uploads=ClientUploads(self._limits.max_upload_bytes), tokens_changed=self._posts.tokens_changed)
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
                StandbyPoll: self._standby_poll, BecomeActive: self._become_active, Subscribed: self._subscribed,
                AttachDoor: self._attach_door}

    # --- dispatch ----------------------------------------------------------------------------

    def _request(self, message: ClientRequest) -> None:
        """Parse, look up, check the payload, refuse a mutation on a standby, call the operation."""
        conn_id, services = message.conn_id, self._services
        assert services is not None
        try:
            request = parse_request(services.uploads.resolve(conn_id, message.frame))  # refs: values sent ahead
        except BadRequest as bad:
            self._post(conn_id, response(bad.request_id, "rejected", error=str(bad)))
            return
        if message.peer is not None:
            request = dataclasses.replace(request, peer=message.peer.to_wire())
        stats = services.stats
        stats.requests += 1
        stats.by_operation[request.operation] = stats.by_operation.get(request.operation, 0) + 1
        operation = OPERATIONS.get(request.operation)
        if operation is None:
            self.reply(conn_id, request, "rejected", error=f"operation {request.operation!r} is not available")
            return
        try:
            payload = check_payload(request, operation)
            if self._standby and not operation.served_by_standby:
                raise self._standby_refusal()
            operation.fn(OperationContext(services, operation, conn_id, request), payload)
        except BadRequest as bad:
            self.reply(conn_id, request, "rejected", error=str(bad))
        except PiwfError as err:
            self.reply(conn_id, request, outcome_for(err.code), error=err.one_line())
        except Exception as exc:  # noqa: BLE001 - a host bug costs its one request, never the door
            # Like a write command that raised (CommandFailed): `rejected`, since the same request would
            # fail the same way; the traceback goes to the log, as a bug's should.
            log.exception("%s failed on a host bug", request.operation)
            self.reply(conn_id, request, "rejected", error=f"{request.operation} failed on a host bug: "
                                                           f"{type(exc).__name__}: {' '.join(str(exc).split())}")

    def _standby_refusal(self) -> StandbyHost | RunnerHostRefusal:
        """The one-line answer to a mutation on a standby or a runner host: who is active, and when to retry."""
        assert self._reader is not None
        lease = queries.lease_row(self._reader, time.time())
        if self._runner:
            return RunnerHostRefusal(lease["host_id"], lease["epoch"], lease["live"])
        return StandbyHost(lease["host_id"], lease["epoch"], lease["live"])

    # --- answering (the operations answer through PendingRequests, which posts through `reply`) -----

    def _post(self, conn_id: int, frame: dict[str, Any], *, is_response: bool = True) -> None:
        if self._posts is not None:
            self._posts.post(conn_id, frame, is_response=is_response)

    def _attach_door(self, message: AttachDoor) -> None:
        if self._posts is not None:
            self._posts.attach(message.first_id, message.sink)

    def reply(self, conn_id: int, request: Request | None, outcome: str, *, receipt: Any = None,
              revision: int | None = None, error: str | None = None) -> None:
        """Post the response to `request` (safe from any thread: posting is)."""
        self._post(conn_id, response(request.request_id if request else None, outcome, receipt=receipt,
                                     revision=revision, error=error))

    # --- answers -------------------------------------------------------------------------------

    def _written(self, result: WriteResult) -> None:
        """A write's result: the answer of the request waiting for it (`PendingRequests.answer`)."""
        if self._requests is not None:
            self._requests.answer(result)

    def _channels_reloaded(self, message: ChannelsReloaded) -> None:
        if self._services is not None:
            channels.channels_reloaded(self._services, message)

    # --- standby -------------------------------------------------------------------------------

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
        if self._views is not None:
            self._flush_soon(self._views.poll_database())

    def _flush_soon(self, earliest: float | None) -> None:
        """Flush once the messages queued now are handled, if a watch was marked (`earliest` not None)."""
        if earliest is not None and not self._flush_scheduled:
            self._flush_scheduled = True
            self.actor_ref.tell(FlushWatches())

    def _become_active(self, message: BecomeActive) -> None:
        """This host holds the lease now: mutations go to the writer, watches follow its change notices
        (and the database while runner hosts are live)."""
        self._standby = False
        self._epoch = message.epoch
        if self._services is not None:
            self._services.channels = message.channels
            self._services.schedules = message.schedules
        if self._views is not None:
            self._views.external_writes = False
            self._read_views_again()  # once more: what the last host changed before this one's first notice
        log.info("gateway active at epoch %d", message.epoch)

    # --- connections and change notices ----------------------------------------------------------

    def _closed(self, message: ConnectionClosed) -> None:
        assert self._views is not None and self._services is not None
        self._views.watches.drop_connection(message.conn_id)
        self._services.uploads.drop(message.conn_id)
        if self._requests is not None:
            self._requests.connection_closed(message.conn_id)

    def _subscribed(self, _message: Subscribed) -> None:
        """The writer registered this gateway: every view is read again, and trusts the notices from now on
        (a commit before may have sent none here: see LiveViews)."""
        if self._views is not None:
            self._flush_soon(self._views.registered())

    def _changed(self, notice: ChangeNotice) -> None:
        services = self._services
        assert services is not None and self._views is not None
        if services.verdicts and not interactions.VERDICT_TABLES.isdisjoint(notice.tables):
            interactions.check_verdicts(services)
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
