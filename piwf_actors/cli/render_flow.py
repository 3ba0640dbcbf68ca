"""What `piwf show` adds for waits, fan-out and flow control (run.get's flow keys: docs/protocol.md).

- a child run's place: `child 3 of run_… node m` (`parent_run_id`, `parent_node_id`, `child_index`);
- the open waits, one line each, in the words of workflows/graph_run.py's `wait_words` (the ones
  `piwf graph` and piwf-top's tree use), with zoned times: a sleep with its wake-up time, a message
  wait with its topic and timeout clock, a children wait with how many are still open;
- the mailbox when messages wait in it (`go: 2 pending`);
- the children table: index, run id, workflow, status, with the counts by status and `… and N
  more` beyond the ones run.get lists.

Host text goes into `rich.text.Text` only (see cli/render.py). Times are relative to a given `now`
(default: the clock), so a render can be tested with a fixed one.
"""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from piwf_actors.cli.render_text import id_column, one_line, short_ids, status_text, text
from piwf_actors.workflows.graph_run import wait_words


def child_of(view: dict[str, Any]) -> str | None:
    """`child 3 of run_… node m` for a child run; None for another (a restart's parent is not this)."""
    if not view.get("parent_node_id") or not view.get("parent_run_id"):
        return None
    index = view.get("child_index")
    return (f"child{'' if index is None else f' {index}'} of {view['parent_run_id']} "
            f"node {view['parent_node_id']}")


def place_rows(view: dict[str, Any]) -> list[tuple[str, Text]]:
    """The summary's rows on where the run stands among others: its parent (a child's place, or the
    run a restart restarted), the child run it was copied from, a priority other than 0, its limit key."""
    rows = []
    if view.get("parent_run_id"):
        rows.append(("parent", text(child_of(view) or view["parent_run_id"])))
    for key, label in (("copied_from", "copied from"), ("priority", "priority"), ("concurrency_key", "limit key")):
        if view.get(key):
            rows.append((label, text(view[key])))
    return rows


def summary_rows(view: dict[str, Any], now: float | None = None) -> list[tuple[str, Text]]:
    """The summary's rows on what the run waits for: its open waits and its mailbox."""
    now = time.time() if now is None else now
    rows = [("wait", text(f"{wait.get('node_id')}: {wait_words(wait, now, zoned=True)}"))
            for wait in view.get("waits") or []]
    mailbox = view.get("mailbox") or {}
    if mailbox:
        rows.append(("mailbox", text(", ".join(f"{topic}: {n} pending" for topic, n in mailbox.items()))))
    return rows


def children_table(view: dict[str, Any]) -> Table | None:
    """The run's children (those run.get lists: the first 100), titled with the counts by status."""
    children = view.get("children")
    if not isinstance(children, dict) or not children.get("total"):
        return None
    runs = [child for child in children.get("runs") or [] if isinstance(child, dict)]
    counts = "  ".join(f"{status} {n}" for status, n in sorted((children.get("by_status") or {}).items()) if n)
    table = Table(title=f"children ({children['total']}: {counts})", title_justify="left")
    table.add_column("node", no_wrap=True)
    table.add_column("index", justify="right", no_wrap=True)
    id_column(table, "run id")
    table.add_column("workflow")
    table.add_column("status", no_wrap=True)
    table.add_column("error")
    short = short_ids(child.get("run_id") for child in runs)
    for child in runs:
        status = status_text(child.get("status"))
        if child.get("copied_from"):
            status.append(" (copied)", style="dim")
        table.add_row(text(child.get("parent_node_id")), text(child.get("child_index")),
                      text(short.get(str(child.get("run_id")), child.get("run_id"))), one_line(child.get("workflow")),
                      status, one_line(child.get("error_code"), "red"))
    more = int(children["total"]) - len(runs)
    if more > 0:
        # A command to copy: one line, however narrow the table above it (ids are shown by their ends).
        table.caption = Text(f"… and {more} more (all of them: piwf list --parent {view.get('run_id')} --limit "
                             f"{int(children['total'])})", style="dim", no_wrap=True, overflow="ignore")
        table.caption_justify = "left"
    return table
