"""Holding fresh runs back from the claim, and letting them go (store/slots.py says why they wait).

A fresh run that cannot start — its concurrency key or fan-out is full, or its parent is paused —
is held (`QUEUE_HELD`): past the end of the queue's walk, so the claim never reads it again while
it waits. Whatever blocked it blocks every fresh run of the same key, so the claim holds them all
in one statement (`hold_blocked`). A held run never sits on a free slot: when the runs just held
also count against another key that has room (a child of a paused parent in a deploy limit, a
fan-out child whose own key is free), the next runs of that key are let go in the same
transaction (`let_go`), as they are when a run of a key ends (store/commands/child_runs.py).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.runstate import QUEUE_FRESH, QUEUE_HELD
from piwf_actors.store.slots import Block, holders, waiting_fresh

_GROUP = {"concurrency_key": "concurrency_key = ?", "parent_wait_id": "parent_wait_id = ?",
          "parent_run_id": "parent_run_id = ? AND parent_node_id IS NOT NULL", "rate_key": "rate_key = ?"}


def held_by(column: str, key: str) -> str:
    """What a held run records it waits for (`run.held_by`): only what frees that lets it go."""
    return f"{column}:{key}"


def hold_blocked(ctx: WriteContext, block: Block) -> int:
    """Hold every fresh queued run `block` keeps from starting; returns how many."""
    held = ctx.conn.execute(
        f"""UPDATE run SET queue_class = {QUEUE_HELD}, held_by = ?
            WHERE {_GROUP[block.column]} AND status = 'queued' AND queue_class < {QUEUE_HELD} AND generation = 0
            RETURNING parent_wait_id, fanout_max, concurrency_key, concurrency_max""",
        (held_by(block.column, block.key), block.key)).fetchall()
    others = {("parent_wait_id", wait_id, fanout_max) for wait_id, fanout_max, _key, _max in held if wait_id}
    others |= {("concurrency_key", key, maximum) for _wait, _fan, key, maximum in held if key}
    for column, key, maximum in others:
        if (column, key) != (block.column, block.key) and maximum:
            let_go(ctx, column, key, maximum)
    if held:
        ctx.changes.touch("run")  # the scheduler claims again: the runs behind these may start
    return len(held)


def let_go(ctx: WriteContext, column: str, key: str, maximum: int | None = None) -> None:
    """Let the runs held for `key` go (back to QUEUE_FRESH, their place kept): as many as it has free
    slots, or all of them without a `maximum` (a paused parent resumed)."""
    held = f"SELECT run_id FROM run WHERE held_by = ? AND status = 'queued' AND queue_class = {QUEUE_HELD}"
    params: tuple[Any, ...] = (held_by(column, key),)
    if maximum is not None:
        free = maximum - holders(ctx.conn, column, key) - waiting_fresh(ctx.conn, column, key)
        if free <= 0:
            return
        held += " ORDER BY priority DESC, queued_at, child_index LIMIT ?"
        params += (free,)
    if ctx.conn.execute(f"UPDATE run SET queue_class = {QUEUE_FRESH}, held_by = NULL WHERE run_id IN ({held})",
                        params).rowcount:
        ctx.changes.touch("run")
