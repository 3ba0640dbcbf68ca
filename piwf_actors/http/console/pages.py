"""The console's routes (docs/http.md, "Console"): the pages (`views.py`), their forms and the sign-in
(`actions.py`), all bound to one `Console` (`core.py`) per app. `http/app.py` adds them to the door's
routes, beside the API's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute

from piwf_actors.http.answers import error
from piwf_actors.http.console import actions, views
from piwf_actors.http.console.core import PREFIX, Console, ConsoleDoor

log = logging.getLogger("piwf_actors.actors.http_door")

Handler = Callable[[Request], Awaitable[Response]]

GET: tuple[tuple[str, Callable[[Console, Request], Awaitable[Response]]], ...] = (
    ("", views.home), ("/signin", actions.signin_page), ("/runs", views.runs), ("/runs/{run_id}", views.run),
    ("/inbox", views.inbox), ("/effects", views.effects), ("/schedules", views.schedules),
    ("/resources", views.resources), ("/host", views.host), ("/streams/{topic}", views.stream),
    ("/streams/runs/{run_id}", views.run_stream), ("/static/{name}", views.static))
POST: tuple[tuple[str, Callable[[Console, Request], Awaitable[Response]]], ...] = (
    ("/signin", actions.signin), ("/signout", actions.signout), ("/runs/{run_id}/{action}", actions.run),
    ("/inbox/{request_id}", actions.answer), ("/effects/{effect_id}", actions.effect),
    ("/schedules/{name}/{action}", actions.schedule), ("/resources/{manager}/{key}/{action}", actions.resource))


def console_routes(door: ConsoleDoor) -> list[StarletteRoute]:
    """The console's routes for the app of `door` (one `Console`; its sessions live in the state database)."""
    console = Console(door)

    def bind(handler: Callable[[Console, Request], Awaitable[Response]]) -> Handler:
        async def handle(request: Request) -> Response:
            try:
                return await handler(console, request)
            except Exception:  # a console bug costs its one request, answered in one line; the log has it
                log.exception("%s %s failed on a host bug", request.method, request.url.path)
                return error(500, f"{request.method} {request.url.path} failed on a host bug (see the host's log)")

        return handle

    return ([StarletteRoute(PREFIX + path, bind(handler), methods=["GET"]) for path, handler in GET]
            + [StarletteRoute(PREFIX + path, bind(handler), methods=["POST"]) for path, handler in POST])
