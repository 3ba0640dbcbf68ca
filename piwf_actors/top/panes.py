"""The panes of the `piwf-top` screen, each drawn into a given number of lines (pure, no I/O, no clock).

`runs_pane`, `decisions_pane`, `events_pane` and `detail_pane` take the
snapshot, the console state, the width and how many lines they may use, and
return a renderable of at most that many lines: every row is one line (cells
never wrap; they are cut with `…`), and a list longer than its pane shows a
window around the selection. `piwf_actors.top.render` decides the line
budgets; host values become text only through `piwf_actors.top.cells`.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors import timefmt
from piwf_actors.top.cells import (
    NARROW,
    SHORT_ID,
    cell,
    clean,
    compact,
    line,
    run_id_cell,
    status_cell,
    worker_figures,
)
from piwf_actors.top.model import Snapshot, decision_choices, is_ambiguous
from piwf_actors.top.state import UiState, duration, selected_run, visible_runs
from piwf_actors.top.tree import run_tree


def pane_title(name: str, focused: bool) -> Text:
    return line((f" {name} ", "bold reverse" if focused else "bold"))


def window(count: int, selected: int, rows: int) -> range:
    """The indexes shown when `rows` of `count` fit: the selection stays in view, near the middle."""
    if rows <= 0:
        return range(0)
    start = min(max(0, selected - rows // 2), max(0, count - rows))
    return range(start, min(count, start + rows))


def _table() -> Table:
    return Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold", show_edge=False)


# --- runs -------------------------------------------------------------------------------------------------


def runs_pane(snapshot: Snapshot, state: UiState, width: int, lines: int) -> RenderableType:
    narrow = width < NARROW
    runs = visible_runs(snapshot, state)
    ids = [r.get("run_id") for r in runs]
    selected = ids.index(state.selected_run_id) if state.selected_run_id in ids else 0
    title = pane_title("runs", state.focus == "runs")
    title.append(f" {selected + 1 if runs else 0}/{len(runs)}")
    if state.filter_text or state.filtering:
        title.append(f" of {len(snapshot.runs)}  filter /", style="cyan")
        title.append(clean(state.filter_text), style="cyan")
    title.append(f"  sort {state.sort}", style="dim")
    if lines <= 1:
        return Group(*[title][:lines])
    table = _table()
    table.add_column(" ", width=1, no_wrap=True)
    table.add_column("run id", no_wrap=True, min_width=SHORT_ID if narrow else 30)
    table.add_column("workflow", max_width=30)
    table.add_column("status", max_width=26)
    table.add_column("node", max_width=20)
    if not narrow:
        table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("dur", justify="right", no_wrap=True)
    table.add_column("age", justify="right", no_wrap=True)
    if not narrow:
        table.add_column("updated", justify="right", no_wrap=True)
    focused = state.focus == "runs"
    for index in window(len(runs), selected, lines - 2):
        run = runs[index]
        took = duration(run, snapshot.taken_at)
        mark = "▶" if index == selected else ("!" if is_ambiguous(run) else "")
        cells = [Text(mark, style="bold"), run_id_cell(run.get("run_id"), narrow), cell(run.get("workflow")),
                 status_cell(run.get("status"), run.get("park_reason")), cell(run.get("current_node"))]
        if not narrow:
            cells.append(cell(run.get("steps")))
        cells += [Text("" if took is None else timefmt.duration(took)),
                  Text(timefmt.relative(run.get("created_at"), snapshot.taken_at, suffix=False))]
        if not narrow:
            cells.append(Text(timefmt.relative(run.get("updated_at"), snapshot.taken_at)))
        style = ("reverse" if focused else "bold") if index == selected else ""
        table.add_row(*cells, style=style)
    if not runs:
        empty = "no runs" if not snapshot.runs else "no run matches the filter (esc clears it)"
        table.add_row("", Text(empty, style="dim"), *([""] * (len(table.columns) - 2)))
    return Group(title, table)


# --- decisions -------------------------------------------------------------------------------------------


def choices_line(request: dict[str, Any], highlighted: int | None) -> Text:
    result = line("    ")
    for index, (key, spec) in enumerate(decision_choices(request)):
        if index:
            result.append("  ")
        label = Text(f"{index + 1} " if index < 9 else "  ")
        label.append(clean(key))
        if spec.get("label") and spec.get("label") != key:
            label.append(f" ({clean(spec.get('label'))})")
        if spec.get("input"):
            label.append(" ✎")
        if index == highlighted:
            label.stylize("reverse")
        result.append_text(label)
    return result


def decisions_pane(snapshot: Snapshot, state: UiState, width: int, lines: int) -> RenderableType:
    narrow = width < NARROW
    decisions = snapshot.decisions
    title = pane_title("decisions", state.focus == "decisions")
    title.append(f" ({len(decisions)})")
    if snapshot.other_requests:
        title.append(f"  {snapshot.other_requests} other request(s): piwf inbox", style="dim")
    if not decisions:
        title.append("  nothing to decide", style="dim")
    if lines <= 1 or not decisions:
        return Group(*[title][:lines])
    ids = [r.get("request_id") for r in decisions]
    selected = ids.index(state.selected_request_id) if state.selected_request_id in ids else 0
    # The selected decision takes two lines (its choices below it); the others one.
    rows: list[RenderableType] = [title]
    for index in window(len(decisions), selected, max(1, lines - 2)):
        request = decisions[index]
        contract = request.get("contract") or {}
        entry = line(("▶ " if index == selected else "  ", "bold"), run_id_cell(request.get("run_id"), narrow), "  ",
                     Text(clean(request.get("node_id")), style="cyan"), "  ",
                     Text(clean(contract.get("title") or request.get("node_id"))))
        if contract.get("summary"):
            entry.append(" — ")
            entry.append(clean(contract.get("summary")), style="dim")
        if request.get("paused_remaining_s") is not None:
            # The run is paused: its deadline stands still (nobody can answer a paused run).
            entry.append(f" (paused, {timefmt.duration(request['paused_remaining_s'])} left)", style="dim")
        elif request.get("deadline_at"):
            entry.append(f" (timeout {timefmt.relative(request.get('deadline_at'), snapshot.taken_at)})", style="yellow")
        if index == selected:
            entry.stylize("bold")
        rows.append(entry)
        if index == selected and len(rows) < lines:
            rows.append(choices_line(request, state.choice_index))
    return Group(*rows[:lines])


# --- events ----------------------------------------------------------------------------------------------


def events_pane(snapshot: Snapshot, width: int, lines: int) -> RenderableType:
    narrow = width < NARROW
    title = pane_title("events", False)
    title.append(" of the newest runs", style="dim")
    if lines <= 1:
        return Group(*[title][:lines])
    table = _table()
    table.add_column("age", justify="right", no_wrap=True, min_width=6)
    table.add_column("run id", no_wrap=True, min_width=SHORT_ID if narrow else 30)
    if not narrow:
        table.add_column("workflow", max_width=20)
    table.add_column("event", min_width=12)
    table.add_column("node", max_width=16)
    table.add_column("detail", min_width=6, ratio=1)
    for event in snapshot.events[: max(0, lines - 2)]:
        cells = [Text(timefmt.relative(event.created_at, snapshot.taken_at, suffix=False)),
                 run_id_cell(event.run_id, narrow)]
        if not narrow:
            cells.append(cell(event.workflow))
        cells += [cell(event.kind), cell(event.node_id), cell(compact(event.payload), style="dim")]
        table.add_row(*cells)
    if not snapshot.events:
        table.add_row(Text("no events", style="dim"), *([""] * (len(table.columns) - 1)))
    return Group(title, table)


# --- detail of the selected run ------------------------------------------------------------------------------


def _error_line(error: Any) -> Text:
    if isinstance(error, dict):
        return cell(f"{clean(error.get('code'))}: {clean(error.get('message'))}", style="red")
    return cell(error, style="red")


def _traceback_lines(error: Any) -> list[str]:
    """The run error's traceback (a string in `error.traceback`; older hosts send none) as display lines."""
    traceback = error.get("traceback") if isinstance(error, dict) else None
    if not isinstance(traceback, str) or not traceback.strip():
        return []
    return [clean(text).rstrip() for text in traceback.rstrip("\n").split("\n")]


