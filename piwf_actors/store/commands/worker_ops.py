"""The table of worker operations (`worker.message`'s `op`) and the attempt rows they share.

Kept apart from `worker.py` so that the modules defining operations
(`worker.py`, `interactions.py`) import this one and not each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.ids import new_id
from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.events import append_event

Handler = Callable[[WriteContext, dict[str, Any], dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class WorkerOp:
    """`fenced`: checked against the worker's expected revision and moves the run's progress by
    one when accepted. `moves_progress`: the handler moves it itself, in its own update of the run
    row (and leaves the new value in `run["progress"]`), saving a statement on the hot path."""

    fn: Handler
    fenced: bool
    moves_progress: bool


_OPERATIONS: dict[str, WorkerOp] = {}


def operation(name: str, *, fenced: bool = True, moves_progress: bool = False) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if name in _OPERATIONS:
            raise ValueError(f"worker operation {name!r} registered twice")
        _OPERATIONS[name] = WorkerOp(fn, fenced, moves_progress)
        return fn

    return register


def lookup_operation(name: Any) -> WorkerOp | None:
    return _OPERATIONS.get(name) if isinstance(name, str) else None


def start_attempt(ctx: WriteContext, run: dict[str, Any], node_id: str, attempt_id: str | None = None,
                  attempt_no: int | None = None, *, move_progress: bool = False) -> tuple[str, int]:
    """Record a new running attempt (the worker proposes its id so callbacks can see it, and its
    number, which it counts from the launch state). With `move_progress` the run's progress moves
    in the same update of the run row."""
    run_id = run["run_id"]
    if attempt_no is None:
        attempt_no = ctx.conn.execute("SELECT count(*) FROM node_attempt WHERE run_id = ? AND node_id = ?",
                                      (run_id, node_id)).fetchone()[0] + 1
    attempt_id = attempt_id or new_id("att", ctx.now)
    ctx.conn.execute(
        """INSERT INTO node_attempt (attempt_id, run_id, node_id, attempt_no, step, status, generation, started_at,
               executed_by)
           VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?)""",
        (attempt_id, run_id, node_id, attempt_no, run["steps"], claim_generation(ctx, run), ctx.now,
         ctx.executed_by))
    if move_progress:
        run["progress"] = ctx.conn.execute(
            "UPDATE run SET current_node = ?, progress = progress + 1 WHERE run_id = ? RETURNING progress",
            (node_id, run_id)).fetchone()[0]
    else:
        ctx.conn.execute("UPDATE run SET current_node = ? WHERE run_id = ?", (node_id, run_id))
    append_event(ctx.conn, run_id, "node_started", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"attempt_no": attempt_no})
    return attempt_id, attempt_no


def claim_generation(ctx: WriteContext, run: dict[str, Any]) -> int:
    generation = run.get("claim_generation")
    if generation is None:
        generation = ctx.conn.execute("SELECT generation FROM run_claim WHERE run_id = ?",
                                      (run["run_id"],)).fetchone()[0]
    return int(generation)
