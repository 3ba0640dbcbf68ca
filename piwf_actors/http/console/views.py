"""The console's pages (GET): each reads what it shows with the client operations the API's GET routes
make, a bounded page at a time (`run.list` with a limit and a cursor, never every run), and renders
one template. The live parts subscribe to `streams/…` (Server-Sent Events of the same watches as
`/api/v1/streams/…`, opened with the console's cookie), and console.js reloads the page's data when
its view changed. Handlers run on the door's event-loop thread.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from piwf_actors.http.answers import error
from piwf_actors.http.console import shapes
from piwf_actors.http.console.core import (
    MAX_PAGE_RUNS,
    PAGE_EFFECTS,
    PAGE_EVENTS,
    PAGE_RUNS,
    PREFIX,
    STATIC,
    Console,
    Me,
)
from piwf_actors.http.routes import VIEWER
from piwf_actors.http.streams import event_stream
from piwf_actors.protocol.envelope import SCHEMA
from piwf_actors.statuses import RUN_STATUSES

#: The console's stream names → the watch topics of the client protocol.
STREAM_TOPICS = {"runs": "runs", "inbox": "interactions", "host": "host"}


async def home(_console: Console, _request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/inbox", 303)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and len(text) < 12 else None


async def runs(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    query = request.query_params
    filters = {name: query[name].strip() for name in ("status", "workflow", "parent") if query.get(name, "").strip()}
    problems: list[str] = []
    if "status" in filters and filters["status"] not in RUN_STATUSES:
        problems.append(f"unknown status {filters.pop('status')!r} (one of {', '.join(RUN_STATUSES)})")
    search = query.get("q", "").strip()
    matches: list[str] = []
    if search:
        prefix = search if search.startswith("run_") else f"run_{search}"
        found, problem = await console.read(me, "ids.match", {"kind": "run", "prefix": prefix, "limit": PAGE_RUNS})
        matches = list((found or {}).get("matches") or [])
        if problem:
            problems.append(problem)
        if len(matches) == 1:
            return RedirectResponse(f"{PREFIX}/runs/{matches[0]}", 303)
    size = min(_int(query.get("limit")) or PAGE_RUNS, MAX_PAGE_RUNS)
    payload: dict[str, Any] = {**filters, "limit": size}
    if query.get("cursor"):
        payload["cursor"] = query["cursor"]
    listed, problem = await console.read(me, "run.list", payload)
    if problem:
        problems.append(problem)
    listed = listed or {}
    return console.page(request, "runs.html", me, runs=listed.get("runs") or [], next_cursor=listed.get("next_cursor"),
                        filters=filters, search=search, matches=matches, statuses=RUN_STATUSES,
                        problems=problems, note=query.get("note"), paged=bool(query.get("cursor")),
                        size=size)


async def run(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    run_id = request.path_params["run_id"]
    view, problem = await console.read(me, "run.get", run_id=run_id)
    if view is None:
        return console.page(request, "missing.html", me, 404 if problem and "notFound" in problem else 503,
                            what=f"run {run_id}", problem=problem)
    after = _int(request.query_params.get("after")) or 0
    graph, events, children = await asyncio.gather(
        console.read(me, "run.graph", run_id=run_id),
        console.read(me, "run.events", {"after": after, "limit": PAGE_EVENTS}, run_id=run_id),
        console.read(me, "run.list", {"parent": run_id, "limit": PAGE_RUNS}))
    now = time.time()
    picture, picture_note = shapes.picture(view, (graph[0] or {}).get("graph"), now)
    return console.page(request, "run.html", me, run=view, picture=picture, picture_note=picture_note,
                        events=(events[0] or {}).get("events") or [], events_after=after,
                        events_next=(events[0] or {}).get("next_after") if (events[0] or {}).get("more") else None,
                        children=(children[0] or {}).get("runs") or [], waits=shapes.waits(view, now),
                        problems=[p for p in (graph[1], events[1], children[1]) if p],
                        note=request.query_params.get("note"))


async def inbox(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    listed, problem = await console.read(me, "interaction.list")
    requests = [(item, shapes.answer_form(item)) for item in (listed or {}).get("requests") or []]
    return console.page(request, "inbox.html", me, requests=requests, problems=[problem] if problem else [],
                        note=request.query_params.get("note"))


async def effects(console: Console, request: Request) -> Response:
    """Ambiguous effects, newest first, a page at a time (`effect.list`: one indexed read, each with its run
    and attempt); `?cursor=` pages on."""
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    payload: dict[str, Any] = {"status": "ambiguous", "limit": PAGE_EFFECTS}
    if request.query_params.get("cursor"):
        payload["cursor"] = request.query_params["cursor"]
    listed, problem = await console.read(me, "effect.list", payload)
    return console.page(request, "effects.html", me, effects=(listed or {}).get("effects") or [],
                        next_cursor=(listed or {}).get("next_cursor"), paged=bool(payload.get("cursor")),
                        problems=[problem] if problem else [], note=request.query_params.get("note"))


async def schedules(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    listed, problem = await console.read(me, "schedule.list")
    return console.page(request, "schedules.html", me, listed=listed or {}, problems=[problem] if problem else [],
                        note=request.query_params.get("note"))


async def resources(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    manager = request.query_params.get("manager", "").strip()
    payload: dict[str, Any] = {"limit": 200, **({"manager": manager} if manager else {})}
    listed, problem = await console.read(me, "resource.list", payload)
    return console.page(request, "resources.html", me, resources=(listed or {}).get("resources") or [], manager=manager,
                        problems=[problem] if problem else [], note=request.query_params.get("note"))


async def host(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    (status, p1), (state, p2), (channels, p3) = await asyncio.gather(
        console.read(me, "host.status"), console.read(me, "state.status", {"counts": False}), console.read(me, "channel.status"))
    return console.page(request, "host.html", me, host=status or {}, state=state or {}, channels=channels or {},
                        problems=[p for p in (p1, p2, p3) if p], note=request.query_params.get("note"))


async def _watch(console: Console, me: Me, payload: dict[str, Any]) -> Response:
    key = f"http-{secrets.token_hex(12)}"
    frame = {"schema": SCHEMA, "type": "request", "request_id": key, "client_id": f"http-{me.name}",
             "idempotency_key": key, "operation": "watch", "payload": {"subscription_id": "sse", **payload}}
    return await event_stream(console.door, frame, me.peer)


async def stream(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    topic = STREAM_TOPICS.get(request.path_params["topic"])
    if topic is None:
        return error(404, f"no such stream (streams: {', '.join(STREAM_TOPICS)}, runs/RUN_ID)")
    return await _watch(console, me, {"topic": topic})


async def run_stream(console: Console, request: Request) -> Response:
    me = await console.me(request, VIEWER)
    if isinstance(me, Response):
        return me
    # `output_so_far`: what the running node printed before the page subscribed comes first, then the
    # rest as it is printed (`node_output` events, which console.js appends to the run page's log).
    return await _watch(console, me, {"topic": "run", "run_id": request.path_params["run_id"], "output_so_far": True})


async def static(console: Console, request: Request) -> Response:
    """The console's CSS and script: public (the sign-in page needs them), cached for an hour."""
    name = request.path_params["name"]
    if name not in STATIC:
        return error(404, "no such file")
    return Response(console.static[name], media_type=STATIC[name],
                    headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"})

