"""`rate_take`: the worker operation of a node or step under a named rate limiter (`rate=mail_api`).

Before the node runs, its worker asks for a start of the limiter's budget, counted like a run's start
(store/rates.py) in `rate_start`, under the node's attempt id. While the window has room, the start
is recorded and the node runs at once. Otherwise the run parks `waiting` in the same transaction, held
by the limiter (`run.held_by` = `rate_node:<key>`), its launch ends and its worker is free; a timer
(store/commands/flow_timers.py) puts it back in the queue when the next start is allowed, and the
next launch runs the node again, which asks again. A parked run keeps its concurrency slot (it is
under way) and its pause and cancel work as for any wait.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import Rejected
from piwf_actors.store import rates
from piwf_actors.store.commands.flow_timers import arm_timer
from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.commands.worker_ops import operation
from piwf_actors.store.runstate import release_claim, set_status

NODE_HOLD = "rate_node:"


@operation("rate_take")
def _rate_take(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """`payload`: node_id, token_id (the attempt's), rate_key, rate_max, rate_per_s. Returns
    {granted: true}, or parks the run and returns {granted: false, directive: stop, next_at}."""
    run_id = run["run_id"]
    if run["cancel_requested"]:
        return {"granted": False, "directive": "stop"}  # runner.exit settles it as cancelled
    key, token_id = str(payload["rate_key"]), str(payload["token_id"])
    maximum, per_s = payload["rate_max"], payload["rate_per_s"]
    if (isinstance(maximum, bool) or not isinstance(maximum, int) or maximum <= 0
            or not isinstance(per_s, (int, float)) or not per_s > 0):
        raise Rejected("rate_take needs a positive rate_max and rate_per_s")
    now = ctx.timer_now
    granted = ctx.conn.execute("SELECT 1 FROM rate_start WHERE rate_key = ? AND run_id = ?",
                               (key, token_id)).fetchone()
    if granted is not None:
        return {"granted": True}  # a resent request of a granted attempt
    next_at = rates.next_start(ctx.conn, key, maximum, float(per_s), now)
    if next_at is None:
        rates.count_start(ctx.conn, {"rate_key": key, "run_id": token_id, "rate_per_s": per_s}, now)
        return {"granted": True}
    reason = rates.reason(key, maximum, float(per_s), next_at, now)
    set_status(ctx, run_id, "parked", "run_parked", park_reason="waiting", park_detail=reason,
               payload={"reason": "waiting", "rate_key": key, "node_id": payload.get("node_id"), "next_at": next_at},
               also="held_by = ?", also_params=(NODE_HOLD + key,))
    release_claim(ctx, run_id)
    arm_timer(ctx, NODE_HOLD + key, "rate_node", rates.limiter_name(key), next_at, maximum, float(per_s))
    return {"granted": False, "directive": "stop", "next_at": next_at}
