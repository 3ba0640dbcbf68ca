"""`piwf emit NAME --value JSON [--key K]` and `piwf event list | show EVENT`: events of a host.

`piwf emit` records an event (`event.emit`): workflows declaring `on_event(NAME)` start on it, runs
waiting for it (`wait_event(NAME, match=...)`) take it. With `--key K` the event is recorded once per
(NAME, K): emitting again is the same event (`already recorded`), which makes a retried emit safe.
`piwf event list` shows the newest events with how many runs each started and woke; `piwf event show`
one event with each subscriber's outcome and the waits it settled.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors.canonical import canonical_json
from piwf_actors.cli.context import EXIT_OK, Ctx
from piwf_actors.cli.values import json_value
from piwf_actors.timefmt import relative


def add_commands(add: Any, sub: Any) -> None:
    p = add(sub, "emit", "emit an event (starts on_event workflows, settles matching wait_event waits)", cmd_emit,
            "Record event NAME with --value as its data. Workflows with on_event(NAME) start a run on it (one per "
            "event and workflow, even across host crashes); runs waiting in wait_event(NAME, match=...) for data "
            "like it take it. With --key K the event is recorded once per (NAME, K): emitting it again is the same "
            "event, not a second one.")
    p.add_argument("name", metavar="NAME", help="the event's name, e.g. order.created")
    p.add_argument("--value", type=json_value, default=None, metavar="JSON",
                   help="the event's data as JSON (default null); @FILE reads it from a file, - from standard input")
    p.add_argument("--key", metavar="K", help="the event's key: one event per (NAME, K), a re-emit is adopted")
    event = add(sub, "event", "events: list, show", None).add_subparsers(dest="event_command", required=True,
                                                                         metavar="ACTION")
    p = add(event, "list", "the newest events with the runs they started and woke", cmd_event_list)
    p.add_argument("--name", metavar="NAME", help="only events of this name")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p = add(event, "show", "one event: what it started (per subscriber) and the waits it settled", cmd_event_show)
    p.add_argument("event_id", metavar="EVENT", help="an event id (evt_…)")


def cmd_emit(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    payload: dict[str, Any] = {"name": args.name, "data": args.value}
    if args.key is not None:
        payload["key"] = args.key
    receipt = ctx.call("event.emit", payload) or {}
    if ctx.json:
        ctx.emit_json(receipt)
        return EXIT_OK
    line = Text("already recorded " if receipt.get("adopted_event") else "emitted ")
    line.append(str(receipt.get("event_id")), style="bold")
    line.append(f" {receipt.get('name')} (seq {receipt.get('seq')})")
    woke = receipt.get("woke") or []
    if woke:
        line.append(f": woke {', '.join(woke)}", style="green")
    ctx.out.print(line, soft_wrap=True)
    return EXIT_OK


def _data(value: Any, width: int = 60) -> str:
    text = canonical_json(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def render_list(events: list[dict[str, Any]], now: float | None = None) -> RenderableType:
    """The events table (a pure function of the receipt and `now`)."""
    now = time.time() if now is None else now
    if not events:
        return Text("no events")
    table = Table(box=None, pad_edge=False)
    for column in ("EVENT", "NAME", "KEY", "EMITTED", "STARTED", "WOKE", "DATA"):
        table.add_column(column)
    for item in events:
        table.add_row(str(item["event_id"]), Text(str(item["name"])), Text(str(item.get("key") or "-")),
                      relative(item["emitted_at"], now), str(item.get("started", 0)), str(item.get("woke", 0)),
                      Text(_data(item.get("data"))))
    return table


def render_event(item: dict[str, Any], now: float | None = None) -> RenderableType:
    """One event with its deliveries and the waits it settled (a pure function)."""
    now = time.time() if now is None else now
    head = Text(f"{item['event_id']}  {item['name']}  key {item.get('key') or '-'}  seq {item['seq']}  "
                f"emitted {relative(item['emitted_at'], now)}")
    parts: list[RenderableType] = [head, Text("data: " + _data(item.get("data"), 2000))]
    for delivery in item.get("deliveries") or []:
        what = {"started": f"started {delivery.get('run_id')}",
                "batched": f"batched in {delivery.get('batch_id')}"
                           + (f" → run {delivery['run_id']}" if delivery.get("run_id") else " (open)"),
                "filtered": "filtered out", "failed": f"failed: {delivery.get('error')}"}.get(
                    delivery["outcome"], delivery["outcome"])
        parts.append(Text(f"  {delivery['subscription']}: {what}"))
    for woke in item.get("woke") or []:
        parts.append(Text(f"  woke {woke['run_id']} (node {woke['node_id']})"))
    if not item.get("deliveries") and not item.get("woke"):
        parts.append(Text("  started and woke nothing"))
    return Group(*parts)


def cmd_event_list(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    payload: dict[str, Any] = {"limit": ctx.args.limit}
    if ctx.args.name:
        payload["name"] = ctx.args.name
    receipt = ctx.call("event.list", payload) or {}
    ctx.show(receipt.get("events") or [], render_list)
    return EXIT_OK


def cmd_event_show(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    receipt = ctx.call("event.get", {"event_id": ctx.args.event_id})
    ctx.show(receipt, render_event)
    return EXIT_OK
