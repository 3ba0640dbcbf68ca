"""The HTTP door's ASGI application (Starlette): authenticate, map the route, ask the gateway, answer.

Every handler runs on the door's event-loop thread (uvicorn's, owned by the
door actor): it decodes the request, checks the token and its role, turns
the route into a client request frame (`http/routes.py`) and hands it to
the gateway through the `DoorPort`; the gateway's answer comes back through
the door's `Exchange` and is answered with the status of its outcome and
the outcome itself as the body. No workflow code runs here: the gateway
runs it off its own thread, as for the socket. Every refusal of the door's
own is one JSON line `{"error": …}`: 400 (a body that is not a JSON object),
401 (no token, an unknown or revoked one: slowed per remote address),
403 (a viewer on an operator's route), 404/405, 413 (body), 431 (headers)
(`DoorGuard`, which also keeps a server-side refusal from becoming a traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from piwf_actors.http.answers import CHALLENGE, Answer, error
from piwf_actors.http.auth import SignInThrottle, bearer, may, token_digest
from piwf_actors.http.console.pages import console_routes
from piwf_actors.http.exchange import Exchange
from piwf_actors.http.hook_config import HOOK_PATH, Hook
from piwf_actors.http.hooks import BodyCutOff, BodyTooLarge, HookEndpoint, read_raw
from piwf_actors.http.openapi import openapi_document
from piwf_actors.http.routes import OPENAPI_PATH, ROUTES, VIEWER, Parts, Route, RouteError, status_for
from piwf_actors.http.streams import Heartbeat, event_stream
from piwf_actors.protocol.doors import DoorPeer
from piwf_actors.protocol.envelope import MAX_ID_LEN, SCHEMA, one_line

log = logging.getLogger("piwf_actors.actors.http_door")


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The door's bounds (docs/http.md, "Limits")."""

    max_body_bytes: int = 1024 * 1024
    max_header_bytes: int = 8 * 1024
    max_headers: int = 64
    #: The raw request line and headers, counted as they arrive (http/server_protocol.py): past it, 431 and closed.
    max_head_bytes: int = 16 * 1024
    answer_timeout_s: float = 60.0
    max_streams: int = 256
    stream_backlog: int = 256
    heartbeat_s: float = 15.0


class DoorPort(Protocol):
    """The door actor's side, as the app uses it (on the event-loop thread)."""

    exchange: Exchange

    def send(self, conn_id: int, frame: dict[str, Any], peer: DoorPeer) -> bool:
        """Hand the request frame to the gateway; False when the gateway is gone."""

    def drop(self, conn_id: int) -> None:
        """The gateway forgets the connection (its watches, a write's pending answer)."""

    def token(self, digest: str) -> dict[str, Any] | None:
        """{name, role} of the live token with this sha256, or None."""

    def session(self, digest: str) -> dict[str, Any] | None:
        """{name, role, token_sha256} of the unexpired console session with this sha256 whose token is
        live, or None (read from the state database: every host on it knows every session)."""


class _BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number this host stores")


