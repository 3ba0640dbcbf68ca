"""Events: event.emit (recorded), event.list and event.get (read-only).

`event.emit` records an event once per (name, key) and settles, in the same transaction, the waits
of runs that match it (store/commands/events.py); the active host's event keeper starts its
subscribers (actors/event_keeper.py). The payload is checked here in the door's thread — a bad name,
key or data is one line and nothing is recorded; no user code runs here (subscribers' filters run on
the keeper's user-code thread, a wait's match was computed by its worker).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import Rejected
from piwf_actors.protocol.catalog.registry import BuildEnv, OperationContext, client_args, operation, write_operation
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.store.commands.events import check_emit
from piwf_actors.store.event_queries import get_event, list_events
from piwf_actors.store.requests import WriteCommand

#: Events one event.list returns at most.
MAX_LIST = 1000


@write_operation("event.emit", payload={"name": ("str", True), "data": ("any", False), "key": ("str", False)})
def event_emit(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    try:
        check_emit(payload["name"], payload.get("key"), payload.get("data"))
    except Rejected as exc:
        raise BadRequest(f"event.emit: {exc.one_line()}", request.request_id) from None
    args = {**client_args(request), "name": payload["name"], "key": payload.get("key"), "data": payload.get("data")}
    args["peer"] = request.peer  # who emitted it, kept with the event (not in the fingerprint)
    return WriteCommand("event.emit", args)


@operation("event.list", payload={"name": ("str", False), "limit": ("int", False), "before_seq": ("int", False)},
           read_only=True)
def event_list(ctx: OperationContext, payload: dict[str, Any]) -> None:
    limit = min(int(payload.get("limit") or 50), MAX_LIST)
    items = list_events(ctx.reader, payload.get("name"), limit, payload.get("before_seq"))
    ctx.reply("accepted", receipt={"events": items})


@operation("event.get", payload={"event_id": ("str", True)}, read_only=True)
def event_get(ctx: OperationContext, payload: dict[str, Any]) -> None:
    found = get_event(ctx.reader, payload["event_id"])
    if found is None:
        ctx.reply("notFound", error=f"event {payload['event_id']} not found")
        return
    ctx.reply("accepted", receipt=found)
