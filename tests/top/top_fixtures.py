"""A hand-built `Snapshot` of a busy host for the `piwf-top` tests (no host, no terminal).

Three interesting runs (one running, one parked on a decision, one parked on
an ambiguous effect) and thirty finished ones, so that 80×24 has to scroll;
one pending decision; a run.get view with an error, its traceback and an
ambiguous effect. Host text with markup in it (`[red]x[/red]`) checks that
nothing is read as markup.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from piwf_actors.top.model import EventRow, Snapshot, WorkerRow

NOW = 1_800_000_000.0
BUSY = "run_01m8m3yzdebusybusybusy0001"
RELEASE = "run_01m8m3yzde2ewffvd5yc88bm3j"
AMBIGUOUS = "run_01m8m3yzdeambiguousambig2"

DECISION: dict[str, Any] = {
    "request_id": "req_abc", "run_id": RELEASE, "node_id": "approve", "kind": "decision", "revision": 3,
    "status": "pending", "deadline_at": NOW + 3600, "created_at": NOW - 5,
    "contract": {"title": "Ship 1.2.0?", "summary": "12 passed",
                 "choices": {"ship": {"label": "Ship it", "input": None}, "stop": {"label": "Stop", "input": None},
                             "fix": {"label": "Needs changes",
                                     "input": {"name": "instructions", "prompt": "What should change?"}}}},
}
OLD_RUNS: tuple[dict[str, Any], ...] = tuple(
    {"run_id": f"run_01m8m3yzdenightly{i:010d}", "workflow": "nightly", "status": "done", "park_reason": None,
     "current_node": None, "steps": 3, "revision": 4, "created_at": NOW - 100 - 60 * i,
     "updated_at": NOW - 90 - 60 * i, "finished_at": NOW - 90 - 60 * i} for i in range(30))
TRACEBACK = ('Traceback (most recent call last):\n  File "/w/flow.py", line 12, in build\n    run(ctx)\n'
             '  File "/w/flow.py", line 30, in run\n    raise RuntimeError("[bold]boom[/bold]")\n'
             'RuntimeError: [bold]boom[/bold]\n')
DETAIL: dict[str, Any] = {
    "run_id": BUSY, "workflow": "[red]x[/red]", "status": "failed", "park_reason": None, "park_detail": None,
    "revision": 9, "steps": 4, "current_node": "build", "pause_requested": False, "cancel_requested": False,
    "error": {"code": "node_failed", "message": "build: RuntimeError: [bold]boom[/bold]", "traceback": TRACEBACK},
    "nodes": [{"node_id": "prepare", "status": "succeeded", "attempts": 1, "output": {"words": ["a", "b"]},
               "error": None},
              {"node_id": "build", "status": "failed", "attempts": 2, "output": None,
               "error": {"code": "RuntimeError", "message": "[bold]boom[/bold]"}}],
    "effects": [{"effect_id": "eff_settled", "node_id": "prepare", "status": "settled", "resolution": None},
                {"effect_id": "eff_unknown", "node_id": "build", "status": "ambiguous", "resolution": None}],
}


def snapshot(**changes: Any) -> Snapshot:
    base = Snapshot(
        taken_at=NOW,
        host={"pid": 4242, "epoch": 7,
              "lease": {"epoch": 7, "host_id": "h-1", "live": True, "heartbeat_at": NOW - 1.5,
                        "expires_at": NOW + 13.5},
              "runs": {"queued": 0, "starting": 0, "running": 1, "parked": 2, "done": 30, "failed": 0,
                       "cancelled": 0},
              "workers": {"max": 2, "active": [{"run_id": BUSY, "pid": 5151, "generation": 2}], "idle": 1},
              "writer": {"queue_depth": 3, "commits": 120, "commands": 300, "commits_per_s": 12.5,
                         "commands_per_s": 31.0},
              "gateway": {"connections": 2, "watches": 1, "requests": 40}},
        runs=({"run_id": BUSY, "workflow": "[red]x[/red]", "status": "running", "park_reason": None,
               "current_node": "build", "steps": 4, "revision": 5, "created_at": NOW - 20, "updated_at": NOW - 2},
              {"run_id": RELEASE, "workflow": "release", "status": "parked", "park_reason": "waiting",
               "current_node": "approve", "steps": 1, "revision": 3, "created_at": NOW - 30, "updated_at": NOW - 5},
              {"run_id": AMBIGUOUS, "workflow": "deploy", "status": "parked", "park_reason": "ambiguous_effect",
               "current_node": "push", "steps": 2, "revision": 6, "created_at": NOW - 40, "updated_at": NOW - 7},
              *OLD_RUNS),
        decisions=(DECISION,),
        other_requests=1,
        workers=(WorkerRow(5151, BUSY, 2, 37.5, 50 * 1024 * 1024),),
        events=(EventRow(BUSY, "[red]x[/red]", 9, "node_started", "build", NOW - 2, {"attempt": 1}),
                EventRow(RELEASE, "release", 4, "run_parked", "approve", NOW - 5, {"reason": "waiting"})),
    )
    return dataclasses.replace(base, **changes)
