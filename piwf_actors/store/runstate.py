"""Small helpers shared by the run commands: status changes, claims, views.

Every change of a run's status goes through `set_status`, which bumps the
run's revision (optimistic concurrency), stamps `updated_at`, appends the
matching trace event and records the change for watchers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import NotFound
from piwf_actors.ids import new_id
from piwf_actors.statuses import TERMINAL_STATUSES
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.engines.base import Connection
from piwf_actors.store.events import append_event
from piwf_actors.store.resource_state import enqueue_owner_of_run

if TYPE_CHECKING:  # the commands package imports this module while it loads
    from piwf_actors.store.commands.registry import WriteContext


#: Claim order of queued runs (`run.queue_class`), lowest first; within a
#: class, the time the run entered the queue (`run.queued_at`).
QUEUE_VALIDATION = 0  # an agent's submission waits for the worker's verdict
QUEUE_WOKEN = 1  # woken by an answer, a deadline, a resume, an effect resolution, a requeue
QUEUE_FRESH = 2  # never ran yet
#: Not claimable for now: a fresh run the claim found over a concurrency limit, over its fan-out's
#: `max_parallel`, or whose parent is paused (store/slots.py). It is let go (back to QUEUE_FRESH,
#: its place kept) when a run of its key or fan-out ends, or its parent is resumed, so the claim's
#: walk of the queue never reads the same blocked run twice.
QUEUE_HELD = 3


def _queue_class(ctx: WriteContext, run_id: str) -> int:
    validating = ctx.conn.execute(
        """SELECT 1 FROM interactive_submission s JOIN interactive_request r ON r.request_id = s.request_id
           WHERE r.run_id = ? AND s.outcome = 'validating' LIMIT 1""", (run_id,)).fetchone()
    return QUEUE_VALIDATION if validating else QUEUE_WOKEN


def run_row(conn: Connection, run_id: str) -> dict[str, Any]:
    cursor = conn.execute("SELECT * FROM run WHERE run_id = ?", (run_id,))
    row = cursor.fetchone()
    if row is None:
        raise NotFound("run", run_id)
    return dict(zip([d[0] for d in cursor.description], row, strict=True))


_SET_STATUS_COLUMNS = """status = ?, park_reason = ?, park_detail = ?,
    error_code = coalesce(?, error_code), error_message = coalesce(?, error_message),
    finished_at = coalesce(?, finished_at), revision = revision + 1, updated_at = ?"""
_RETURNED = ("revision", "progress", "session_id", "workflow", "error_code", "error_message", "parent_wait_id",
             "fanout_max", "concurrency_key", "concurrency_max")
_RETURNING = "RETURNING " + ", ".join(_RETURNED)
#: What a run that ends may still hold, read by the update that ends it (no read of its own each, and
#: none at all for what it does not hold): open requests, pending waits, a resource that owns it.
#: The run's last event seq, returned by a status change inside a write batch (BatchConnection.prime_seq).
_LAST_SEQ = ", (SELECT coalesce(max(e.seq), 0) FROM run_event e WHERE e.run_id = run.run_id)"
_HOLDINGS = """,
    EXISTS (SELECT 1 FROM interactive_request q WHERE q.run_id = run.run_id AND q.status IN ('pending', 'presenting')),
    EXISTS (SELECT 1 FROM run_wait w WHERE w.run_id = run.run_id AND w.status = 'pending'),
    EXISTS (SELECT 1 FROM resource_run o WHERE o.run_id = run.run_id)"""

#: What else must happen, in the same transaction, when a run ends: `hook(ctx, run_id, status,
#: limits)`, `limits` = (parent_wait_id, fanout_max, concurrency_key, concurrency_max). Registered
#: by the module that owns it (child runs and limits: store/commands/child_runs.py), which imports
#: this module, not the other way round.
FinishHook = Callable[["WriteContext", str, str, "RunEnd"], None]
_FINISH_HOOKS: list[FinishHook] = []


class RunEnd(NamedTuple):
    """What the finish hooks learn of a run that ends, from the update that ended it."""

    parent_wait_id: str | None
    fanout_max: int | None
    concurrency_key: str | None
    concurrency_max: int | None
    #: It has pending waits (run_wait) to cancel.
    open_waits: bool


def on_run_finished(hook: FinishHook) -> FinishHook:
    _FINISH_HOOKS.append(hook)
    return hook


def set_status(ctx: WriteContext, run_id: str, status: str, event: str, *, park_reason: str | None = None,
               park_detail: str | None = None, error_code: str | None = None, error_message: str | None = None,
               payload: Any = None, node_id: str | None = None, also: str = "", also_params: tuple[Any, ...] = (),
               run: dict[str, Any] | None = None, whole_row: dict[str, Any] | None = None) -> int:
    """Move a run to `status` and append `event`; returns the new revision.

    `also` is more `column = expression` assignments for the same update of
    the run row (with `also_params`), so a transition that changes other
    columns too costs one statement; the new progress is left in `run`, and
    the whole updated row in `whole_row` when given (a transition that does
    not end the run: the claim's), and `payload` may then be a function of
    that row.

    A run that goes back to the queue is stamped with the time and its claim
    class: before fresh runs, and first of all when a submission waits for
    its verdict. A run that ends learns from the same update what it still
    holds (`_HOLDINGS`), and only that is closed with it.
    """
    finished = ctx.now if status in TERMINAL_STATUSES else None
    params: tuple[Any, ...] = (status, park_reason, park_detail, error_code, error_message, finished, ctx.now)
    extra = f", {also}" if also else ""
    if whole_row is not None:
        if finished is not None:
            raise ValueError("whole_row is for a transition that does not end the run")
        returning = "RETURNING *"
    else:
        returning = _RETURNING if finished is None else _RETURNING + _HOLDINGS
    batch = ctx.conn if isinstance(ctx.conn, BatchConnection) else None
    if batch is not None:
        returning += _LAST_SEQ  # the event appended below needs no read of its own
    if status == "queued":
        sql = (f"UPDATE run SET {_SET_STATUS_COLUMNS}{extra}, queued_at = ?, queue_class = ?, held_by = NULL "
               f"WHERE run_id = ? {returning}")
        statement_params = (*params, *also_params, ctx.now, _queue_class(ctx, run_id), run_id)
    else:
        # Not touching queued_at/queue_class spares their index on every other transition.
        sql = f"UPDATE run SET {_SET_STATUS_COLUMNS}{extra} WHERE run_id = ? {returning}"
        statement_params = (*params, *also_params, run_id)
    if batch is not None:
        cursor = batch.execute_beside(sql, statement_params, tables=("run_event",))
    else:
        cursor = ctx.conn.execute(sql, statement_params)
    row = cursor.fetchone()
    if row is None:
        raise NotFound("run", run_id)
    if batch is not None:
        batch.prime_seq(run_id, int(row[-1]))
        row = row[:-1]
    if whole_row is not None:
        whole_row.update(zip([d[0] for d in cursor.description], row, strict=False))
        row = tuple(whole_row[name] for name in _RETURNED)
        if callable(payload):
            payload = payload(whole_row)
    revision, progress, session_id, workflow, code, message = row[:6]
    if run is not None:
        run["progress"] = progress
    append_event(ctx.conn, run_id, event, ctx.now, node_id=node_id, payload=payload)
    ctx.changes.touch("run", run_id)
    if finished is not None:
        open_requests, open_waits, owned = (bool(flag) for flag in row[10:13])
        # A run that ended waits for nothing: its open requests are closed with it.
        if open_requests:
            cancel_open_requests(ctx, run_id)
        parent_wait_id, fanout_max, concurrency_key, concurrency_max = row[6:10]
        limits = RunEnd(parent_wait_id, fanout_max, concurrency_key, concurrency_max, open_waits)
        for hook in _FINISH_HOOKS:
            hook(ctx, run_id, status, limits)
        if limits.parent_wait_id is None:  # a child's end is its parent's news, not its session's
            _summary_message(ctx, run_id, session_id, workflow, status, error_code, error_message)
        ctx.changes.finished.append((run_id, workflow, status, code, message))
        if owned:
            enqueue_owner_of_run(ctx, run_id)  # a run a resource owns ended: reconcile that resource
    return int(revision)


def park_waiting(ctx: WriteContext, run_id: str, attempt_id: str, detail: str, payload: dict[str, Any]) -> None:
    """The run parks `waiting` on `detail` (a request or a wait) and its launch ends: no worker is held."""
    ctx.conn.execute("UPDATE node_attempt SET status = 'waiting' WHERE attempt_id = ? AND status = 'running'",
                     (attempt_id,))
    set_status(ctx, run_id, "parked", "run_parked", park_reason="waiting", park_detail=detail,
               payload={"reason": "waiting", **payload})
    release_claim(ctx, run_id)


def wake_waiting(ctx: WriteContext, run_id: str, reason: str, *, queued_at: float | None = None) -> None:
    """A parked-waiting run goes back to the queue to consume what it waited for (an answer, a
    wake-up, a message, its children's end). `queued_at` orders it among the woken (a sleep's
    wake-up time, so sleepers woken together go in wake order)."""
    run = run_row(ctx.conn, run_id)
    if run["status"] == "parked" and run["park_reason"] == "waiting":
        if run["cancel_requested"]:
            set_status(ctx, run_id, "cancelled", "run_cancelled", payload={"after": reason})
            return
        if run["pause_requested"]:
            # Paused while it waited: it stays parked, now as paused, and `run.resume` lets it
            # consume what came (answers are refused and message timeouts stand still meanwhile;
            # a sleep's wake-up time does not move).
            ctx.conn.execute("UPDATE run SET pause_requested = 0 WHERE run_id = ?", (run_id,))
            set_status(ctx, run_id, "parked", "run_parked", park_reason="paused",
                       payload={"reason": "paused", "after": reason})
            return
        set_status(ctx, run_id, "queued", "run_requeued", payload={"after": reason})
        if queued_at is not None:
            ctx.conn.execute("UPDATE run SET queued_at = ? WHERE run_id = ?", (queued_at, run_id))


def cancel_open_requests(ctx: WriteContext, run_id: str) -> None:
    if ctx.conn.execute(
            "UPDATE interactive_request SET status = 'cancelled', revision = revision + 1, updated_at = ? "
            "WHERE run_id = ? AND status IN ('pending', 'presenting')", (ctx.now, run_id)).rowcount:
        ctx.changes.touch("interactive_request", run_id)


def _summary_message(ctx: WriteContext, run_id: str, session_id: str | None, workflow: str, status: str,
                     error_code: str | None, error_message: str | None) -> None:
    """A finished run tells its session (if it has one) how it ended, in the outbox."""
    if session_id is None:
        return
    body: dict[str, Any] = {"run_id": run_id, "workflow": workflow, "status": status}
    if error_code:
        body["error"] = {"code": error_code, "message": (error_message or "")[:1000]}
    ctx.conn.execute(
        "INSERT INTO session_message (message_id, session_id, run_id, kind, body, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (new_id("msg", ctx.now), session_id, run_id, "run_summary", canonical_json(body), ctx.now))
    ctx.changes.touch("session_message", run_id)


def bump_revision(ctx: WriteContext, run_id: str) -> int:
    row = ctx.conn.execute(
        "UPDATE run SET revision = revision + 1, updated_at = ? WHERE run_id = ? RETURNING revision",
        (ctx.now, run_id)).fetchone()
    if row is None:
        raise NotFound("run", run_id)
    ctx.changes.touch("run", run_id)
    return int(row[0])


def claim_row(conn: Connection, run_id: str) -> dict[str, Any] | None:
    cursor = conn.execute("SELECT * FROM run_claim WHERE run_id = ?", (run_id,))
    row = cursor.fetchone()
    return None if row is None else dict(zip([d[0] for d in cursor.description], row, strict=True))


#: A launch's worker message records, deleted when its claim ends.
DELETE_RECORDS = "DELETE FROM worker_message WHERE launch_id = ?"
_DELETE_WORKER = "DELETE FROM run_worker WHERE worker_id = ?"


def release_claim(ctx: WriteContext, run_id: str, *, by_worker: bool = True) -> None:
    """End the run's current claim; the launch that held it is over.

    Its worker messages' records go with it (they only serve a resend within
    the launch). A launch its own worker ended (the run finished, failed or
    parked) leaves no `run_worker` row either; one the host ended (`by_worker`
    False: a crash, a kill, a recovery) keeps its row, with the outcome, as
    the record of what happened.
    """
    claim = ctx.conn.execute("DELETE FROM run_claim WHERE run_id = ? RETURNING launch_id", (run_id,)).fetchone()
    if claim is not None:
        launch_id = claim[0]
        batch = ctx.conn if isinstance(ctx.conn, BatchConnection) else None
        if batch is not None:
            # This launch's records the batch still holds are never inserted; those already stored
            # are deleted with the batch's other ended launches' (a message of this launch resent
            # meanwhile finds its claim gone: worker.py looks past records about to go).
            batch.hold_delete("worker_message", DELETE_RECORDS, launch_id, column=0)
        else:
            ctx.conn.execute(DELETE_RECORDS, (launch_id,))
        if by_worker and batch is not None:
            batch.hold_delete("run_worker", _DELETE_WORKER, launch_id, column=0)
        elif by_worker:
            ctx.conn.execute(_DELETE_WORKER, (launch_id,))
        else:
            ctx.conn.execute("UPDATE run_worker SET status = 'exited', outcome = coalesce(outcome, 'exited'), "
                             "ended_at = coalesce(ended_at, ?) WHERE worker_id = ? AND status IN ('starting', 'live')",
                             (ctx.now, claim[0]))
    ctx.changes.touch("run_claim", run_id)
