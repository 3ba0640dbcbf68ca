"""Rich renderables of the host and its database: `piwf status`, `piwf state status|verify|backup|prune`.

Untrusted text goes into `rich.text.Text` (see render.py).
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors.cli.render import STATUS_STYLES, id_column, kv_table, relative, short_ids, text, when
from piwf_actors.store.engines.registry import engine_named


def host_status(view: dict[str, Any]) -> RenderableType:
    now = time.time()
    lease = view.get("lease") or {}
    host = kv_table("host")
    role = view.get("role") or "active"
    host.add_row("role", Text(role, style="green" if role in ("active", "runner") else "yellow"))
    if role == "runner":
        runner = view.get("runner") or {}
        host.add_row("runner lease", Text(
            f"epoch {runner.get('epoch')}, heartbeat {relative(runner.get('heartbeat_at'), now)}, expires "
            f"{relative(runner.get('expires_at'), now)}" + (" (lost)" if runner.get("lost") else ""),
            style="red" if runner.get("lost") else ""))
    if role in ("standby", "runner"):
        active = view.get("active") or {}
        holder = (f"{active.get('host_id')} (epoch {active.get('epoch')}), lease expires "
                  f"{relative(active.get('expires_at'), now)}" if active.get("live")
                  else f"none: the lease of epoch {active.get('epoch')} has run out; taking over")
        host.add_row("active host", text(holder))
    # This host's own id and pid; the rows below are the lease holder's (on a standby: the active host's).
    host.add_row("this host", text(f"{view.get('host_id') or '-'} (pid {view.get('pid')})"))
    host.add_row("epoch", text(view.get("epoch")))
    holder_pid = (view.get("active") or {}).get("pid", lease.get("pid") if lease.get("live") else None)
    host.add_row("pid", text(holder_pid if holder_pid is not None else "none"))
    host.add_row("host id", text(lease.get("host_id")))
    host.add_row("started", text(when(lease.get("started_at"))))
    host.add_row("lease", Text("live" if lease.get("live") else "expired", style="green" if lease.get("live")
                               else "red"))
    host.add_row("heartbeat", text(relative(lease.get("heartbeat_at"), now)))
    host.add_row("expires", text(relative(lease.get("expires_at"), now)))
    workers = view.get("workers") or {}
    active = workers.get("active") or []
    host.add_row("workers", text(f"{len(active)} active / {workers.get('max')} max, {workers.get('idle')} idle"
                                 if role in ("active", "runner") else "none (a standby runs no workers)"))
    writer = view.get("writer") or {}
    if writer:
        host.add_row("writer", text(f"queue depth {writer.get('queue_depth')}, "
                                    f"{_rate(writer.get('commits_per_s'))} commits/s, "
                                    f"{_rate(writer.get('commands_per_s'))} commands/s, "
                                    f"{writer.get('commits')} commits total"))
        if writer.get("disk_full"):
            host.add_row("writes", disk_full_text(writer["disk_full"]))
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
    runner_hosts = [r for r in view.get("runners") or [] if r.get("live")]
    if runner_hosts:
        table = Table(title="runner hosts", title_justify="left")
        for column in ("runner id", "epoch", "workers", "runs", "heartbeat", "expires", "machine"):
            table.add_column(column)
        for item in runner_hosts:
            table.add_row(text(item.get("runner_id")), text(item.get("epoch")), text(item.get("max_workers")),
                          text(item.get("active_runs")), text(relative(item.get("heartbeat_at"), now)),
                          text(relative(item.get("expires_at"), now)), text(item.get("machine_id")))
        parts.append(table)
    if active:
        table = Table(title="active workers", title_justify="left")
        id_column(table, "run id")
        for column in ("pid", "generation"):
            table.add_column(column)
        short = short_ids(item.get("run_id") for item in active)
        for item in active:
            table.add_row(text(short.get(str(item.get("run_id")), item.get("run_id"))),
                          *(text(item.get(k)) for k in ("pid", "generation")))
        parts.append(table)
    return Group(*parts)


def disk_full_text(disk_full: dict[str, Any]) -> Text:
    """Why nothing moves: the writer refuses writes until the disk has room (docs: Running a host)."""
    since = disk_full.get("since")
    age = f" for {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
    wal = f"; WAL {_size(disk_full['wal_bytes'])}" if disk_full.get("wal_bytes") is not None else ""
    return Text(f"STOPPED: the disk is full{age} ({disk_full.get('refused_batches')} batches refused{wal}): "
                f"{disk_full.get('detail')} — free some space; the WAL is truncated before writing resumes",
                style="bold red")


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
    info = kv_table("state")
    info.add_row("database", text(view.get("path")))
    if view.get("page_count") is None:
        # A server keeps its own pages and WAL: which one it is and the database's size is what there is to show.
        engine = engine_named(view.get("engine"))
        info.add_row("engine", text(view.get("engine") if engine is None else engine.label))
        info.add_row("size", text(_size(view.get("db_bytes"))))
    else:
        info.add_row("size", text(f"{_size(view.get('db_bytes'))} (+ WAL {_size(view.get('wal_bytes'))})"))
        info.add_row("pages", text(f"{view.get('page_count')} × {view.get('page_size')} B, "
                                   f"{view.get('freelist_count')} free, auto_vacuum {view.get('auto_vacuum')}"))
    info.add_row("schema", text(view.get("schema_version")))
    if view.get("disk_full"):
        info.add_row("writes", disk_full_text(view["disk_full"]))
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
    info = kv_table("prune" if view.get("applied") else "prune (dry run: nothing deleted; add --apply)")
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
    info = kv_table("backup")
    info.add_row("destination", text(view.get("destination")))
    info.add_row("size", text(f"{_size(view.get('bytes'))} ({view.get('pages')} pages)"))
    info.add_row("runs", text(view.get("runs")))
    info.add_row("verified", text("yes" if view.get("verified") else "no"))
    return info
