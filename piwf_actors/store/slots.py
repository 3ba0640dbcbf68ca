"""Concurrency slots: whether a fresh run may start now, read the same way by the claim (in its
transaction, store/commands/claims.py) and by `run.get` (the reason a queued run waits).

A run holds a slot of its concurrency key (its workflow's `limit`) and of its fan-out (a
`map_workflow`'s `max_parallel`, counted per parent wait) from its first claim until it ends:
while it runs, waits, is paused or is queued again after waking. So a limit of 2 on deploys means
two deploys under way, a deploy waiting for a person's approval included. A fresh run is also
not started while its parent run is paused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piwf_actors.store import rates
from piwf_actors.store.engines.base import Connection

#: The columns of `run` the check reads.
SLOT_COLUMNS = ("run_id", "generation", "concurrency_key", "concurrency_max", "parent_run_id", "parent_node_id",
                "parent_wait_id", "fanout_max", "rate_key", "rate_max", "rate_per_s")

_COLUMNS = {"concurrency_key", "parent_wait_id", "rate_key"}


def holders(conn: Connection, column: str, key: str) -> int:
    """Runs of `key` (a concurrency key, or the wait of a fan-out) that hold a slot: started
    (generation > 0) and not finished. Two index ranges: the queued part reads only runs queued
    again after they started (classes 0 and 1), never the fresh or held ones waiting behind."""
    assert column in _COLUMNS
    row = conn.execute(
        f"""SELECT (SELECT count(*) FROM run WHERE {column} = ? AND status IN ('starting', 'running', 'parked')
                      AND generation > 0)
                 + (SELECT count(*) FROM run WHERE {column} = ? AND status = 'queued' AND queue_class < 2
                      AND generation > 0)""", (key, key)).fetchone()
    return int(row[0])


def waiting_fresh(conn: Connection, column: str, key: str) -> int:
    """Fresh runs of `key` in the queue that the claim may still take (not held)."""
    assert column in _COLUMNS
    return int(conn.execute(f"SELECT count(*) FROM run WHERE {column} = ? AND status = 'queued' AND queue_class = 2",
                            (key,)).fetchone()[0])


@dataclass(frozen=True, slots=True)
class Block:
    """What keeps a fresh run from starting: every fresh run of the same `column` = `key` is kept by it
    too (a full concurrency key or fan-out, a paused parent), so the claim holds them all at once."""

    column: str  # concurrency_key | parent_wait_id | parent_run_id (a paused parent) | rate_key
    key: str
    reason: str
    wake_at: float | None = None  # a rate limit's: when its next start is allowed (store/rates.py)


def blocked_by(conn: Connection, run: dict[str, Any], now: float) -> Block | None:
    """What keeps the fresh run `run` (SLOT_COLUMNS at least) from starting now, or None. A rate
    limit is checked last: a run kept by a slot spends no start (`now`: timer time)."""
    if run["generation"]:
        return None  # it holds its slots already
    if run["parent_node_id"] is not None:
        parent = conn.execute("SELECT pause_requested, status, park_reason FROM run WHERE run_id = ?",
                              (run["parent_run_id"],)).fetchone()
        if parent is not None and (parent[0] or (parent[1] == "parked" and parent[2] == "paused")):
            return Block("parent_run_id", run["parent_run_id"], f"its parent run {run['parent_run_id']} is paused")
    if run["parent_wait_id"] is not None and run["fanout_max"]:
        used = holders(conn, "parent_wait_id", run["parent_wait_id"])
        if used >= run["fanout_max"]:
            return Block("parent_wait_id", run["parent_wait_id"],
                         f"waiting for a slot of fan-out {run['parent_node_id']} of {run['parent_run_id']} "
                         f"(max_parallel {run['fanout_max']}, {used} running)")
    if run["concurrency_key"] is not None and run["concurrency_max"]:
        used = holders(conn, "concurrency_key", run["concurrency_key"])
        if used >= run["concurrency_max"]:
            return Block("concurrency_key", run["concurrency_key"],
                         f"waiting for a concurrency slot of {run['concurrency_key']} "
                         f"({used} of {run['concurrency_max']} in use)")
    if run["rate_key"] is not None and run["rate_max"]:
        next_at = rates.next_start(conn, run["rate_key"], run["rate_max"], run["rate_per_s"], now)
        if next_at is not None:
            return Block("rate_key", run["rate_key"],
                         rates.reason(run["rate_key"], run["rate_max"], run["rate_per_s"], next_at, now), next_at)
    return None


def needs_check(run: dict[str, Any]) -> bool:
    """Whether `blocked_by` can say anything about this run (cheap: no query)."""
    return not run["generation"] and (run["parent_node_id"] is not None or run["concurrency_key"] is not None
                                      or run["rate_key"] is not None)