def detail_want(snapshot: Snapshot, state: UiState) -> int:
    """Lines the detail pane would use with room enough."""
    view = _view(snapshot, state)
    if view is None:
        return 2
    traceback = _traceback_lines(view.get("error"))
    return (2 + bool(view.get("park_reason")) + len(_flow_lines(view)) + bool(view.get("error"))
            + (1 + len(traceback) if traceback else 0) + 1
            + max(1, len(run_tree(view, snapshot.taken_at, snapshot.detail_graph)[0]))
            + len(view.get("effects") or []))


def _flow_lines(view: dict[str, Any]) -> list[Text]:
    """Why a queued run does not start (run.get's `queue_reason`; run.list rows do not have it). What a
    parked run waits for is in its tree, under the node that waits."""
    if view.get("queue_reason"):
        return [line(("queued ", "bold"), cell(view.get("queue_reason"), "yellow"))]
    return []


def _view(snapshot: Snapshot, state: UiState) -> dict[str, Any] | None:
    if snapshot.detail is None or snapshot.detail_run_id != state.selected_run_id:
        return None
    return snapshot.detail


def detail_pane(snapshot: Snapshot, state: UiState, width: int, lines: int) -> RenderableType:
    """The selected run: status and revision, park reason, queue reason, error and traceback, ambiguous
    effects, and its tree: the nodes with what they did, their open waits and children (top/tree.py)."""
    run = selected_run(snapshot, state)
    view = _view(snapshot, state)
    title = pane_title("detail", False)
    title.append(" ")
    title.append(clean(state.selected_run_id or "no run selected"), style="bold")
    if view is None:
        note = "reading run.get…" if run is not None else ""
        return Group(*[title, line((note, "dim"))][:lines])
    title.append("  ")
    title.append(clean(view.get("workflow")))
    title.append("  ")
    title.append_text(status_cell(view.get("status"), view.get("park_reason")))
    about = line(("rev ", "dim"), clean(view.get("revision")), ("  steps ", "dim"), clean(view.get("steps")))
    if view.get("current_node"):
        about.append("  node ", style="dim")
        about.append(clean(view.get("current_node")), style="cyan")
    for worker in snapshot.workers:
        if worker.run_id == view.get("run_id"):
            about.append(f"  worker {worker.pid} {worker_figures(worker)}", style="dim")
    if view.get("pause_requested"):
        about.append("  pause requested", style="yellow")
    if view.get("cancel_requested"):
        about.append("  cancel requested", style="magenta")
    top: list[Text] = [title, about]
    if view.get("park_reason"):
        park = line(("park ", "bold"), (clean(view.get("park_reason")), "yellow"))
        if view.get("park_detail"):
            park.append("  ")
            park.append(clean(view.get("park_detail")))
        top.append(park)
    top += _flow_lines(view)
    error = view.get("error")
    if error:
        top.append(line(("error ", "bold red"), _error_line(error)))
    effects = [e for e in view.get("effects") or [] if isinstance(e, dict)]
    effects.sort(key=lambda e: e.get("status") != "ambiguous")  # ambiguous first: they need a person
    effect_lines = []
    for effect in effects:
        ambiguous = effect.get("status") == "ambiguous"
        entry = line(("effect ", "bold"), cell(effect.get("effect_id")), "  ", cell(effect.get("node_id"), "cyan"),
                     "  ", cell(effect.get("status"), "bold white on red" if ambiguous else ""))
        if ambiguous:
            entry.append("  e resolves: confirm or retry", style="yellow")
        elif effect.get("resolution"):
            entry.append(f"  {clean(effect.get('resolution'))}", style="dim")
        effect_lines.append(entry)
    room = max(0, lines - len(top))
    shown_effects = effect_lines[: max(min(len(effect_lines), room // 3),
                                       sum(e.get("status") == "ambiguous" for e in effects))][:room]
    room -= len(shown_effects)
    tree, here = run_tree(view, snapshot.taken_at, snapshot.detail_graph)
    traceback = _traceback_lines(error)
    # The traceback's last lines (where it failed) and the nodes share what is left.
    traceback_room = 0
    if traceback and room > 2:
        traceback_room = min(1 + len(traceback), max(3, room // 2, room - 1 - max(1, len(tree))))
    node_room = room - traceback_room
    parts: list[RenderableType] = [*top]
    if traceback_room:
        kept = traceback[len(traceback) - (traceback_room - 1):] if traceback_room > 1 else []
        heading = line(("traceback", "bold red"))
        if len(kept) < len(traceback):
            heading.append(f" (last {len(kept)} of {len(traceback)} lines)", style="dim")
        parts.append(heading)
        parts += [line((text, "red")) for text in kept]
    parts += shown_effects
    if node_room > 0:
        parts.append(_tree_part(tree, here, node_room))
    return Group(*parts)


def _tree_part(tree: list[Text], here: int | None, rows: int) -> RenderableType:
    """The tree under a `nodes` heading in `rows` lines; when it does not fit, the lines around where the
    run is (else its last lines, where a finished run ended)."""
    heading = line(("nodes", "bold"))
    if not tree:
        return Group(*[heading, line(("no node attempt recorded yet", "dim"))][:rows])
    shown = window(len(tree), len(tree) - 1 if here is None else here, rows - 1)
    if len(shown) < len(tree):
        heading.append(f" (lines {shown.start + 1}-{shown.stop} of {len(tree)})", style="dim")
    return Group(*[heading, *(tree[index] for index in shown)][:rows])
