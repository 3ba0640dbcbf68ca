"""Rich renderables for `piwf`: run tables, one run, events, host and state status.

Everything that comes from the host (ids, names, outputs, error messages)
is untrusted text: it goes into `rich.text.Text`, never into a markup
string, so a `[red]` in a workflow's output is shown as typed.

Tables never wrap ids: an id column is `no_wrap` and shows an id the host
made by its random end (`short_ids`: `…c3e9hbn6w0ab`, the same in every
table), which names it among all of the host's ids; `piwf` takes it back
wherever it takes an id, and `--json` prints the full ids.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors.cli import render_flow
from piwf_actors.cli.render_text import (  # noqa: F401  (re-exported: callers use render.X)
    STATUS_STYLES,
    STDERR_TAIL_LINES,
    TERMINAL,
    answered_by,
    compact,
    duration,
    error_text,
    id_column,
    moment,
    one_line,
    relative,
    request_clock,
    run_duration,
    short_ids,
    status_text,
    text,
    to_json,
    when,
)


def kv_table(title: str | None = None) -> Table:
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
    id_column(table, "run id")
    # On a narrow terminal the workflow, created and error columns give way first (cut with "…").
    table.add_column("workflow")
    table.add_column("status", no_wrap=True)
    table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("created")
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("error")
    short = short_ids(run.get("run_id") for run in runs)
    now = time.time()
    for run in runs:
        table.add_row(text(short.get(str(run.get("run_id")), run.get("run_id"))), one_line(run.get("workflow")),
                      status_text(run.get("status"), run.get("park_reason")), text(run.get("steps")),
                      one_line(when(run.get("created_at"))), text(run_duration(run, now)),
                      one_line(run.get("error_code"), "red"))
    if not runs:
        table.add_row(Text("no runs", style="dim"), "", "", "", "", "", "")
    return table


def run_summary(view: dict[str, Any]) -> Table:

    table = kv_table()
    table.add_row("run", text(view.get("run_id")))
    table.add_row("workflow", text(view.get("workflow")))
    status = status_text(view.get("status"), view.get("park_reason"))
    if view.get("park_detail"):
        status.append(f" {view['park_detail']}", style="dim")
    for flag in ("pause_requested", "cancel_requested"):
        if view.get(flag):
            status.append(f" [{flag.replace('_', ' ')}]", style="dim")
    if view.get("queue_reason"):  # why a queued run does not start yet (a full limit, a paused parent)
        status.append(f" — {view['queue_reason']}", style="yellow")
    table.add_row("status", status)
    table.add_row("revision", text(view.get("revision")))
    for label, value in render_flow.place_rows(view):  # parent, priority, limit key
        table.add_row(label, value)
    for key, label in (("session_id", "session"), ("project_path", "project"), ("current_node", "current node")):
        if view.get(key):
            table.add_row(label, text(view[key]))
    table.add_row("steps", text(view.get("steps")))
    table.add_row("created", text(when(view.get("created_at"))))
    table.add_row("updated", text(when(view.get("updated_at"))))
    if view.get("finished_at"):
        table.add_row("finished", text(f"{when(view['finished_at'])} (took {run_duration(view)})"))
    table.add_row("input", text(compact(view.get("input"), 200)))
    for waiting in view.get("waiting") or []:
        table.add_row("waiting on", text(f"{waiting.get('node_id')} ({waiting.get('kind')}): "
                                         + _waiting_clock(waiting)))
    for label, value in render_flow.summary_rows(view):
        table.add_row(label, value)
    if view.get("output") is not None:
        table.add_row("output", text(compact(view.get("output"), 200)))
    if view.get("error"):
        table.add_row("error", error_text(view["error"]))
    return table


def _waiting_clock(waiting: dict[str, Any]) -> str:
    """run.get's `waiting` entry: what is left of its deadline, and whether the clock runs."""
    if waiting.get("clock") == "paused":
        return f"paused, {duration(waiting.get('remaining_s'))} left when it resumes"
    if waiting.get("clock") == "running":
        if isinstance(waiting.get("deadline_at"), (int, float)):
            return f"until {moment(waiting['deadline_at'])}"
        return f"{duration(waiting.get('remaining_s'))} left"
    return "no deadline"


