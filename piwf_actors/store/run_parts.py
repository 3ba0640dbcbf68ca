"""Which parts of a run's view have rows at all, read in one statement.

`run.get` and every event of a `run` watch show a run with its waits, effects,
interactive requests, schedule fire, pending mailbox and child runs
(`queries.run_view`). Most runs have none of them — a trivial run's view
changes ~6 times and each time it is built again — so the view first asks
which of those tables hold a row of the run (an index probe each, in the
run's own row query) and reads only those. The answer is read in the same
snapshot as the parts it skips, so a view still shows one committed state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piwf_actors.store.reader import StoreReader


@dataclass(frozen=True, slots=True)
class RunParts:
    """Whether the run has any row of each part of its view (True: read that part)."""

    waits: bool = True  # run_wait, any status (a node's `wait_kind`, the open `waits`)
    effects: bool = True
    requests: bool = True  # interactive_request (`waiting`, a node's `answer`)
    schedule: bool = True  # schedule_fire
    mailbox: bool = True  # run_message, pending
    children: bool = True  # runs whose parent is this run, by a node (not its restarts)


#: Read every part: what a caller that did not probe uses.
ALL_PARTS = RunParts()

#: The run's row and its parts: `SELECT *` then one flag per part, in RunParts' order.
_ROW_AND_PARTS = """SELECT run.*,
    EXISTS(SELECT 1 FROM run_wait w WHERE w.run_id = run.run_id),
    EXISTS(SELECT 1 FROM effect e WHERE e.run_id = run.run_id),
    EXISTS(SELECT 1 FROM interactive_request r WHERE r.run_id = run.run_id),
    EXISTS(SELECT 1 FROM schedule_fire f WHERE f.run_id = run.run_id),
    EXISTS(SELECT 1 FROM run_message m WHERE m.run_id = run.run_id AND m.status = 'pending'),
    EXISTS(SELECT 1 FROM run c WHERE c.parent_run_id = run.run_id AND c.parent_node_id IS NOT NULL)
  FROM run WHERE run.run_id = ?"""
_PARTS = 6


def run_row_and_parts(reader: StoreReader, run_id: str) -> tuple[dict[str, Any], RunParts] | None:
    """The run's full row and which parts of its view have rows; None if there is no such run. Call it
    inside the snapshot that reads the parts. A file too old to have every part's table (read offline)
    gets the row alone and ALL_PARTS: each part's own read knows what to do without its table."""
    try:
        cursor = reader.conn.execute(_ROW_AND_PARTS, (run_id,))
    except reader.engine.missing_table_errors:
        cursor = reader.conn.execute("SELECT * FROM run WHERE run_id = ?", (run_id,))
        row = cursor.fetchone()
        return None if row is None else (dict(zip([d[0] for d in cursor.description], row, strict=True)), ALL_PARTS)
    row = cursor.fetchone()
    if row is None:
        return None
    columns = [d[0] for d in cursor.description][:-_PARTS]
    flags = [bool(flag) for flag in row[-_PARTS:]]
    return dict(zip(columns, row[:-_PARTS], strict=True)), RunParts(*flags)
