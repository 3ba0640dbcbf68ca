"""`function_history`: the recorded history a durable function's launch replays against.

A workflow function (worker/function_engine.py) is run from the top on every launch; each durable
call it makes must meet, in order, the call recorded at that place. The history is, per node id, its
final finished attempt — the one after which the run's `steps` moved on (a failed attempt answered
`next: retry` is not final: the step runs again) — ordered by the step it was recorded at. Outputs are
not repeated here: the launch state carries the latest output per node id (large ones as content
references). A read inside the writer's transaction (unfenced: it changes nothing), asked only by
launches of runs that have made progress.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.commands.worker_ops import operation


@operation("function_history", fenced=False)
def _function_history(ctx: WriteContext, run: dict[str, Any], _payload: dict[str, Any]) -> dict[str, Any]:
    """{entries: [{node_id, step, outcome, error_code, error}]} ordered by step."""
    final: dict[str, dict[str, Any]] = {}
    for node_id, step, outcome, error_code, error in ctx.conn.execute(
            """SELECT node_id, step, outcome, error_code, error_message FROM node_attempt
               WHERE run_id = ? AND status IN ('succeeded', 'failed') AND step < ?
               ORDER BY step, finished_at""", (run["run_id"], run["steps"])):
        final[node_id] = {"node_id": node_id, "step": step, "outcome": outcome, "error_code": error_code,
                          "error": error and str(error)[:1000]}
    return {"entries": sorted(final.values(), key=lambda entry: entry["step"])}
