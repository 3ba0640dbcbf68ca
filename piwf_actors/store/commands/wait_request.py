"""`wait_request`: the worker operation of a waiting node (workflows/waits.py kinds).

The first request of a node's attempt creates its wait (store/commands/waits.py) and, for child
runs, the children (child_runs.py), in one transaction; a later one (the launch after a wake-up,
or a resend) finds it. A wait whose condition holds already settles at once; otherwise the run
parks `waiting` and the launch ends. Wake-up times are timer time (`ctx.timer_now`,
piwf_actors/clock.py): the wall clock, but under a test's clock.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import Rejected
from piwf_actors.store.commands import child_runs, events, mailbox
from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.commands.waits import answer_result, settle, wait_id_for, wait_row
from piwf_actors.store.commands.worker_ops import operation, start_attempt
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import park_waiting


@operation("wait_request")
def _wait_request(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """Find or create the wait of a waiting node (`payload`: node_id, attempt_id, kind and the kind's
    fields). Returns {status: settled, result} when it holds, else parks the run and returns
    {status: waiting, directive: stop}."""
    run_id, node_id = run["run_id"], payload["node_id"]
    if run["cancel_requested"]:
        return {"status": "waiting", "directive": "stop"}  # runner.exit settles it as cancelled
    wait = wait_row(ctx, "run_id = ? AND node_id = ? AND status IN ('pending', 'settled') "
                         "ORDER BY created_at DESC LIMIT 1", (run_id, node_id))
    if wait is None and payload.get("probe"):
        return {"status": "absent"}  # the worker computes the request (a fan-out's, once) and asks again
    if wait is None:
        kind = payload.get("kind")
        if kind not in ("sleep", "message", "children", "event"):
            raise Rejected(f"unknown wait kind {kind!r}")
        attempt_id, _ = start_attempt(ctx, run, node_id, payload.get("attempt_id"))
        wait = _create(ctx, run, node_id, attempt_id, payload)
        if kind == "children":
            child_runs.start_children(ctx, run, wait, payload)
    else:
        # A launch that was interrupted left the attempt `interrupted`; this launch carries it on.
        ctx.conn.execute("UPDATE node_attempt SET status = 'running' WHERE attempt_id = ? "
                         "AND status IN ('waiting', 'interrupted')", (wait["attempt_id"],))
    if wait["status"] == "pending" and not run["pause_requested"]:
        # (With a pause pending the run parks now; what came meanwhile is taken when it is resumed:
        # a due sleep by waits.wake, a message by run.resume.)
        if wait["kind"] == "sleep" and wait["wake_at"] is not None and wait["wake_at"] <= ctx.timer_now:
            settle(ctx, wait, {"outcome": "ok", "output": {"slept_until": wait["wake_at"]}}, reason="sleep")
        elif wait["kind"] == "message":
            mailbox.deliver_waiting(ctx, wait)
        elif wait["kind"] == "event":  # an event emitted before the wait, within its look-back
            events.deliver_waiting(ctx, wait)
        elif wait["kind"] == "children":
            child_runs.settle_if_done(ctx, wait)
        wait = wait_row(ctx, "wait_id = ?", (wait["wait_id"],)) or wait
    if wait["status"] == "settled":
        return {"status": "settled", "wait_id": wait["wait_id"], "attempt_id": wait["attempt_id"],
                **answer_result(ctx, wait)}
    park_waiting(ctx, run_id, wait["attempt_id"], wait["wait_id"], {"wait_id": wait["wait_id"], "kind": wait["kind"]})
    return {"status": "waiting", "wait_id": wait["wait_id"], "directive": "stop"}


def _create(ctx: WriteContext, run: dict[str, Any], node_id: str, attempt_id: str,
            payload: dict[str, Any]) -> dict[str, Any]:
    kind = payload["kind"]
    wait_id = wait_id_for(run["run_id"], node_id, attempt_id)
    wake_at: float | None = None
    paused_remaining: float | None = None
    topic: str | None = None
    detail: dict[str, Any] = {}
    if kind == "sleep":
        until = payload.get("until")
        wake_at = float(until) if until is not None else ctx.timer_now + float(payload.get("seconds") or 0.0)
    elif kind in ("message", "event"):
        topic = str(payload["topic"])
        timeout_s = payload.get("timeout_s")
        detail = {"timeout_s": timeout_s, "has_default": "on_timeout" in payload,
                  "on_timeout": payload.get("on_timeout")}
        if kind == "event":
            detail = events.wait_detail(ctx, run, payload)
        if timeout_s is not None:
            # A message wait's clock stands still while the run is paused (store/commands/request_clocks.py).
            if run["pause_requested"]:
                paused_remaining = float(timeout_s)
            else:
                wake_at = ctx.timer_now + float(timeout_s)
    else:
        detail = {"mode": payload.get("mode"), "on_failure": payload.get("on_failure") or "fail_fast",
                  "names": payload.get("names")}
    ctx.conn.execute(
        """INSERT INTO run_wait (wait_id, run_id, node_id, attempt_id, kind, status, wake_at, paused_remaining_s,
               topic, detail, children_total, children_open, created_at)
           VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, 0, 0, ?)""",
        (wait_id, run["run_id"], node_id, attempt_id, kind, wake_at, paused_remaining, topic,
         canonical_json(detail), ctx.now))
    append_event(ctx.conn, run["run_id"], "wait_started", ctx.now, node_id=node_id, attempt_id=attempt_id,
                 payload={"wait_id": wait_id, "kind": kind, "wake_at": wake_at, "topic": topic})
    ctx.changes.touch("run_wait", run["run_id"])
    wait = wait_row(ctx, "wait_id = ?", (wait_id,))
    assert wait is not None
    return wait