async def read_object(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object ({} when empty); _BadBody(413) past `limit`, _BadBody(400) otherwise."""
    try:
        raw = await read_raw(request, limit)
    except BodyTooLarge as big:
        raise _BadBody(413, str(big)) from None
    except BodyCutOff as cut:
        raise _BadBody(400, str(cut)) from None
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise _BadBody(400, f"the body is not JSON: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(value, dict):
        raise _BadBody(400, "the body must be a JSON object")
    return value


class Door:
    """The handlers of one app: the port, the limits and the failed sign-ins (event-loop thread only)."""

    def __init__(self, port: DoorPort, limits: HttpLimits) -> None:
        self.port = port
        self.limits = limits
        self.throttle = SignInThrottle()
        self.streams = 0
        self.heartbeat = Heartbeat(limits.heartbeat_s)
        # A request without an Idempotency-Key gets one of its own: unique, as it stands for a new request.
        # A random prefix per door (96 bits: no other life of the door makes it again) and a counter, not
        # random bytes per request: os.urandom lets go of the GIL, and taking it back on a busy host costs
        # the event loop up to the switch interval (5 ms) per request.
        self._key_prefix = f"http-{secrets.token_hex(12)}-"
        self._key_numbers = itertools.count(1)

    async def authenticate(self, request: Request, needed: str) -> DoorPeer | Response:
        address = request.client.host if request.client else "unknown"
        token = bearer(request.headers.get("authorization"))
        found = self.port.token(token_digest(token)) if token is not None else None
        if found is None:
            if token is None:
                return error(401, "sign in: send Authorization: Bearer <token> (piwf http token add)",
                             headers=CHALLENGE)
            delay = self.throttle.failed(address, time.monotonic())
            await asyncio.sleep(delay)  # the slowing of guesses, on this request only
            return error(401, "unknown or revoked token", headers=CHALLENGE, delay_s=delay)
        self.throttle.succeeded(address)
        if not may(found["role"], needed):
            return error(403, f"token {found['name']} is a {found['role']}: this needs an operator")
        return DoorPeer("http", found["name"], address)

    async def ask(self, frame: dict[str, Any], peer: DoorPeer) -> dict[str, Any]:
        """Hand `frame` to the gateway and wait for its answer (an `unavailable` one if none comes in time)."""
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[dict[str, Any]] = loop.create_future()

        def on_answer(response: dict[str, Any]) -> None:  # on a gateway thread
            try:
                loop.call_soon_threadsafe(_settle, answered, response)
            except RuntimeError:
                pass  # the loop has closed: the door is stopping

        conn_id = self.port.exchange.open(on_answer)
        try:
            if not self.port.send(conn_id, frame, peer):
                return {"outcome": "unavailable", "error": "the host is stopping"}
            return await asyncio.wait_for(answered, self.limits.answer_timeout_s)
        except TimeoutError:
            return {"outcome": "unavailable", "error": f"no answer from the host within "
                                                       f"{self.limits.answer_timeout_s:g} s; retry with the same "
                                                       f"Idempotency-Key"}
        finally:
            self.port.exchange.close(conn_id)
            if not answered.done():
                self.port.drop(conn_id)

    def endpoint(self, route: Route) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            try:
                return await self._handle(route, request)
            except Exception:  # a door bug costs its one request, answered in one line; the log has it
                log.exception("%s %s failed on a host bug", route.method, route.path)
                return error(500, f"{route.method} {route.path} failed on a host bug (see the host's log)")

        return handle

    async def _handle(self, route: Route, request: Request) -> Response:
        peer = await self.authenticate(request, route.role)
        if isinstance(peer, Response):
            return peer
        try:
            body = await read_object(request, self.limits.max_body_bytes) if route.body else {}
        except _BadBody as bad:
            return error(bad.status, str(bad))
        unknown = sorted(set(request.query_params) - set(route.query))
        try:
            if unknown:
                raise RouteError(f"unknown query parameter(s): {', '.join(unknown)}")
            call = route.call(Parts(request.path_params, dict(request.query_params), body))
        except RouteError as bad:
            return Answer({"outcome": "rejected", "error": one_line(str(bad))}, 422)
        frame = self._frame(request, peer, call.operation, call.payload, call.run_id, call.expected_revision)
        if isinstance(frame, Response):
            return frame
        if route.stream is not None:
            return await event_stream(self, frame, peer)
        answer = await self.ask(frame, peer)
        content = {key: answer[key] for key in ("outcome", "receipt", "revision", "error") if key in answer}
        return Answer(content, status_for(route, answer["outcome"]))

    def _frame(self, request: Request, peer: DoorPeer, operation: str, payload: dict[str, Any],
               run_id: str | None, expected_revision: int | None) -> dict[str, Any] | Response:
        key = request.headers.get("idempotency-key") or f"{self._key_prefix}{next(self._key_numbers)}"
        client_id = request.headers.get("piwf-client-id") or f"http-{peer.token}"
        for name, value in (("Idempotency-Key", key), ("Piwf-Client-Id", client_id)):
            if len(value) > MAX_ID_LEN:
                return Answer({"outcome": "rejected", "error": f"{name} is over {MAX_ID_LEN} characters"}, 422)
        # The key is also the request id: a retry is the same request to the host (as the embedding's are).
        frame: dict[str, Any] = {"schema": SCHEMA, "type": "request", "request_id": key, "client_id": client_id,
                                 "idempotency_key": key, "operation": operation, "payload": payload}
        if run_id is not None:
            frame["run_id"] = run_id
        if expected_revision is not None:
            frame["expected_revision"] = expected_revision
        return frame

    async def openapi(self, request: Request) -> Response:
        peer = await self.authenticate(request, VIEWER)
        return peer if isinstance(peer, Response) else Answer(openapi_document())


def _settle(future: asyncio.Future[dict[str, Any]], response: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(response)


async def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, exc.detail if exc.status_code != 404 else "no such path (see /api/v1/openapi.json)")


class DoorGuard:
    """The outermost layer: refuse a request whose headers are over the door's bounds (431) before anything
    reads them, and keep a response the server can no longer send from becoming a traceback.

    uvicorn answers a request it cannot parse (a broken chunked body, say) with its own 400 and closes the
    connection while the app may still be answering the same request; sending that answer then raises
    from the server's side. The guard drops it (one log line) and waits for the server to see the
    connection closed, so that the server does not answer a second time either."""

    def __init__(self, app: ASGIApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        size = sum(len(name) + len(value) for name, value in headers)
        if len(headers) > self.limits.max_headers or size > self.limits.max_header_bytes:
            response = error(431, f"headers over the limit ({self.limits.max_headers} headers, "
                                  f"{self.limits.max_header_bytes} bytes)")
            await response(scope, receive, send)
            return
        unsent: list[str] = []

        async def guarded(message: Message) -> None:
            if unsent:
                return
            try:
                await send(message)
            except Exception as exc:  # noqa: BLE001 - the server's side refused: see the class docstring
                unsent.append(f"{type(exc).__name__}: {exc}")

        await self.app(scope, receive, guarded)
        if unsent:
            log.info("%s %s: the answer was not sent (%s); the server had closed the connection",
                     scope.get("method"), scope.get("path"), one_line(unsent[0])[:200])
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_closed(receive), 5.0)


async def _closed(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def build_app(port: DoorPort, limits: HttpLimits = HttpLimits(), hooks: Mapping[str, Hook] | None = None) -> ASGIApp:
    """The door's ASGI app: the routes of `ROUTES`, the OpenAPI description, the signed webhooks
    (`http/hooks.py`), the console's pages, the header bound around them."""
    door = Door(port, limits)
    routes = [StarletteRoute(route.path, door.endpoint(route), methods=[route.method]) for route in ROUTES]
    routes.append(StarletteRoute(OPENAPI_PATH, door.openapi, methods=["GET"]))
    routes.append(StarletteRoute(HOOK_PATH, HookEndpoint(hooks or {}, door.ask, limits.max_body_bytes).handle,
                                 methods=["POST"]))
    routes += console_routes(door)  # the web console, on the same door (docs/http.md, "Console")
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    return DoorGuard(app, limits)
