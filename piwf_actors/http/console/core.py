"""The console's core: who asks (`Console.me`), asking the host (`Console.call`), reading a form and
acting through an API route (`Console.act`), rendering a page (`Console.page`).

Every handler runs on the door's event-loop thread. A page is read with the
same client operations the API's GET routes make (`Door.ask`, through the
gateway); a form is turned into the body of the API route it stands for and
mapped by that route of `http/routes.py` (`Route.call`), so a console answer
is the same request as an API answer: the same payload check, idempotency
(each rendered form carries its own key: a second click is `adopted`) and
provenance (`via: http`, the token's name). Only the operations of the
routes table are reachable, and each with its route's role.

Who: a session cookie (signed in with a token, `session.py`) or an
`Authorization: Bearer` header. A page without either redirects to the
sign-in (303); a POST without either is refused 401; a POST with the cookie
must carry the session's CSRF token (403 otherwise); a viewer's POST is 403.
Pages send a Content-Security-Policy that allows only the console's own
script and style, so no inline script runs.
"""

from __future__ import annotations

import itertools
import secrets
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jinja2
import markupsafe
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from piwf_actors.http.answers import error
from piwf_actors.http.auth import bearer, may, token_digest
from piwf_actors.http.console import shapes
from piwf_actors.http.console.session import SESSION_COOKIE, csrf_of, same, session_digest, usable
from piwf_actors.http.hooks import BodyCutOff, BodyTooLarge, read_raw
from piwf_actors.http.routes import OPERATOR, ROUTES, VIEWER, Parts, Route, RouteError
from piwf_actors.protocol.doors import DoorPeer
from piwf_actors.protocol.envelope import MAX_ID_LEN, SCHEMA, one_line

HERE = Path(__file__).parent
PREFIX = "/console"
#: Runs per page of the runs list, and children listed on a run's page.
PAGE_RUNS = 50
#: The most runs one page shows (`?limit=`).
MAX_PAGE_RUNS = 200
#: Events shown on a run's page at once (a link pages on).
PAGE_EVENTS = 200
#: Ambiguous effects per page of the effects page.
PAGE_EFFECTS = 50
STATIC = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}
HEADERS = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
           "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' "
                                      "data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"}


class ConsoleDoor(Protocol):
    """What the console uses of the app's `Door` (http/app.py)."""

    port: Any
    limits: Any
    streams: int
    heartbeat: Any  # the streams' one keep-alive timer (http/streams.py)
    throttle: Any

    async def authenticate(self, request: Request, needed: str) -> DoorPeer | Response: ...

    async def ask(self, frame: dict[str, Any], peer: DoorPeer) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Me:
    """Who asks: the token's name and role, the peer recorded with what it does, and the session's CSRF
    token (None for a Bearer request, which a browser never sends by itself)."""

    name: str
    role: str
    peer: DoorPeer
    csrf: str | None

    @property
    def acts(self) -> bool:
        return self.role == OPERATOR


def _api(method: str, path: str) -> Route:
    return next(route for route in ROUTES if route.method == method and route.path == "/api/v1" + path)


