"""Durable waits: a sleep, a message on a topic, child runs (the nodes of workflows/waits.py).

A waiting node asks (`wait_request`, a worker operation: wait_request.py) for its wait. The
first ask creates the `run_wait` row, with what will settle it: a wake-up time,
a topic, the children it starts in the same transaction. When the condition
already holds (a time that passed, a message already in the mailbox), the
wait settles at once and the node goes on; otherwise the run parks `waiting`
and its launch ends, so a waiting run holds no worker, thread or timer.

The transaction that makes the condition true settles the wait and wakes the
run: `waits.wake` (sent by the housekeeper for the nearest `wake_at`, and at a
host's start for those that passed while no host ran), `message.send`, the end
of the last child (store/commands/child_runs.py). The woken run's next launch
asks again, finds the wait settled and completes the node with its result;
`node_finished` consumes the wait, so a wait completes its node exactly once.
"""

from __future__ import annotations

import hashlib
from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import Rejected
from piwf_actors.store.commands.flow_timers import wake_flow_timers
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import wake_waiting
from piwf_actors.store.values import put_value
from piwf_actors.wire.content import INLINE_BYTES

WAIT_COLUMNS = ("wait_id", "run_id", "node_id", "attempt_id", "kind", "status", "wake_at", "paused_remaining_s",
                "topic", "detail", "result", "result_sha256", "children_total", "children_open", "created_at",
                "settled_at", "consumed_at")
_SELECT = f"SELECT {', '.join(WAIT_COLUMNS)} FROM run_wait"
#: Waits one `waits.wake` settles at most (the housekeeper sends another for the rest).
WAKE_BATCH = 500


def wait_id_for(run_id: str, node_id: str, attempt_id: str) -> str:
    """One wait per attempt of a node: a resent request finds it."""
    digest = hashlib.sha256(canonical_json(["wait", run_id, node_id, attempt_id]).encode()).hexdigest()
    return f"wait_{digest[:26]}"


