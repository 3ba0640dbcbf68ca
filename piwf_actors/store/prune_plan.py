"""The prune plan: which terminal runs, events and blobs `state.prune` would remove, on either engine.

`plan_prune` reads through whatever transaction its connection holds: the
read side (`prune_plan`, a dry run from one snapshot) and the writer's
`state.prune` (`store/commands/state.py`, inside its own write transaction)
call the same function, so a dry run and the prune it previews select runs
by the same rule. Deleting is the writer's job alone; nothing here writes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import Rejected
from piwf_actors.paths import DatabaseLocation
from piwf_actors.statuses import LIVE_SQL, TERMINAL_SQL
from piwf_actors.store.engines.base import engine_of
from piwf_actors.store.schema import BLOB_PREFIX_CHARS
from piwf_actors.store.snapshot import as_location, read_snapshot

#: Every column that points at a blob: (table, the row's own key column, blob column).
#: Prune frees a blob only when none of these references it any more; extend
#: this list when a new column starts to hold a sha256, and give the column a
#: digest-prefix index like those of `schema.V5_INDEXES` (prune looks it up).
BLOB_REFERENCES: tuple[tuple[str, str, str], ...] = (
    ("run", "run_id", "source_sha256"),
    ("run", "run_id", "graph_sha256"),
    ("run", "run_id", "input_sha256"),
    ("run", "run_id", "output_sha256"),
    ("node_attempt", "attempt_id", "output_sha256"),
    ("effect", "effect_id", "output_sha256"),
    ("interactive_request", "request_id", "contract_sha256"),
    ("run_wait", "wait_id", "result_sha256"),
    ("run_message", "message_id", "payload_sha256"),
)


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """What pruning terminal runs finished before `before` would remove."""

    before: float
    run_ids: list[str]
    remaining: int  # eligible runs left for a later prune (beyond the limit)
    event_count: int
    event_bytes: int
    blob_shas: list[str]  # blobs that no surviving row references
    blob_bytes: int

    def summary(self, max_ids: int | None = None) -> dict[str, Any]:
        ids = self.run_ids if max_ids is None else self.run_ids[:max_ids]
        return {"before": self.before, "runs": ids, "run_count": len(self.run_ids), "remaining": self.remaining,
                "event_count": self.event_count, "blob_count": len(self.blob_shas), "bytes": self.blob_bytes,
                "bytes_freed_estimate": self.blob_bytes + self.event_bytes}


def check_prune_args(before: Any, limit: Any) -> tuple[float, int]:
    """Validate (before, limit); raises Rejected with a one-line reason."""
    if isinstance(before, bool) or not isinstance(before, (int, float)) or not math.isfinite(before):
        raise Rejected("prune needs `before` as a finite number of seconds since the epoch")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1_000_000:
        raise Rejected("prune limit must be an integer between 1 and 1000000")
    return float(before), limit


# Runs that may go: terminal, finished before the cutoff, no claim left on
# them (verify reports such a run; a worker might still write to it), and not
# the parent of a run that has not ended (its child may still report back).
# Read in finished_at order through its index: the unary + keeps SQLite from
# choosing the status index instead, which would read every finished run of
# the history to find the few old enough (PostgreSQL has no unary + for text,
# and its planner weighs both indexes by their statistics). The parents are
# looked up among the live runs (status index), never among all runs.
def _eligible(conn: Any) -> str:
    """Terminal runs finished before `?`, except those something still needs: a claim, a live child
    (a restart's or a child run's parent), a live parent (a child run: its parent's wait reads the
    outputs of its children when the last one ends) or a live restart of its parent (which re-uses
    the children that finished), or a resource that owns it (`resource_run`): its manager's `ensure` finds
    the run by an id derived from the resource and its key, so a pruned run would be started again,
    effects and all. A resource's runs are pruned once it is deleted (its resource_run rows go with it)."""
    unindexed = engine_of(conn).no_index_prefix
    return f"""
    FROM run r
    WHERE r.finished_at < ? AND {unindexed}r.status IN {TERMINAL_SQL}
      AND NOT EXISTS (SELECT 1 FROM run_claim c WHERE c.run_id = r.run_id)
      AND NOT EXISTS (SELECT 1 FROM resource_run o WHERE o.run_id = r.run_id)
      AND r.run_id NOT IN (SELECT parent_run_id FROM run
                           WHERE status IN {LIVE_SQL} AND parent_run_id IS NOT NULL)
      AND NOT (r.parent_node_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM run p WHERE p.run_id = r.parent_run_id AND p.status IN {LIVE_SQL}))
      AND NOT (r.parent_node_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM run x WHERE x.parent_run_id = r.parent_run_id AND x.parent_node_id IS NULL
                 AND x.status IN {LIVE_SQL}))"""


