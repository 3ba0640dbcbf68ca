"""Rich renderables for `piwf`: run tables, one run, events, host and state status.

Everything that comes from the host (ids, names, outputs, error messages)
is untrusted text: it goes into `rich.text.Text`, never into a markup
string, so a `[red]` in a workflow's output is shown as typed.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

TERMINAL = ("done", "failed", "cancelled")
STATUS_STYLES = {"queued": "cyan", "starting": "cyan", "running": "blue", "parked": "yellow", "done": "green",
                 "failed": "red", "cancelled": "magenta"}


# --- plain values ---------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def to_json(value: Any, *, indent: int | None = 2) -> str:
    return json.dumps(value, indent=indent, sort_keys=indent is not None, ensure_ascii=False, default=_json_default)


def compact(value: Any, limit: int = 80) -> str:
    """One-line JSON of `value`, cut to `limit` characters."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def when(ts: float | None, *, precise: bool = False) -> str:
    if not ts:
        return ""
    try:
        base = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):
        return str(ts)
    return f"{base}.{int((ts % 1) * 1000):03d}" if precise else base


def ago(ts: float | None, now: float | None = None) -> str:
    """`3.2 s ago` / `in 12.0 s`."""
    if not ts:
        return ""
    delta = (now if now is not None else time.time()) - ts
    return f"{delta:.1f} s ago" if delta >= 0 else f"in {-delta:.1f} s"


def text(value: Any, style: str = "") -> Text:
    return Text("" if value is None else str(value), style=style)


def status_text(status: Any, park_reason: Any = None) -> Text:
    label = str(status or "")
    if park_reason:
        label += f" ({park_reason})"
    return Text(label, style=STATUS_STYLES.get(str(status), ""))


def error_text(error: Any) -> Text:
    if not error:
        return Text("")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return Text(f"{code}: {message}" if code else str(message), style="red")
    return Text(str(error), style="red")


