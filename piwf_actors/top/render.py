"""The `piwf-top` screen as a pure function: `render(snapshot, width) -> RenderableType`.

No I/O and no clock: times are shown relative to `snapshot.taken_at`, so the
same snapshot always renders the same screen (tests use a recording console).
Everything that comes from the host (ids, workflow names, titles, choice
labels, event payloads) is untrusted and goes into `rich.text.Text`, never into
a markup string: a `[red]` in a workflow name is shown as typed. Only
constant titles are passed as strings.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors.cli.render import STATUS_STYLES, compact, status_text, text
from piwf_actors.top.model import Snapshot, decision_choices

NARROW = 100  # below this width, optional columns are left out
MAX_RUN_ROWS = 8  # keeps the screen within ~40 rows (Live crops the rest)
MAX_EVENT_ROWS = 6
TABLE_STYLE: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False}  # no border rows: height is scarce
KEYS_HELP = "q quit  j/k ↑/↓ select decision  h/l ←/→ select choice  enter answer  1-9 answer with choice N"


def _span(seconds: float) -> str:
    """12.3s, 4m05s, 2h03m: short enough for narrow columns."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def _ago(ts: Any, now: float, *, suffix: bool = True) -> str:
    """`2.0s ago` / `in 4m05s` relative to `now`; just the span without `suffix` (past times)."""
    if not isinstance(ts, (int, float)) or not ts:
        return ""
    delta = now - ts
    if delta >= 0:
        return f"{_span(delta)} ago" if suffix else _span(delta)
    return f"in {_span(-delta)}"


