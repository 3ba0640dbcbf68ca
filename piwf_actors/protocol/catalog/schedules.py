"""Schedules: schedule.list (read-only), schedule.pause|resume|trigger (recorded), and the list's view.

- `schedule.list`: the definitions the keeper loaded (from the host board)
  joined with their rows (pause flag, cursor, counts), plus schedules
  recorded earlier whose file no longer defines them, and the schedule files
  that failed to load.
- `schedule.pause` / `schedule.resume`: write commands, like run control.
- `schedule.trigger`: handed to the schedule keeper, which builds the manual
  fire (resolving the workflow and calling the input function is its work,
  not the gateway's) and submits it to the writer with the gateway as the one
  answered, under the token registered here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from piwf_actors.actor_refs import safe_tell
from piwf_actors.board import Section
from piwf_actors.protocol.catalog.registry import BuildEnv, OperationContext, client_args, operation, write_operation
from piwf_actors.protocol.envelope import Request
from piwf_actors.protocol.gateway_messages import TriggerSchedule
from piwf_actors.store.requests import WriteCommand
from piwf_actors.store.schedule_queries import schedule_rows


def schedule_list_view(rows: Mapping[str, Mapping[str, Any]], section: Mapping[str, Any]) -> dict[str, Any]:
    """{schedules: [...], failures: [{path, error}], clashes: [str]} (a pure function).

    Each schedule: name, loaded (its file defines it now), paused, workflow, timing, cron, every_s,
    timezone, catch_up, max_catch_up, description, path, attr, project_path, next_fire_at (None
    while paused, or before the keeper recorded it), last_fire_at, fire_count, skipped_count,
    last_error; sorted by name.
    """
    loaded: Mapping[str, Any] = section.get("loaded") or {}
    items = []
    for name in sorted(set(loaded) | set(rows)):
        row = rows.get(name) or {}
        definition = loaded.get(name) or row.get("summary") or {}
        paused = bool(row.get("paused"))
        items.append({
            "name": name, "loaded": name in loaded, "paused": paused, **definition,
            "next_fire_at": None if paused or name not in loaded else row.get("next_fire_at"),
            "last_fire_at": row.get("last_fire_at"), "fire_count": row.get("fire_count", 0),
            "skipped_count": row.get("skipped_count", 0), "last_error": row.get("last_error"),
        })
    return {"schedules": items, "failures": list(section.get("failures") or []),
            "clashes": list(section.get("clashes") or []), "dirs": list(section.get("dirs") or [])}


@operation("schedule.list", read_only=True)
def schedule_list(ctx: OperationContext, _payload: dict[str, Any]) -> None:
    view = schedule_list_view(schedule_rows(ctx.reader), ctx.board.snapshot(Section.SCHEDULES))
    view["running"] = ctx.services.schedules is not None
    ctx.reply("accepted", receipt=view)


@write_operation("schedule.pause", payload={"name": ("str", True)})
@write_operation("schedule.resume", payload={"name": ("str", True)})
def schedule_control(_env: BuildEnv, request: Request, payload: dict[str, Any]) -> WriteCommand:
    """Straight to the writer."""
    return WriteCommand(request.operation, {**client_args(request), "name": payload["name"]})


@operation("schedule.trigger", payload={"name": ("str", True)}, recorded=True)
def schedule_trigger(ctx: OperationContext, payload: dict[str, Any]) -> None:
    schedules = ctx.services.schedules
    if schedules is None:
        ctx.reply("unavailable", error="schedules are not running in this host")
        return
    token = ctx.expect()
    if not safe_tell(schedules, TriggerSchedule(payload["name"], token, ctx.client_args(), ctx.services.gateway)):
        ctx.forget(token)
        ctx.reply("unavailable", error="the schedule keeper has stopped")
