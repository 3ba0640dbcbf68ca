"""The `piwf-top` screen as a pure function: `render(snapshot, width, height=None, state=None) -> RenderableType`.

No I/O and no clock: times are relative to `snapshot.taken_at`, so the same
snapshot and `UiState` always give the same screen (tests use a recording
console). From top to bottom:

    header     lease and epoch, writer, workers, runs by status (with the
               count of runs parked on an ambiguous effect), channel health,
               schedules with their next fire times (top/schedules.py)
    runs       the filtered, sorted run list with the selection
    decisions  pending decisions; the selected one with its numbered choices
    detail     the selected run (enter), else the recent events
    footer     the confirmation / prompt / filter line (else the keys), and
               the status line with the outcome of the last request

With a `height` (the terminal's), `plan` shares the lines out so that every
pane keeps at least its title and a row — at 80×24 nothing disappears — and
each pane is cut to its share (`Fixed`), so the footer is always on screen.
Without one, every pane gets what it wants (up to a few rows). `?` replaces
the panes between header and footer with the list of every key (`HELP`).

Everything that comes from the host is untrusted and is put into
`rich.text.Text` (see `piwf_actors.top.panes.clean`), never into markup.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from piwf_actors.cli.render import STATUS_STYLES
from piwf_actors.timefmt import relative
from piwf_actors.top.cells import NARROW, clean, line, worker_figures
from piwf_actors.top.model import Snapshot, is_ambiguous
from piwf_actors.top.panes import (
    decisions_pane,
    detail_pane,
    detail_want,
    events_pane,
    runs_pane,
)
from piwf_actors.top.schedules import schedules_line
from piwf_actors.top.state import UiState, visible_runs

FOOTER = 2
MAX_RUN_ROWS = 15  # without a height
MAX_EVENT_ROWS = 6
HELP: tuple[tuple[str, str], ...] = (
    ("j/k ↑/↓", "move the selection"), ("PgUp/PgDn", "move one page"), ("g/G", "first / last (Home/End)"),
    ("tab", "focus runs ↔ decisions"), ("enter", "runs: toggle the detail"), ("esc", "close detail, clear filter"),
    ("/", "filter id/workflow/status"), ("s", "cycle the sort order"), ("c", "cancel the selected run"),
    ("p", "pause the selected run"), ("r", "resume the selected run"), ("R", "restart an ended run"),
    ("e", "resolve ambiguous effect"), ("h/l ←/→", "highlight a choice"), ("1-9", "answer with choice N"),
    ("enter", "decisions: answer"), ("y", "confirm: send it"), ("other key", "confirm: do not send"),
    ("tab c r", "pick confirm or retry"), ("?", "this help"), ("q Ctrl-C", "quit"),
)
HINTS = {  # the key line of the footer, by focus: (wide, narrow); `?` lists every key
    "runs": ("? help  q quit  tab decisions  enter detail  / filter  s sort  c cancel  p pause  r resume  "
             "R restart  e resolve", "? help  q quit  tab pane  enter detail  / filter  s sort  c p r R e actions"),
    "decisions": ("? help  q quit  tab runs  j/k select decision  h/l select choice  enter or 1-9 answer",
                  "? help  q quit  tab runs  j/k decision  h/l choice  enter or 1-9 answer"),
}


class Fixed:
    """Exactly `height` lines of `renderable`: cut below, padded with blank lines."""

    def __init__(self, renderable: RenderableType, height: int) -> None:
        self.renderable = renderable
        self.height = height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.height <= 0:
            return
        for rendered in console.render_lines(self.renderable, options.update(height=self.height), pad=False):
            yield from rendered
            yield Segment.line()


@dataclass(frozen=True, slots=True)
class Plan:
    """Lines per pane (0: not shown); `help` replaces runs, decisions and the lower pane."""

    header: int
    runs: int
    decisions: int
    lower: int  # the detail pane, or the events
    footer: int
    help: int


# --- header -------------------------------------------------------------------------------------------


def _rate(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def header_lines(snapshot: Snapshot, width: int) -> list[Text]:
    narrow = width < NARROW
    host, now = snapshot.host, snapshot.taken_at
    lines: list[Text] = []
    if snapshot.error:
        lines.append(line(("host unreachable: ", "bold red"), (clean(snapshot.error), "bold red")))
    lease = host.get("lease") or {}
    live = bool(lease.get("live"))
    first = line(("piwf-top", "bold"), "  epoch ", (clean(host.get("epoch", "-")), "bold"), "  lease ",
                 ("live" if live else "expired", "green" if live else "bold red"))
    if lease:
        first.append(f" (heartbeat {relative(lease.get('heartbeat_at'), now)}, "
                     f"expires {relative(lease.get('expires_at'), now)})")
    if host.get("role") == "standby":
        active = host.get("active") or {}
        first.append("  standby", style="bold yellow")
        if not narrow:
            first.append(f" (active: {clean(active.get('host_id') or 'none')})")
    first.append(f"  {'pid' if narrow else 'host pid'} {clean(host.get('pid', '-'))}")
    if lease.get("host_id") and not narrow:
        first.append(f"  id {clean(lease.get('host_id'))}")
    lines.append(first)
    writer, gateway = host.get("writer") or {}, host.get("gateway") or {}
    second = line(("writer", "bold"), f"  queue depth {clean(writer.get('queue_depth', '-'))}"
                  f"  {_rate(writer.get('commits_per_s'))} commits/s  {_rate(writer.get('commands_per_s'))} commands/s")
    if not narrow:
        second.append(f"  {clean(writer.get('commits', '-'))} commits")
    if gateway:
        second.append(f"   clients {clean(gateway.get('connections'))}")
        if not narrow:
            second.append(f" connections, {clean(gateway.get('watches'))} watches")
    lines.append(second)
    lines.append(_workers_line(snapshot, narrow))
    lines.append(_runs_line(snapshot, narrow))
    channels = _channels_line(snapshot.channels)
    if channels is not None:
        lines.append(channels)
    schedules = schedules_line(snapshot.schedules, now, width)
    if schedules is not None:
        lines.append(schedules)
    return lines


def _workers_line(snapshot: Snapshot, narrow: bool) -> Text:
    workers = snapshot.host.get("workers") or {}
    idle = workers.get("idle")
    counts = [f"{len(workers.get('active') or [])} active"]
    if isinstance(idle, int):  # host.status reports idle workers as a count, without pids
        counts.append(f"{idle} idle")
    if isinstance(workers.get("max"), int):
        counts.append(f"max {workers['max']}")
    result = line(("workers", "bold"), f"  {', '.join(counts)}")
    for worker in snapshot.workers:
        result.append(f"  {worker.pid}")
        if not worker.run_id:
            result.append(" idle", style="dim")
        elif not narrow:  # narrow: the detail pane of the run names its worker
            result.append(f" {clean(worker.run_id)}")
        result.append(f" {worker_figures(worker)}", style="dim")
    if not snapshot.workers:
        result.append("  no active workers", style="dim")
    return result


def _runs_line(snapshot: Snapshot, narrow: bool) -> Text:
    result = line(("runs", "bold"))
    ambiguous = sum(1 for run in snapshot.runs if is_ambiguous(run))
    if ambiguous:
        result.append("  ")
        result.append(f"! {ambiguous} ambiguous effect{'' if ambiguous == 1 else 's'}", style="bold white on red")
        result.append(" (e resolves)", style="yellow")
    for status, count in (snapshot.host.get("runs") or {}).items():
        if narrow and not count:
            continue  # the zeros do not fit in 80 columns; the wide screen shows them dimmed
        result.append("  ")
        result.append(f"{clean(status)} {clean(count)}", style=STATUS_STYLES.get(str(status), "") if count else "dim")
    return result


def _channels_line(status: dict[str, Any]) -> Text | None:
    """Each channel profile (running or not, and why) and deliveries waiting for a person; None: none configured."""
    if not status.get("configured") and not status.get("error"):
        return None
    result = line(("channels", "bold"))
    if status.get("error"):
        result.append("  refused: ", style="red")
        result.append(clean(status["error"]))
    for entry in status.get("profiles") or []:
        result.append("  ")
        result.append(clean(entry.get("profile")), style="green" if entry.get("running") else "red")
        if not entry.get("running"):
            result.append(" (down" + (f": {clean(entry.get('error'))}" if entry.get("error") else "") + ")")
        elif entry.get("problem"):
            result.append(f" ({clean(entry['problem'])})", style="yellow")
    undelivered = status.get("undelivered") or []
    if undelivered:
        result.append(f"  {len(undelivered)} not sent yet ", style="yellow")
        result.append("(retried; piwf channel status)", style="dim")
    ambiguous = status.get("ambiguous") or []
    if ambiguous:
        result.append(f"  {len(ambiguous)} ambiguous deliver{'y' if len(ambiguous) == 1 else 'ies'} ", style="yellow")
        result.append("(piwf channel recover)", style="dim")
    return result


# --- footer and help -------------------------------------------------------------------------------------------


def footer_lines(state: UiState, width: int) -> list[Text]:
    """The key (or confirmation, prompt, filter) line and the status line."""
    if state.confirm is not None:
        confirm = state.confirm
        what = clean(confirm.command.what)
        room = max(10, width - len("? y/n"))
        if len(what) > room:  # the question may be cut, never its "? y/n"
            what = what[: room - 1] + "…"
        second = line(("y sends it, any other key cancels", "dim"))
        if len(confirm.options) > 1:
            second.append("  tab or " + "/".join(option.hotkey for option in confirm.options) + " switches:",
                          style="dim")
            for index, option in enumerate(confirm.options):
                second.append(" ")
                second.append(f"{option.hotkey} {option.label}", style="reverse" if index == confirm.index else "dim")
        return [line((f"{what}? y/n", "bold black on yellow")), second]
    if state.prompt is not None:
        first = line((clean(state.prompt.choice), "bold"), " — ", clean(state.prompt.label or state.prompt.input_name),
                     ": ", clean(state.prompt.buffer), ("▏", "blink"), ("  enter: confirm  esc: cancel", "dim"))
    elif state.filtering:
        first = line(("/", "bold cyan"), clean(state.filter_text), ("▏", "blink"),
                     ("  filter by run id prefix, workflow or status  enter: keep  esc: clear", "dim"))
    elif state.help_open:
        first = line(("any key closes the help, q quits", "dim"))
    else:
        first = line((HINTS[state.focus][width < NARROW], "dim"))
    return [first, line((clean(state.status), "bold"))]


def help_overlay(width: int, lines: int) -> RenderableType:
    """Every key; in two columns when one does not fit in `lines`."""
    columns = 1 if lines - 1 >= len(HELP) or width < 60 else 2
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_header=False, show_edge=False)
    for _ in range(columns):
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    rows = -(-len(HELP) // columns)
    for row in range(rows):
        cells: list[str] = []
        for column in range(columns):
            index = column * rows + row
            cells += list(HELP[index]) if index < len(HELP) else ["", ""]
        table.add_row(*cells)
    return Group(line((" keys ", "bold reverse"), ("  every action asks y/n before it is sent", "dim")), table)


# --- layout -----------------------------------------------------------------------------------------------------


def plan(snapshot: Snapshot, state: UiState, width: int, height: int | None = None) -> Plan:
    """How many lines each pane gets (see the module docstring)."""
    header = len(header_lines(snapshot, width))
    runs_want = 2 + max(1, len(visible_runs(snapshot, state)))
    decisions_want = 2 + len(snapshot.decisions) if snapshot.decisions else 1
    lower_want = detail_want(snapshot, state) if state.detail_open else 2 + max(1, len(snapshot.events))
    if height is None:
        if state.help_open:
            return Plan(header, 0, 0, 0, FOOTER, 1 + len(HELP))
        lower = lower_want if state.detail_open else min(lower_want, 2 + MAX_EVENT_ROWS)
        return Plan(header, min(runs_want, 2 + MAX_RUN_ROWS), decisions_want, lower, FOOTER, 0)
    body = max(0, height - header - FOOTER)
    if state.help_open:
        return Plan(header, 0, 0, 0, FOOTER, body)
    decisions = min(decisions_want, max(min(3, decisions_want), body // 4), body)
    rest = body - decisions
    # The detail may take what the run list can spare (it keeps 2/5); the events take at most a third.
    lower = min(lower_want, rest - min(runs_want, max(5, rest * 2 // 5)) if state.detail_open else max(3, rest // 3))
    runs = rest - lower
    if runs < 3:  # a tiny terminal: the run list keeps its title, column names and one row
        runs = min(3, rest)
        lower = rest - runs
    spare = runs - runs_want
    if spare > 0:  # a short run list leaves room to the others
        runs = runs_want
        grow = min(spare, max(0, lower_want - lower))
        lower, spare = lower + grow, spare - grow
        grow = min(spare, max(0, decisions_want - decisions))
        decisions, spare = decisions + grow, spare - grow
        lower += spare  # blank lines at the bottom, not between the panes
    return Plan(header, runs, decisions, lower, FOOTER, 0)


def _fixed(parts: Iterable[tuple[RenderableType, int]]) -> list[RenderableType]:
    return [Fixed(renderable, lines) for renderable, lines in parts if lines > 0]


def render(snapshot: Snapshot, width: int, height: int | None = None, state: UiState | None = None) -> RenderableType:
    """The whole screen for `snapshot` and the console state at `width` × `height` (see `plan`)."""
    state = state or UiState()
    layout = plan(snapshot, state, width, height)
    parts: list[tuple[RenderableType, int]] = [(Group(*header_lines(snapshot, width)), layout.header)]
    if layout.help:
        parts.append((help_overlay(width, layout.help), layout.help))
    else:
        lower = detail_pane(snapshot, state, width, layout.lower) if state.detail_open else \
            events_pane(snapshot, width, layout.lower)
        parts += [(runs_pane(snapshot, state, width, layout.runs), layout.runs),
                  (decisions_pane(snapshot, state, width, layout.decisions), layout.decisions),
                  (lower, layout.lower)]
    parts.append((Group(*footer_lines(state, width)), layout.footer))
    return Group(*_fixed(parts))