def _rate(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def _size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _header(snapshot: Snapshot) -> RenderableType:
    host, now = snapshot.host, snapshot.taken_at
    lease = host.get("lease") or {}
    live = bool(lease.get("live"))
    line = Text.assemble(("piwf-top", "bold"), "  epoch ", (str(host.get("epoch", "-")), "bold"), "  lease ",
                         ("live" if live else "expired", "green" if live else "red"))
    if lease:
        line.append(f" (heartbeat {_ago(lease.get('heartbeat_at'), now)}, expires {_ago(lease.get('expires_at'), now)})")
    line.append(f"  host pid {host.get('pid', '-')}")
    if lease.get("host_id"):
        line.append("  id ")
        line.append(str(lease.get("host_id")))
    writer = host.get("writer") or {}
    gateway = host.get("gateway") or {}
    second = Text.assemble(("writer", "bold"), f"  queue depth {writer.get('queue_depth', '-')}"
                           f"  {_rate(writer.get('commits_per_s'))} commits/s"
                           f"  {_rate(writer.get('commands_per_s'))} commands/s"
                           f"  {writer.get('commits', '-')} commits")
    if gateway:
        second.append(f"   clients {gateway.get('connections')} connections, {gateway.get('watches')} watches")
    runs = Text.assemble(("runs", "bold"))
    for status, count in (host.get("runs") or {}).items():
        runs.append("  ")
        runs.append(f"{status} {count}", style=STATUS_STYLES.get(str(status), "") if count else "dim")
    parts: list[RenderableType] = [line, second, runs]
    channels = _channels(snapshot.channels)
    if channels is not None:
        parts.append(channels)
    if snapshot.error:
        parts.insert(0, Text(f"host unreachable: {snapshot.error}", style="bold red"))
    return Group(*parts)


def _channels(status: dict[str, Any]) -> Text | None:
    """One line: each channel profile (running or not, and why) and deliveries waiting for a person."""
    profiles = status.get("profiles") or []
    if not status.get("configured") and not status.get("error"):
        return None
    line = Text.assemble(("channels", "bold"))
    if status.get("error"):
        line.append("  refused: ", style="red")
        line.append(str(status["error"]))
    for entry in profiles:
        line.append("  ")
        line.append(str(entry.get("profile")), style="green" if entry.get("running") else "red")
        if not entry.get("running"):
            line.append(" (down" + (f": {entry.get('error')}" if entry.get("error") else "") + ")")
    ambiguous = status.get("ambiguous") or []
    if ambiguous:
        line.append(f"  {len(ambiguous)} ambiguous deliver{'y' if len(ambiguous) == 1 else 'ies'} ", style="yellow")
        line.append("(piwf channel recover)", style="dim")
    return line


def _workers(snapshot: Snapshot) -> Table:
    workers = snapshot.host.get("workers") or {}
    idle = workers.get("idle")
    counts = [f"{len(workers.get('active') or [])} active"]
    if isinstance(idle, int):  # host.status reports idle workers as a count, without pids
        counts.append(f"{idle} idle")
    if isinstance(workers.get("max"), int):
        counts.append(f"max {workers['max']}")
    table = Table(title=f"workers ({', '.join(counts)})", title_justify="left", **TABLE_STYLE)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("run id", no_wrap=True)
    for name in ("gen", "cpu %", "memory"):
        table.add_column(name, justify="right", no_wrap=True)
    for worker in snapshot.workers:
        table.add_row(text(worker.pid), text(worker.run_id) if worker.run_id else Text("idle", style="dim"),
                      text(worker.generation), Text("…" if worker.cpu_percent is None else
                                                    f"{worker.cpu_percent:.1f}"), Text(_size(worker.rss_bytes)))
    if not snapshot.workers:
        table.add_row("", Text("no active workers", style="dim"), "", "", "")
    return table


def _runs(snapshot: Snapshot, narrow: bool) -> Table:
    table = Table(title="runs", title_justify="left", **TABLE_STYLE)
    table.add_column("run id", no_wrap=True)
    table.add_column("workflow", overflow="ellipsis", max_width=30)
    table.add_column("status", no_wrap=True)
    table.add_column("node", overflow="ellipsis", max_width=20)
    table.add_column("steps", justify="right")
    if not narrow:
        table.add_column("updated", no_wrap=True)
    for run in snapshot.runs[:MAX_RUN_ROWS]:
        cells = [text(run.get("run_id")), text(run.get("workflow")),
                 status_text(run.get("status"), run.get("park_reason")), text(run.get("current_node")),
                 text(run.get("steps"))]
        if not narrow:
            cells.append(Text(_ago(run.get("updated_at"), snapshot.taken_at)))
        table.add_row(*cells)
    if not snapshot.runs:
        table.add_row(Text("no runs", style="dim"), *([""] * (len(table.columns) - 1)))
    return table


def _choices_line(request: dict[str, Any], highlighted: int | None) -> Text:
    line = Text()
    for index, (key, spec) in enumerate(decision_choices(request)):
        if index:
            line.append("  ")
        label = Text(f"{index + 1} " if index < 9 else "  ")
        label.append(key)
        if spec.get("label") and spec.get("label") != key:
            label.append(f" ({spec.get('label')})")
        if spec.get("input"):
            label.append(" ✎")
        if index == highlighted:
            label.stylize("reverse")
        line.append_text(label)
    return line


def _decisions(snapshot: Snapshot) -> RenderableType:
    title = f"pending decisions ({len(snapshot.decisions)})"
    if snapshot.other_requests:
        title += f"; {snapshot.other_requests} other request(s): piwf inbox"
    table = Table(title=title, title_justify="left", **TABLE_STYLE)
    table.add_column(" ", no_wrap=True, width=1)
    table.add_column("run id", no_wrap=True)
    table.add_column("node", no_wrap=True)
    table.add_column("decision", overflow="fold")
    table.add_column("choices", overflow="fold")
    for request in snapshot.decisions:
        contract = request.get("contract") or {}
        selected = request.get("request_id") == snapshot.selected_request_id
        title_text = Text(str(contract.get("title") or request.get("node_id") or ""))
        if contract.get("summary"):
            title_text.append(" — ")
            title_text.append(str(contract.get("summary")), style="dim")
        if request.get("deadline_at"):
            title_text.append(f" (timeout {_ago(request.get('deadline_at'), snapshot.taken_at)})", style="yellow")
        table.add_row(Text("▶" if selected else "", style="bold"), text(request.get("run_id")),
                      text(request.get("node_id")), title_text,
                      _choices_line(request, snapshot.choice_index if selected else None),
                      style="bold" if selected else "")
    if not snapshot.decisions:
        table.add_row("", Text("nothing to decide", style="dim"), "", "", "")
    return table


def _events(snapshot: Snapshot, width: int, narrow: bool) -> Table:
    table = Table(title="recent events", title_justify="left", **TABLE_STYLE)
    # Every column but `detail` keeps its width; detail takes what is left and is cut with an ellipsis.
    table.add_column("age", no_wrap=True, justify="right", min_width=6)
    table.add_column("run id", no_wrap=True, min_width=12 if narrow else 30)  # run ids are 30 characters
    if not narrow:
        table.add_column("workflow", no_wrap=True, overflow="ellipsis", min_width=8, max_width=20)
    table.add_column("event", no_wrap=True, min_width=12)
    table.add_column("node", no_wrap=True, overflow="ellipsis", min_width=8, max_width=16)
    table.add_column("detail", overflow="ellipsis", no_wrap=True, min_width=6)
    for event in snapshot.events[:MAX_EVENT_ROWS]:
        cells = [Text(_ago(event.created_at, snapshot.taken_at, suffix=False)), text(event.run_id)]
        if not narrow:
            cells.append(text(event.workflow))
        cells += [text(event.kind), text(event.node_id), Text(compact(event.payload, 50), style="dim")]
        table.add_row(*cells)
    if not snapshot.events:
        table.add_row(Text("no events", style="dim"), *([""] * (len(table.columns) - 1)))
    return table


def _footer(snapshot: Snapshot) -> RenderableType:
    parts: list[RenderableType] = []
    if snapshot.prompt is not None:
        prompt = Text.assemble((f"{snapshot.prompt.choice}", "bold"), " — ")
        prompt.append(snapshot.prompt.label or snapshot.prompt.input_name)
        prompt.append(": ")
        prompt.append(snapshot.prompt.buffer)
        prompt.append("▏", style="blink")
        parts.append(prompt)
        parts.append(Text("enter send  esc cancel", style="dim"))
    else:
        parts.append(Text(KEYS_HELP, style="dim"))
    if snapshot.status:
        parts.append(Text(snapshot.status, style="bold"))
    return Group(*parts)


def render(snapshot: Snapshot, width: int) -> RenderableType:
    """The whole screen for `snapshot` at `width` columns (optional columns drop below NARROW)."""
    narrow = width < NARROW
    return Group(_header(snapshot), _workers(snapshot), _runs(snapshot, narrow), _decisions(snapshot),
                 _events(snapshot, width, narrow), _footer(snapshot))
