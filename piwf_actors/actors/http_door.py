"""`HttpDoor`: the host's HTTP door (docs/http.md), one more door beside the Unix socket.

It owns the HTTP server — uvicorn serving the Starlette app of
`piwf_actors.http.app` on one thread of its own, listening on a socket bound
here in `on_start` (so a bad or busy address fails the host's start in one
line) — and hands every request to the `ClientGateway` as the socket does:
a `ClientRequest` frame of the client protocol under a connection id of its
own (from `protocol.doors.HTTP_FIRST_ID` up), authenticated by bearer token
(`DoorPeer`: via http, the token's name). The gateway dispatches it through
the one table of operations, with the same payload checks, idempotency and
outcomes as the socket's, and posts the answer to the door's `Exchange`,
which wakes the handler waiting on uvicorn's event loop. So the socket, the
embedding handle and HTTP cannot drift, and no workflow code runs on the
door's thread: the gateway runs it on its user-code threads.

The host owns the signals: uvicorn installs handlers only on the main
thread, and its server here runs on the door's thread. Stopping sets the
server's exit flags and joins the thread (open event streams are cut).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.gateway import AttachDoor, ClientRequest, ConnectionClosed
from piwf_actors.errors import HostError
from piwf_actors.http.address import HttpAddress
from piwf_actors.http.exchange import Exchange
from piwf_actors.http.hook_config import Hook
from piwf_actors.paths import DatabaseLocation
from piwf_actors.protocol.doors import HTTP_FIRST_ID, DoorPeer
from piwf_actors.store import http_queries
from piwf_actors.store.reader import StoreReader

log = logging.getLogger(__name__)

#: How long a stop waits for the server's thread.
STOP_TIMEOUT_S = 5.0


#: How long the door trusts a live token it looked up without reading it again, when this host's gateway
#: did not see a token change meanwhile: the bound for a revocation made through another host (a standby's
#: door, a runner host's) to reach this door. Through this host it counts from the next request on.
TOKEN_RECHECK_S = 2.0


class _Port:
    """The door's side as the app uses it (`http.app.DoorPort`); called on the event-loop thread.

    Live tokens are cached (digest → {name, role}): a lookup is a read of the state database on the event
    loop (a round trip on PostgreSQL; on SQLite, under load, ~25 µs of CPU and ~0.1 ms of the loop, the GIL
    taken back after the query), once per request. An entry holds while the `Exchange`'s token generation
    is the one it was read under (this host's gateway bumps it when an addition or revocation commits,
    before it answers) and for at most TOKEN_RECHECK_S. Unknown and revoked tokens are never cached."""

    def __init__(self, exchange: Exchange, gateway: pykka.ActorRef[Any], database: DatabaseLocation,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.exchange = exchange
        self._gateway = gateway
        self._database = database
        self._clock = clock
        self._reader: StoreReader | None = None  # opened on the event-loop thread, which alone reads tokens and sessions
        #: digest → ({name, role}, the token generation it was read under, when).
        self._tokens: dict[str, tuple[dict[str, Any], int, float]] = {}

    def send(self, conn_id: int, frame: dict[str, Any], peer: DoorPeer) -> bool:
        return safe_tell(self._gateway, ClientRequest(conn_id, frame, peer))

    def drop(self, conn_id: int) -> None:
        safe_tell(self._gateway, ConnectionClosed(conn_id))

    def token(self, digest: str) -> dict[str, Any] | None:
        # The generation is taken before the read: a change that commits after the read leaves the entry
        # under the old generation, dropped at the next lookup.
        now, generation = self._clock(), self.exchange.token_generation
        cached = self._tokens.get(digest)
        if cached is not None and cached[1] == generation and now - cached[2] < TOKEN_RECHECK_S:
            return cached[0]
        found = http_queries.live_token(self._read(), digest)
        if found is None:
            self._tokens.pop(digest, None)
        else:
            self._tokens[digest] = (found, generation, now)
        return found

    def session(self, digest: str) -> dict[str, Any] | None:
        return http_queries.live_session(self._read(), digest, time.time())

    def _read(self) -> StoreReader:
        if self._reader is None:
            self._reader = StoreReader(self._database)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class HttpDoor(CoreActor):
    actor_name = "http"

    def __init__(self, gateway: pykka.ActorRef[Any], database: DatabaseLocation, address: HttpAddress, *,
                 supervisor: pykka.ActorRef[Any] | None, hooks: Mapping[str, Hook] | None = None) -> None:
        """Runs in the caller's thread: stores arguments only. `hooks`: the signed webhooks it serves
        (`http.hook_config.load_hooks`, read by the host's start so a bad file is one line there)."""
        super().__init__(supervisor)
        self._hooks = dict(hooks or {})
        self._gateway = gateway
        self._database = database
        self._address = address
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._port: _Port | None = None
        self.bound: tuple[str, int] | None = None

    def on_start(self) -> None:
        """Runs in the door's actor thread: bind, attach to the gateway, start the server's thread."""
        import uvicorn

        from piwf_actors.http.app import HttpLimits, build_app
        from piwf_actors.http.server_protocol import bounded_httptools

        try:
            self._sock = _listen(self._address)
        except (OSError, UnicodeError) as exc:
            raise HostError(f"--http {self._address}: cannot listen: {exc}") from None
        self.bound = self._sock.getsockname()[:2]
        exchange = Exchange()
        # Told before any request of this door: the gateway attaches the sink before it sees one.
        self._gateway.tell(AttachDoor(HTTP_FIRST_ID, exchange))
        self._port = _Port(exchange, self._gateway, self._database)
        limits = HttpLimits()
        # httptools (C) rather than h11 (pure Python): a third less of this thread's CPU per request; the
        # subclass bounds a request's head, which httptools alone does not (http/server_protocol.py). The
        # loop is named: uvicorn's "auto" takes uvloop whenever it happens to be installed, and uvloop
        # made no difference to the door's CPU per request (bench/http_api.py, paired runs).
        config = uvicorn.Config(build_app(self._port, limits, hooks=self._hooks), log_config=None, access_log=False,
                                http=bounded_httptools(limits.max_head_bytes), loop="asyncio", ws="none",
                                lifespan="off", proxy_headers=False, server_header=False, date_header=True,
                                timeout_keep_alive=5, timeout_graceful_shutdown=1)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="piwf-http", daemon=True)
        self._thread.start()
        host, port = self.bound
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self._address.loopback:
            log.info("HTTP door listening on http://%s (loopback only)", shown)
        else:
            log.warning("HTTP door listening on http://%s: NOT loopback, reachable from other machines; put a "
                        "TLS reverse proxy in front (docs/security.md)", shown)
        if self._hooks:
            log.info("HTTP door: webhooks %s at /hooks/NAME", ", ".join(sorted(self._hooks)))

    def _serve(self) -> None:
        """The server's thread: uvicorn's event loop until the stop."""
        assert self._server is not None and self._sock is not None and self._port is not None
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # noqa: BLE001 - uvicorn exits with SystemExit on a failed start
            log.error("HTTP door stopped: %s: %s", type(exc).__name__, exc)
            safe_tell(self.actor_ref, _ServerEnded(f"{type(exc).__name__}: {exc}"))
        finally:
            self._port.close()

    def handlers(self) -> dict[type, Any]:
        return {_ServerEnded: self._ended, AddressQuery: lambda _m: self.bound}

    def _ended(self, message: _ServerEnded) -> None:
        raise HostError(f"the HTTP server stopped: {message.reason}")

    def release_resources(self) -> None:
        server, thread = self._server, self._thread
        if server is not None:
            server.should_exit = True
            server.force_exit = True  # event streams never end by themselves
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_TIMEOUT_S)
            if thread.is_alive():
                log.warning("the HTTP server's thread did not stop within %.0f s", STOP_TIMEOUT_S)
        self._server = self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _listen(address: HttpAddress) -> socket.socket:
    """The door's listening socket. Made with proto IPPROTO_TCP, and TCP_NODELAY set (accepted sockets
    inherit it): asyncio turns Nagle's algorithm off only for sockets whose proto says TCP, and with it on,
    a response's body waits for the ACK of its headers (40 ms of delayed ACK per small answer)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((address.host, address.port))
        sock.listen(512)
    except BaseException:
        sock.close()
        raise
    return sock


class _ServerEnded:
    """From the server's thread: it ended without being stopped."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class AddressQuery:
    """Asked (`ask`) by tests and embedding applications: the (host, port) the door listens on (with port
    0 asked, the one the kernel chose)."""