def nodes_table(nodes: list[dict[str, Any]]) -> Table:
    table = Table(title="nodes", title_justify="left")
    table.add_column("node", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("attempts", justify="right")
    # Which host executed each node's attempts (a runner host's id, or the active host's: docs/runners.md);
    # shown when the view says so (hosts before schema v10 recorded none).
    executed = any(node.get("executors") for node in nodes)
    if executed:
        table.add_column("executed by", overflow="fold")
    table.add_column("output / error", overflow="fold")
    for node in nodes:
        detail = error_text(node["error"]) if node.get("error") else text(compact(node.get("output")))
        if node.get("answer"):  # an answer's output says who gave it: a person, a channel user, the timeout
            detail.append(f" · by {answered_by(node['answer'].get('by'))}", style="dim")
        by = [text(", ".join(node.get("executors") or []) or "-")] if executed else []
        table.add_row(text(node.get("node_id")), text(node.get("status")), text(node.get("attempts")), *by, detail)
    if not nodes:
        table.add_row(Text("no node started yet", style="dim"), "", "", *([""] if executed else []), "")
    return table


def provenance_details(provenance: Any) -> str:
    """What the provenance holds beyond `answered_by`'s words: client, session, process, chat, deadline."""
    if not isinstance(provenance, dict):
        return ""
    if provenance.get("kind") == "timeout":
        return f"deadline {when(provenance.get('deadline_at'))}" if provenance.get("deadline_at") else ""
    parts = []
    for key, label in (("client_id", "client"), ("session_id", "session"), ("pid", "pid"), ("uid", "uid"),
                       ("chat_id", "chat"), ("profile", "profile")):
        if provenance.get(key) is not None:
            parts.append(f"{label} {provenance[key]}")
    return ", ".join(parts)


def answers_table(nodes: list[dict[str, Any]]) -> Table | None:
    answered = [node for node in nodes if node.get("answer")]
    if not answered:
        return None
    table = Table(title="answers", title_justify="left")
    for column in ("node", "answer", "answered by", "details", "at"):
        table.add_column(column, overflow="fold")
    for node in answered:
        by = node["answer"].get("by")
        table.add_row(text(node.get("node_id")), text(compact(node.get("output"))), text(answered_by(by)),
                      text(provenance_details(by)), text(when(node["answer"].get("at"))))
    return table


def effects_table(effects: list[dict[str, Any]]) -> Table:
    table = Table(title="effects", title_justify="left")
    id_column(table, "effect id")
    for column in ("node", "status", "resolution"):
        table.add_column(column, overflow="fold")
    short = short_ids(effect.get("effect_id") for effect in effects)
    for effect in effects:
        table.add_row(text(short.get(str(effect.get("effect_id")), effect.get("effect_id"))),
                      *(text(effect.get(k)) for k in ("node_id", "status", "resolution")))
    return table


def is_shell_output(output: Any) -> bool:
    """A shell node's output: `{stdout, stderr, exit_code, duration_ms}`."""
    return isinstance(output, dict) and {"stdout", "stderr", "exit_code"} <= set(output)


def tail(value: Any, lines: int) -> str:
    """The last `lines` lines of a text (a count of the lines left out first)."""
    all_lines = str(value or "").rstrip("\n").splitlines()
    kept = all_lines[-lines:]
    cut = len(all_lines) - len(kept)
    return (f"… {cut} earlier line(s)\n" if cut else "") + "\n".join(kept)


def failure_details(view: dict[str, Any]) -> list[RenderableType]:
    """What went wrong, beyond one line: the run's traceback (the frames of the workflow code that raised)
    and, for each failed shell node, its exit code and the end of its stderr."""
    parts: list[RenderableType] = []
    error = view.get("error") if isinstance(view.get("error"), dict) else {}
    shown_traceback = error.get("traceback") if error else None
    if shown_traceback:
        parts.append(Text("traceback", style="bold red"))
        parts.append(Text(str(shown_traceback).rstrip("\n")))
    for node in view.get("nodes") or []:
        if node.get("status") not in ("failed", "timed_out"):
            continue
        node_error = node.get("error") or {}
        trace = node_error.get("traceback") if isinstance(node_error, dict) else None
        if trace and trace != shown_traceback:
            parts.append(Text(f"node {node.get('node_id')}: traceback", style="bold red"))
            parts.append(Text(str(trace).rstrip("\n")))
        output = node.get("output")
        if is_shell_output(output):
            parts.append(Text(f"node {node.get('node_id')}: exit code {output.get('exit_code')}"
                              + ("; stderr (last lines):" if output.get("stderr") else "; stderr is empty"),
                              style="bold red"))
            if output.get("stderr"):
                parts.append(Text(tail(output["stderr"], STDERR_TAIL_LINES)))
    return parts


def run_view(view: dict[str, Any] | None) -> RenderableType:

    if view is None:
        return Text("the run no longer exists", style="red")
    parts: list[RenderableType] = [run_summary(view), nodes_table(view.get("nodes") or [])]
    answers = answers_table(view.get("nodes") or [])
    if answers is not None:
        parts.append(answers)
    children = render_flow.children_table(view)
    if children is not None:
        parts.append(children)
    if view.get("effects"):
        parts.append(effects_table(view["effects"]))
    parts.extend(failure_details(view))
    return Group(*parts)


# --- events ---------------------------------------------------------------------------


def event_payload(event: dict[str, Any], limit: int) -> str:
    """An event's payload in one line; an answer's event (`interaction_settled`) leads with who gave it."""
    payload = event.get("payload")
    if isinstance(payload, dict) and "answered_by" in payload:
        rest = {key: value for key, value in payload.items() if key != "answered_by"}
        return f"by {answered_by(payload['answered_by'])} {compact(rest, limit)}".rstrip()
    return compact(payload, limit)


def events_table(events: list[dict[str, Any]]) -> Table:
    table = Table()
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("node", no_wrap=True)
    table.add_column("payload")  # the column gives way first; its text stays one line (--json has it all)
    for event in events:
        table.add_row(text(event.get("seq")), text(when(event.get("created_at"), precise=True)),
                      text(event.get("kind")), text(event.get("node_id")),
                      one_line(event_payload(event, 400)))
    return table


def event_line(event: dict[str, Any]) -> Text:
    line = Text()
    line.append(f"{event.get('seq', ''):>5} ", style="dim")
    line.append(when(event.get("created_at"), precise=True) + " ")
    line.append(f"{event.get('kind', '')!s:<18}", style="bold")
    line.append(f" {event.get('node_id') or '-'}")
    payload = event_payload(event, 160)
    if payload:
        line.append(f" {payload}", style="dim")
    return line
