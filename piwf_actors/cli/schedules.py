"""`piwf schedule list | pause | resume | trigger NAME`: the schedules of a running host."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors.cli.context import EXIT_OK, Ctx
from piwf_actors.timefmt import relative


def add_commands(add: Any, sub: Any) -> None:
    schedule = add(sub, "schedule", "schedules: list, pause, resume, fire now", None).add_subparsers(
        dest="schedule_command", required=True, metavar="ACTION")
    add(schedule, "list", "the host's schedules with their next fire times", cmd_schedule_list,
        "The schedules the host loads (from each piwf-host --project DIR's .piwf/workflows/ and from "
        "$XDG_CONFIG_HOME/piwf/workflows/), their next and last fires, and schedule files that fail to load.")
    for name, help_text, handler in (
            ("pause", "stop a schedule's fires until it is resumed", cmd_schedule_control),
            ("resume", "fire again from the next fire time (the pause is not caught up)", cmd_schedule_control),
            ("trigger", "fire a schedule now (also while paused): one run", cmd_schedule_trigger)):
        p = add(schedule, name, help_text, handler)
        p.add_argument("name", metavar="NAME", help="the schedule's name")


def fire_time(ts: float | None, zone: str | None) -> str:
    """A fire time in the schedule's zone (the one its cron is read in), e.g. `2026-12-01 03:00 CET`."""
    if not ts:
        return "-"
    try:
        return datetime.fromtimestamp(ts, ZoneInfo(zone or "UTC")).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (ValueError, OSError, KeyError):
        return str(ts)


def state_of(item: dict[str, Any]) -> Text:
    if not item.get("loaded"):
        return Text("not loaded", style="yellow")
    if item.get("paused"):
        return Text("paused", style="yellow")
    if item.get("last_error"):
        return Text("failing", style="red")
    return Text("active", style="green")


def render_list(view: dict[str, Any], now: float | None = None) -> RenderableType:
    """The schedules table, then load failures and clashes (a pure function of the receipt and `now`)."""
    now = time.time() if now is None else now
    parts: list[RenderableType] = []
    schedules = view.get("schedules") or []
    if not view.get("running", True):
        parts.append(Text("this host runs no schedules", style="yellow"))
    if schedules:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("name", "state", "workflow", "when", "next fire", "last fire", "fires"):
            table.add_column(column, no_wrap=column in ("name", "state", "when"), overflow="fold")
        for item in schedules:
            zone = item.get("timezone")
            upcoming = item.get("next_fire_at")
            next_text = Text(fire_time(upcoming, zone))
            if upcoming:
                next_text.append(f" ({relative(upcoming, now)})", style="dim")
            skipped = item.get("skipped_count") or 0
            fires = str(item.get("fire_count") or 0) + (f" ({skipped} skipped)" if skipped else "")
            table.add_row(Text(str(item["name"])), state_of(item), Text(str(item.get("workflow") or "")),
                          Text(str(item.get("timing") or "")), next_text,
                          Text(fire_time(item.get("last_fire_at"), zone)), Text(fires))
        parts.append(table)
        for item in schedules:
            if item.get("last_error"):
                parts.append(Text(f"{item['name']}: last fire started no run: {item['last_error']}", style="red"))
    else:
        dirs = view.get("dirs") or []
        parts.append(Text("no schedules" + (" in " + " or ".join(dirs) if dirs else ""), style="yellow"))
    for failure in view.get("failures") or []:
        parts.append(Text(f"failed to load {failure.get('path')}: {failure.get('error')}", style="red"))
    for clash in view.get("clashes") or []:
        parts.append(Text(str(clash), style="yellow"))
    return Group(*parts)


def cmd_schedule_list(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    ctx.show(ctx.call("schedule.list"), render_list)
    return EXIT_OK


def cmd_schedule_control(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    action = ctx.args.schedule_command
    receipt = ctx.call(f"schedule.{action}", {"name": ctx.args.name})
    ctx.show(receipt, lambda r: Text(f"schedule {r['name']} {'paused' if r['paused'] else 'resumed'}"))
    return EXIT_OK


def cmd_schedule_trigger(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    receipt = ctx.call("schedule.trigger", {"name": ctx.args.name})
    ctx.show(receipt, lambda r: Text(f"schedule {r['name']} fired: run {r['run_id']} {r['status']}"))
    return EXIT_OK
