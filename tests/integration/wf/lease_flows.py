"""The workflow of the lease contention test (test_lease_contention.py): many short runs under one
concurrency key, so that every idle worker of three hosts keeps trying to claim while only two
runs may execute, and the hosts' claim transactions keep conflicting under SERIALIZABLE.

Input: `key` (the concurrency key), `sleep` (seconds the node takes, default 0.01).
"""

from __future__ import annotations

import time

from piwf_actors.workflows import compute, define_workflow, limit

#: Active runs per key.
LIMIT = 2


def _work(ctx):
    time.sleep(ctx.input.get("sleep", 0.01))
    return {"ok": True}


keyed = define_workflow(name="keyed", start_at="work", nodes={"work": compute(run=_work)}, edges=[],
                        concurrency=limit(LIMIT, key=lambda run_input: {"key": run_input["key"]}))