class Console:
    def __init__(self, door: ConsoleDoor) -> None:
        self.door = door
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
        # Each rendered form gets its own idempotency key: submitting it twice is one request (`adopted`).
        # A random prefix per door and a counter, not os.urandom per form: an inbox of hundreds of
        # forms spent a sixth of its rendering there (bench/console_pages.py --profile).
        keys, key_prefix = itertools.count(), secrets.token_hex(12)
        self.templates.globals["form_key"] = lambda: f"console-{key_prefix}-{next(keys)}"
        self.templates.globals["shapes"] = shapes  # imported macros see globals, not the render context
        self.static = {name: (HERE / "static" / name).read_bytes() for name in STATIC}

    # --- who ---------------------------------------------------------------------------------------------

    async def me(self, request: Request, needed: str) -> Me | Response:
        if request.headers.get("authorization") is not None:
            peer = await self.door.authenticate(request, needed)
            if isinstance(peer, Response):
                return peer
            found = self.door.port.token(token_digest(bearer(request.headers["authorization"]) or ""))
            return Me(peer.token, found["role"] if found else VIEWER, peer, None)
        session_id = request.cookies.get(SESSION_COOKIE)
        found = self.session(session_id)
        if session_id is None or found is None:
            if request.method == "GET":
                target = urllib.parse.quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
                return RedirectResponse(f"{PREFIX}/signin?next={target}", 303)
            return error(401, "sign in first (the session has ended or the token was revoked)")
        if not may(found["role"], needed):
            return error(403, f"token {found['name']} is a {found['role']}: this needs an operator")
        address = request.client.host if request.client else "unknown"
        return Me(found["name"], found["role"], DoorPeer("http", found["name"], address), csrf_of(session_id))

    def session(self, session_id: str | None) -> dict[str, Any] | None:
        """{name, role, token_sha256} of the live session with this cookie (`session.py`), or None."""
        return self.door.port.session(session_digest(session_id)) if session_id and usable(session_id) else None

    def page(self, request: Request, template: str, me: Me | None, status: int = 200, **values: Any) -> HTMLResponse:
        """`template` rendered for `me`; `here` (the page without its note) is where its forms come back to."""
        query = [(k, v) for k, v in request.query_params.multi_items() if k != "note"]
        here = request.url.path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        # The hidden fields every form of this page shares, made once: a page of hundreds of forms (the
        # inbox) spent a third of its rendering calling a macro for them (bench/console_pages.py --profile).
        shared = markupsafe.Markup('<input type="hidden" name="csrf" value="{}">\n'
                                   '<input type="hidden" name="back" value="{}">').format(
            me.csrf or "" if me is not None else "", here)
        html = self.templates.get_template(template).render(me=me, prefix=PREFIX, now=time.time(),
                                                           here=here, shared_fields=shared, **values)
        return HTMLResponse(html, status, headers=HEADERS)

    # --- asking the host ---------------------------------------------------------------------------------

    async def call(self, me: Me, operation: str, payload: dict[str, Any], run_id: str | None = None,
                   expected_revision: int | None = None, key: str | None = None) -> dict[str, Any]:
        key = key or f"http-{secrets.token_hex(12)}"
        frame: dict[str, Any] = {"schema": SCHEMA, "type": "request", "request_id": key,
                                 "client_id": f"http-{me.name}", "idempotency_key": key, "operation": operation,
                                 "payload": payload}
        if run_id is not None:
            frame["run_id"] = run_id
        if expected_revision is not None:
            frame["expected_revision"] = expected_revision
        return await self.door.ask(frame, me.peer)

    async def read(self, me: Me, operation: str, payload: dict[str, Any] | None = None,
                   run_id: str | None = None) -> tuple[Any, str | None]:
        """(receipt, None) or (None, the one-line reason it could not be read)."""
        answer = await self.call(me, operation, payload or {}, run_id)
        if answer.get("outcome") == "accepted":
            return answer.get("receipt"), None
        return None, f"{operation}: {answer.get('outcome')}: {answer.get('error') or ''}".strip(": ")

    # --- forms ---------------------------------------------------------------------------------------------

    async def form(self, request: Request, me: Me) -> dict[str, str] | Response:
        """The submitted form's fields; the CSRF token checked when the request came with the cookie."""
        fields = await self.fields(request)
        if isinstance(fields, dict) and me.csrf is not None and not same(me.csrf, fields.get("csrf")):
            return error(403, "the form's CSRF token is missing or wrong: reload the page and try again")
        return fields

    async def fields(self, request: Request) -> dict[str, str] | Response:
        """A urlencoded form's fields (bounded by the door's body limit), unchecked."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return error(415, "a console form is sent as application/x-www-form-urlencoded")
        try:
            body = await read_raw(request, self.door.limits.max_body_bytes)
        except BodyTooLarge:
            return error(413, f"the form is over {self.door.limits.max_body_bytes} bytes")
        except BodyCutOff as cut:
            return error(400, str(cut))
        try:
            fields = dict(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200))
        except (UnicodeDecodeError, ValueError) as exc:
            return error(400, f"the form cannot be read: {exc}")
        return fields

    async def act(self, request: Request, route: Route, path: dict[str, str],
                  body: Callable[[dict[str, str]], dict[str, Any]]) -> Response:
        """A form that stands for the API route `route`: check, map through the route, ask, go back."""
        me = await self.me(request, route.role)
        if isinstance(me, Response):
            return me
        fields = await self.form(request, me)
        if isinstance(fields, Response):
            return fields
        back = _back(fields.get("back"))
        try:
            call = route.call(Parts(path, {}, body(fields)))
        except (RouteError, shapes.FormError) as bad:
            return _back_with(back, f"refused: {one_line(str(bad))}")
        key = fields.get("key") or None
        if key is not None and len(key) > MAX_ID_LEN:
            key = None
        answer = await self.call(me, call.operation, call.payload, call.run_id, call.expected_revision, key)
        said = answer.get("outcome", "unavailable")
        note = f"{call.operation}: {said}" + (f": {answer['error']}" if answer.get("error") else "")
        return _back_with(back, note)


def _back(given: str | None) -> str:
    """Where a form goes back to: a console path only (never another site)."""
    if given and given.startswith(PREFIX + "/") and not given.startswith("//") and "\\" not in given:
        return given
    return PREFIX + "/runs"


def _back_with(back: str, note: str) -> Response:
    path, _, query = back.partition("?")
    params = [(k, v) for k, v in urllib.parse.parse_qsl(query) if k != "note"] + [("note", one_line(note)[:300])]
    return RedirectResponse(f"{path}?{urllib.parse.urlencode(params)}", 303, headers={"Cache-Control": "no-store"})