def wait_row(ctx: WriteContext, where: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
    row = ctx.conn.execute(f"{_SELECT} WHERE {where}", params).fetchone()
    return None if row is None else dict(zip(WAIT_COLUMNS, row, strict=True))


def settle(ctx: WriteContext, wait: dict[str, Any], result: dict[str, Any], *, reason: str,
           queued_at: float | None = None) -> bool:
    """Settle a pending wait with the node's `result` ({outcome, output?, error?, error_code?}) and wake
    its run (parked on it) in this transaction. False if it was not pending (settled or cancelled)."""
    inline, sha = put_value(ctx.conn, result, ctx.now)
    changed = ctx.conn.execute(
        "UPDATE run_wait SET status = 'settled', result = ?, result_sha256 = ?, settled_at = ?, wake_at = NULL, "
        "paused_remaining_s = NULL WHERE wait_id = ? AND status = 'pending'",
        (inline, sha, ctx.now, wait["wait_id"])).rowcount
    if not changed:
        return False
    append_event(ctx.conn, wait["run_id"], "wait_settled", ctx.now, node_id=wait["node_id"],
                 attempt_id=wait["attempt_id"],
                 payload={"wait_id": wait["wait_id"], "kind": wait["kind"], "outcome": result.get("outcome"),
                          "by": reason})
    ctx.changes.touch("run_wait", wait["run_id"])
    wake_waiting(ctx, wait["run_id"], reason, queued_at=queued_at)
    return True


def cancel_open_waits(ctx: WriteContext, run_id: str) -> list[dict[str, Any]]:
    """The run ended: its pending waits are over with it. Returns them (a children wait's children are
    cancelled by the caller)."""
    rows = ctx.conn.execute(
        "UPDATE run_wait SET status = 'cancelled', wake_at = NULL WHERE run_id = ? AND status = 'pending' "
        "RETURNING wait_id, kind", (run_id,)).fetchall()
    if rows:
        ctx.changes.touch("run_wait", run_id)
    return [{"wait_id": wait_id, "kind": kind} for wait_id, kind in rows]


def consume_wait(ctx: WriteContext, run_id: str, wait_id: str) -> None:
    """`node_finished` completes the node with the wait's result: once."""
    changed = ctx.conn.execute(
        "UPDATE run_wait SET status = 'consumed', consumed_at = ? WHERE wait_id = ? AND run_id = ? "
        "AND status = 'settled'", (ctx.now, wait_id, run_id)).rowcount
    if changed != 1:
        raise Rejected(f"wait {wait_id} has no unconsumed result")
    ctx.changes.touch("run_wait", run_id)


def answer_result(ctx: WriteContext, wait: dict[str, Any]) -> dict[str, Any]:
    """The settled wait's result for the worker: inline up to 64 KiB, else as a content reference
    the worker reads in chunks (the runner supervisor turns `content_refs` into the frame's refs)."""
    if wait["result"] is not None:
        return {"result": loads(wait["result"])}
    row = ctx.conn.execute("SELECT size, CASE WHEN size <= ? THEN data END FROM blob WHERE sha256 = ?",
                           (INLINE_BYTES, wait["result_sha256"])).fetchone()
    if row is None:
        raise Rejected(f"wait {wait['wait_id']} lost its result")
    if row[1] is not None:
        return {"result": loads(bytes(row[1]).decode())}
    return {"result": None, "content_refs": [{"path": ["result"], "digest": wait["result_sha256"],
                                              "bytes": int(row[0]), "encoding": "json"}]}


# --- timers --------------------------------------------------------------------------------------


@command("waits.wake")
def wake_waits(ctx: WriteContext, _args: dict[str, Any]) -> dict[str, Any]:
    """Settle every pending wait whose `wake_at` has passed, in wake order (the housekeeper sends this
    for the nearest one, and right after a host's start for those that passed while no host ran).

    A sleep outputs `{slept_until}` and its run is queued among the woken in wake order; a message
    wait that timed out outputs its `on_timeout`, or fails `message_timeout` (routed like any failure).
    """
    woken: dict[str, str] = {}
    rows = ctx.conn.execute(
        f"{_SELECT} WHERE status = 'pending' AND wake_at IS NOT NULL AND wake_at <= ? ORDER BY wake_at LIMIT ?",
        (ctx.timer_now, WAKE_BATCH)).fetchall()  # wake-ups are timer time (piwf_actors/clock.py)
    for row in rows:
        wait = dict(zip(WAIT_COLUMNS, row, strict=True))
        # Queued in wake order, on the queue's host time (the wake-up is timer time: the same in production).
        queued_at = wait["wake_at"] - ctx.timer_offset
        if wait["kind"] == "sleep":
            settle(ctx, wait, {"outcome": "ok", "output": {"slept_until": wait["wake_at"]}}, reason="sleep",
                   queued_at=queued_at)
            woken[wait["wait_id"]] = "slept"
            continue
        detail = loads(wait["detail"] or "{}")
        if detail.get("has_default"):
            result = {"outcome": "ok", "output": detail.get("on_timeout")}
            woken[wait["wait_id"]] = "default_applied"
        elif wait["kind"] == "event":
            result = {"outcome": "failed", "error_code": "event_timeout",
                      "error": f"no matching event {wait['topic']!r} within {detail.get('timeout_s'):g} s"}
            woken[wait["wait_id"]] = "timed_out"
        else:
            result = {"outcome": "failed", "error_code": "message_timeout",
                      "error": f"no message on topic {wait['topic']!r} within {detail.get('timeout_s'):g} s"}
            woken[wait["wait_id"]] = "timed_out"
        settle(ctx, wait, result, reason="timeout", queued_at=queued_at)
    timers = wake_flow_timers(ctx)  # runs held by a rate limit or a debounce (flow_timers.py)
    return {"woken": woken, "timers": timers["timers"], "more": len(rows) == WAKE_BATCH or timers["more"]}
