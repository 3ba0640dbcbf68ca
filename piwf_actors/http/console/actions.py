"""The console's forms (POST): sign-in and sign-out, and each action as the API route it stands for.

An action's form becomes the body of its API route (`core.Console.act`), so the route's role, mapping
and operation are the API's own. After it the browser goes back to the page it came from with the
outcome in one line (`?note=…`). Handlers run on the door's event-loop thread.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import urllib.parse
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from piwf_actors.http.answers import error
from piwf_actors.http.auth import token_digest
from piwf_actors.http.console import shapes
from piwf_actors.http.console.core import HEADERS, PREFIX, Console, Me, _api, _back
from piwf_actors.http.console.session import SESSION_COOKIE, SIGNIN_COOKIE, new_session_id, same, session_digest
from piwf_actors.http.routes import VIEWER
from piwf_actors.protocol.doors import DoorPeer

#: How long the sign-in form's double-submit value lives.
SIGNIN_FORM_S = 600
RUN_ACTIONS = {name: _api("POST", f"/runs/{{run_id}}/{name}") for name in ("cancel", "pause", "resume", "restart")}
SCHEDULE_ACTIONS = {name: _api("POST", f"/schedules/{{name}}/{name}") for name in ("pause", "resume", "trigger")}
ANSWER, SUBMIT = _api("POST", "/interactions/{request_id}/answer"), _api("POST", "/interactions/{request_id}/submit")
RESOLVE = _api("POST", "/effects/{effect_id}/resolve")
RESOURCE_ACTIONS = {name: _api("POST", f"/resources/{{manager}}/{{key}}/{name}") for name in ("reconcile", "delete")}


def _next(given: str | None) -> str:
    return _back(given) if given else f"{PREFIX}/inbox"


def _cookie_args(request: Request) -> dict[str, Any]:
    return {"path": PREFIX, "httponly": True, "samesite": "strict", "secure": request.url.scheme == "https"}


async def signin_page(console: Console, request: Request, *, problem: str | None = None,
                      status: int = 200) -> Response:
    target = _next(request.query_params.get("next"))
    if problem is None and console.session(request.cookies.get(SESSION_COOKIE)) is not None:
        return RedirectResponse(target, 303)
    check = secrets.token_urlsafe(24)
    response = console.page(request, "signin.html", None, status, target=target, check=check, problem=problem)
    response.set_cookie(SIGNIN_COOKIE, check, max_age=SIGNIN_FORM_S, **_cookie_args(request))
    return response


async def signin(console: Console, request: Request) -> Response:
    """A token becomes a session (slowed per remote address on a wrong one, as the API's sign-ins are)."""
    fields = await console.fields(request)
    if isinstance(fields, Response):
        return fields
    if not same(request.cookies.get(SIGNIN_COOKIE), fields.get("check")):
        return error(403, "the sign-in form's check is missing or wrong: reload the sign-in page")
    token = fields.get("token", "").strip()
    found = console.door.port.token(token_digest(token)) if token and len(token) <= 512 else None
    address = request.client.host if request.client else "unknown"
    if found is None:
        delay = console.door.throttle.failed(address, time.monotonic())
        await asyncio.sleep(delay)  # the slowing of guesses, on this request only
        request.scope["query_string"] = urllib.parse.urlencode({"next": fields.get("next", "")}).encode()
        return await signin_page(console, request, problem="unknown or revoked token", status=401)
    console.door.throttle.succeeded(address)
    # The host's writer stores the session (hashed), so every host on the database knows it: a standby
    # answers `unavailable` (it writes nothing) and the person signs in on the active host instead.
    session_id = new_session_id()
    me = Me(found["name"], found["role"], DoorPeer("http", found["name"], address), None)
    opened = await console.call(me, "http_session.open", {"session_sha256": session_digest(session_id),
                                                          "token_sha256": token_digest(token)})
    if opened.get("outcome") != "accepted":
        request.scope["query_string"] = urllib.parse.urlencode({"next": fields.get("next", "")}).encode()
        status = 503 if opened.get("outcome") == "unavailable" else 401
        return await signin_page(console, request, status=status,
                                 problem=f"the host did not open a session: {opened.get('error') or opened.get('outcome')}")
    lifetime = max(0, int(opened["receipt"]["expires_at"] - time.time()))
    response = RedirectResponse(_next(fields.get("next")), 303, headers={"Cache-Control": "no-store"})
    response.set_cookie(SESSION_COOKIE, session_id, max_age=lifetime, **_cookie_args(request))
    response.delete_cookie(SIGNIN_COOKIE, path=PREFIX)
    return response


async def signout(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    fields = await console.form(request, me)
    if isinstance(fields, Response):
        return fields
    closed = await console.call(me, "http_session.close",
                                {"session_sha256": session_digest(request.cookies.get(SESSION_COOKIE) or "")})
    if closed.get("outcome") not in ("accepted", "adopted"):
        return error(503, f"the host did not end the session: {closed.get('error') or closed.get('outcome')}")
    response = RedirectResponse(f"{PREFIX}/signin", 303, headers=HEADERS)
    response.delete_cookie(SESSION_COOKIE, path=PREFIX)
    return response


def _revision(fields: dict[str, str]) -> dict[str, Any]:
    text = fields.get("expected_revision", "")
    return {"expected_revision": int(text)} if text.isdigit() and len(text) < 12 else {}


async def run(console: Console, request: Request) -> Response:
    route = RUN_ACTIONS.get(request.path_params["action"])
    if route is None:
        return error(404, f"no such run action (actions: {', '.join(RUN_ACTIONS)})")
    return await console.act(request, route, {"run_id": request.path_params["run_id"]},
                             lambda fields: _revision(fields) if route is RUN_ACTIONS["restart"] else {})


async def answer(console: Console, request: Request) -> Response:
    """A decision's choice, a checkpoint's answer or an agent step's value, by the form's `kind`."""
    kind = request.query_params.get("kind", "")
    if kind not in ("decision", "checkpoint", "agent"):
        return error(404, "an inbox form names its kind: decision, checkpoint or agent")
    return await console.act(request, SUBMIT if kind == "agent" else ANSWER,
                             {"request_id": request.path_params["request_id"]},
                             lambda fields: shapes.form_answer(kind, fields))


def _resolution(fields: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {"action": fields.get("action", "")}
    if fields.get("action") == "confirm" and fields.get("output", "").strip():
        body["output"] = shapes.form_json(fields["output"], "the output")
    return body


async def effect(console: Console, request: Request) -> Response:
    return await console.act(request, RESOLVE, {"effect_id": request.path_params["effect_id"]}, _resolution)


async def schedule(console: Console, request: Request) -> Response:
    route = SCHEDULE_ACTIONS.get(request.path_params["action"])
    if route is None:
        return error(404, f"no such schedule action (actions: {', '.join(SCHEDULE_ACTIONS)})")
    return await console.act(request, route, {"name": request.path_params["name"]}, lambda _fields: {})


async def resource(console: Console, request: Request) -> Response:
    """Reconcile a resource now, or delete it (its manager's finalize runs first), as the API's routes do."""
    route = RESOURCE_ACTIONS.get(request.path_params["action"])
    if route is None:
        return error(404, f"no such resource action (actions: {', '.join(RESOURCE_ACTIONS)})")
    return await console.act(request, route, {"manager": request.path_params["manager"],
                                              "key": request.path_params["key"]}, lambda _fields: {})