def _blob_candidates() -> str:
    """A UNION of every blob reference of the doomed runs' rows (NULLs left out)."""
    return " UNION ".join(f"SELECT {column} FROM {table} WHERE run_id IN (SELECT run_id FROM doomed) "
                          f"AND {column} IS NOT NULL"
                          for table, _key, column in BLOB_REFERENCES)


def _referenced_elsewhere() -> str:
    """Conditions true when a row outside the doomed runs still references blob `b`. Each finds
    its rows through the column's digest-prefix index (schema v5), then compares the whole digest."""
    prefix = f"substr(b.sha256, 1, {BLOB_PREFIX_CHARS})"
    return " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} t WHERE t.{column} IS NOT NULL "
        f"AND substr(t.{column}, 1, {BLOB_PREFIX_CHARS}) = {prefix} "
        f"AND t.{column} = b.sha256 AND t.run_id NOT IN (SELECT run_id FROM doomed))"
        for table, _key, column in BLOB_REFERENCES)


def plan_prune(conn: Any, before: float, limit: int) -> PrunePlan:
    """The prune plan as seen by `conn`'s current transaction (a reader's snapshot or the writer's).

    Oldest finished first. A blob is freed only when no row outside the
    pruned runs references it, so a payload shared with a surviving run
    (the same input, a restarted run's snapshot) stays. What it reads grows
    with the runs pruned, not with the history kept.
    """
    eligible_sql = _eligible(conn)
    json_values = engine_of(conn).json_values
    run_ids = [row[0] for row in conn.execute(
        f"SELECT r.run_id {eligible_sql} ORDER BY r.finished_at, r.run_id LIMIT ?", (before, limit))]
    # Counting every eligible run only matters when the limit may have cut the list.
    eligible = len(run_ids)
    if len(run_ids) == limit:
        eligible = int(conn.execute(f"SELECT count(*) {eligible_sql}", (before,)).fetchone()[0])
    doomed = json.dumps(run_ids)
    event_count, event_bytes = conn.execute(
        f"SELECT count(*), coalesce(sum(length(payload)), 0) FROM run_event WHERE run_id IN {json_values}",
        (doomed,)).fetchone()
    blobs: list[tuple[str, int]] = []
    if run_ids:
        blobs = conn.execute(
            f"""WITH doomed AS MATERIALIZED (SELECT value AS run_id FROM {json_values} AS v)
                SELECT b.sha256, b.size FROM blob b
                WHERE b.sha256 IN ({_blob_candidates()}) AND NOT ({_referenced_elsewhere()})
                ORDER BY b.sha256""", (doomed,)).fetchall()
    return PrunePlan(before, run_ids, max(0, eligible - len(run_ids)), int(event_count), int(event_bytes),
                     [sha for sha, _size in blobs], sum(int(size) for _sha, size in blobs))


def prune_plan(database: DatabaseLocation, before: float, limit: int = 1000) -> dict[str, Any]:
    """What `state.prune` with max_runs=`limit` would remove, read from one snapshot; changes nothing.

    Only terminal runs (done, failed, cancelled) with finished_at < before;
    never a queued, starting, running or parked run. Returns {before, runs:
    [ids], run_count, remaining, event_count, blob_count (blobs that would
    become unreferenced), bytes (their size), bytes_freed_estimate (blobs +
    event payloads)}.
    """
    before, limit = check_prune_args(before, limit)
    with read_snapshot(as_location(database)) as conn:
        return plan_prune(conn, before, limit).summary()