def _kv_table(title: str | None = None) -> Table:
    table = Table(title=title, show_header=False, box=None, pad_edge=False, title_justify="left")
    table.add_column("key", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    return table


# --- runs -----------------------------------------------------------------------------


def runs_table(runs: list[dict[str, Any]], counts: dict[str, int] | None = None,
               title: str | None = None) -> Table:
    caption = None
    if counts:
        caption = "  ".join(f"{status} {n}" for status, n in counts.items() if n)
    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    table.add_column("run id", no_wrap=True, min_width=30)
    table.add_column("workflow", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("steps", justify="right")
    table.add_column("created", no_wrap=True)
    table.add_column("finished", no_wrap=True)
    for run in runs:
        table.add_row(text(run.get("run_id")), text(run.get("workflow")),
                      status_text(run.get("status"), run.get("park_reason")), text(run.get("steps")),
                      text(when(run.get("created_at"))), text(when(run.get("finished_at"))))
    if not runs:
        table.add_row(Text("no runs", style="dim"), "", "", "", "", "")
    return table


def run_summary(view: dict[str, Any]) -> Table:
    table = _kv_table()
    table.add_row("run", text(view.get("run_id")))
    table.add_row("workflow", text(view.get("workflow")))
    status = status_text(view.get("status"), view.get("park_reason"))
    if view.get("park_detail"):
        status.append(f" {view['park_detail']}", style="dim")
    for flag in ("pause_requested", "cancel_requested"):
        if view.get(flag):
            status.append(f" [{flag.replace('_', ' ')}]", style="dim")
    table.add_row("status", status)
    table.add_row("revision", text(view.get("revision")))
    for key, label in (("parent_run_id", "parent"), ("session_id", "session"), ("project_path", "project"),
                       ("current_node", "current node")):
        if view.get(key):
            table.add_row(label, text(view[key]))
    table.add_row("steps", text(view.get("steps")))
    table.add_row("created", text(when(view.get("created_at"))))
    table.add_row("updated", text(when(view.get("updated_at"))))
    if view.get("finished_at"):
        table.add_row("finished", text(when(view["finished_at"])))
    table.add_row("input", text(compact(view.get("input"), 200)))
    if view.get("output") is not None:
        table.add_row("output", text(compact(view.get("output"), 200)))
    if view.get("error"):
        table.add_row("error", error_text(view["error"]))
    return table


def nodes_table(nodes: list[dict[str, Any]]) -> Table:
    table = Table(title="nodes", title_justify="left")
    table.add_column("node", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right")
    table.add_column("output / error", overflow="fold")
    for node in nodes:
        detail = error_text(node["error"]) if node.get("error") else text(compact(node.get("output")))
        table.add_row(text(node.get("node_id")), text(node.get("status")), text(node.get("attempts")), detail)
    if not nodes:
        table.add_row(Text("no node started yet", style="dim"), "", "", "")
    return table


def effects_table(effects: list[dict[str, Any]]) -> Table:
    table = Table(title="effects", title_justify="left")
    for column in ("effect id", "node", "status", "resolution"):
        table.add_column(column, overflow="fold")
    for effect in effects:
        table.add_row(*(text(effect.get(k)) for k in ("effect_id", "node_id", "status", "resolution")))
    return table


def run_view(view: dict[str, Any] | None) -> RenderableType:
    if view is None:
        return Text("the run no longer exists", style="red")
    parts: list[RenderableType] = [run_summary(view), nodes_table(view.get("nodes") or [])]
    if view.get("effects"):
        parts.append(effects_table(view["effects"]))
    return Group(*parts)


# --- events ---------------------------------------------------------------------------


def events_table(events: list[dict[str, Any]]) -> Table:
    table = Table()
    table.add_column("seq", justify="right")
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("node", overflow="fold")
    table.add_column("payload", overflow="fold")
    for event in events:
        table.add_row(text(event.get("seq")), text(when(event.get("created_at"), precise=True)),
                      text(event.get("kind")), text(event.get("node_id")), text(compact(event.get("payload"), 120)))
    return table


def event_line(event: dict[str, Any]) -> Text:
    line = Text()
    line.append(f"{event.get('seq', ''):>5} ", style="dim")
    line.append(when(event.get("created_at"), precise=True) + " ")
    line.append(f"{event.get('kind', '')!s:<18}", style="bold")
    line.append(f" {event.get('node_id') or '-'}")
    payload = compact(event.get("payload"), 160)
    if payload:
        line.append(f" {payload}", style="dim")
    return line


# --- host and state -------------------------------------------------------------------


def host_status(view: dict[str, Any]) -> RenderableType:
    now = time.time()
    lease = view.get("lease") or {}
    host = _kv_table("host")
    host.add_row("epoch", text(view.get("epoch")))
    host.add_row("pid", text(view.get("pid")))
    host.add_row("host id", text(lease.get("host_id")))
    host.add_row("started", text(when(lease.get("started_at"))))
    host.add_row("lease", Text("live" if lease.get("live") else "expired", style="green" if lease.get("live")
                               else "red"))
    host.add_row("heartbeat", text(ago(lease.get("heartbeat_at"), now)))
    host.add_row("expires", text(ago(lease.get("expires_at"), now)))
    workers = view.get("workers") or {}
    active = workers.get("active") or []
    host.add_row("workers", text(f"{len(active)} active / {workers.get('max')} max, {workers.get('idle')} idle"))
    writer = view.get("writer") or {}
    if writer:
        host.add_row("writer", text(f"queue depth {writer.get('queue_depth')}, "
                                    f"{_rate(writer.get('commits_per_s'))} commits/s, "
                                    f"{_rate(writer.get('commands_per_s'))} commands/s, "
                                    f"{writer.get('commits')} commits total"))
    gateway = view.get("gateway") or {}
    if gateway:
        host.add_row("clients", text(f"{gateway.get('connections')} connections, {gateway.get('watches')} watches, "
                                     f"{gateway.get('requests')} requests"))
    runs = Table(title="runs", title_justify="left")
    counts = view.get("runs") or {}
    for status in counts:
        runs.add_column(status, justify="right", header_style=STATUS_STYLES.get(status, ""))
    runs.add_row(*(text(n) for n in counts.values()))
    parts: list[RenderableType] = [host, runs]
    if active:
        table = Table(title="active workers", title_justify="left")
        for column in ("run id", "pid", "generation"):
            table.add_column(column)
        for item in active:
            table.add_row(*(text(item.get(k)) for k in ("run_id", "pid", "generation")))
        parts.append(table)
    return Group(*parts)


def _rate(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def state_status(view: dict[str, Any]) -> RenderableType:
    info = _kv_table("state")
    info.add_row("database", text(view.get("path")))
    info.add_row("size", text(f"{_size(view.get('db_bytes'))} (+ WAL {_size(view.get('wal_bytes'))})"))
    info.add_row("pages", text(f"{view.get('page_count')} × {view.get('page_size')} B, "
                               f"{view.get('freelist_count')} free, auto_vacuum {view.get('auto_vacuum')}"))
    info.add_row("schema", text(view.get("schema_version")))
    info.add_row("blobs", text(f"{view.get('blob_count')} ({_size(view.get('blob_bytes'))})"))
    runs = view.get("runs") or {}
    info.add_row("runs", text("  ".join(f"{k} {v}" for k, v in runs.items())))
    tables = Table(title="rows", title_justify="left")
    tables.add_column("table")
    tables.add_column("rows", justify="right")
    for name, rows in (view.get("tables") or {}).items():
        tables.add_row(text(name), text(rows))
    return Group(info, tables)


def verify_result(view: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    integrity = view.get("integrity") or []
    if view.get("ok"):
        parts.append(Text("state ok: integrity_check ok, no invariant violated", style="green"))
    else:
        parts.append(Text("state NOT ok", style="bold red"))
        if integrity != ["ok"]:
            parts.append(Text("integrity_check: " + "; ".join(map(str, integrity)), style="red"))
    violations = view.get("violations") or []
    if violations:
        table = Table(title=f"{len(violations)} violation(s)", title_justify="left")
        table.add_column("code", no_wrap=True)
        table.add_column("run id", no_wrap=True)
        table.add_column("detail", overflow="fold")
        for item in violations:
            table.add_row(text(item.get("code")), text(item.get("run_id")), text(item.get("detail")))
        parts.append(table)
    if view.get("truncated"):
        parts.append(Text("more found (list cut) for: " + ", ".join(map(str, view["truncated"])), style="yellow"))
    parts.append(Text(f"host lease {'live' if view.get('lease_live') else 'not live'}", style="dim"))
    return Group(*parts)


def prune_result(view: dict[str, Any]) -> RenderableType:
    info = _kv_table("prune" if view.get("applied") else "prune (dry run: nothing deleted; add --apply)")
    info.add_row("before", text(when(view.get("before"))))
    info.add_row("runs", text(view.get("run_count")))
    if view.get("remaining"):
        info.add_row("left for later", text(view.get("remaining")))
    info.add_row("events", text(view.get("event_count")))
    info.add_row("blobs", text(view.get("blob_count")))
    info.add_row("frees about", text(_size(view.get("bytes_freed_estimate"))))
    if view.get("applied"):
        info.add_row("returned", text(f"{_size(view.get('bytes_returned'))} "
                                      f"({view.get('vacuumed_pages')} pages vacuumed)"))
    runs = view.get("runs") or []
    if runs:
        shown = ", ".join(map(str, runs[:10])) + (" …" if len(runs) > 10 or view.get("run_count", 0) > len(runs)
                                                  else "")
        info.add_row("run ids", text(shown))
    return info


def backup_result(view: dict[str, Any]) -> RenderableType:
    info = _kv_table("backup")
    info.add_row("destination", text(view.get("destination")))
    info.add_row("size", text(f"{_size(view.get('bytes'))} ({view.get('pages')} pages)"))
    info.add_row("runs", text(view.get("runs")))
    info.add_row("verified", text("yes" if view.get("verified") else "no"))
    return info
