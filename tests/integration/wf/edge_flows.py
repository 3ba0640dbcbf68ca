"""Workflows for the edge tests (large state, scheduling order, watchdog, lease fencing, disk full).

Nodes that do work record themselves in an oracle file outside the database,
as in recovery_flows.py (`ctx.input["oracle"]`).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from recovery_flows import record  # a sibling: the file's directory is on sys.path while it loads

from piwf_actors.workflows import checkpoint, compute, define_workflow, edge, shell

# --- large state: six shell nodes of ~0.9 MB each, then a checkpoint -------------------------

BIG_NODES = [f"big{i}" for i in range(1, 7)]


def _sizes(ctx):
    """Read every big output in full (in the worker) and return their sizes."""
    record(ctx)
    return {node: len(ctx.outputs[node]["stdout"]) for node in BIG_NODES}


large_state = define_workflow(
    name="large-state",
    start_at="big1",
    nodes={
        **{node: shell(command=["python3", "-c", f"import sys; sys.stdout.write('{i}' * 900_000)"])
           for i, node in enumerate(BIG_NODES, 1)},
        "gate": checkpoint(prompt="go on?"),
        "sizes": compute(run=_sizes),
    },
    edges=[*(edge(a, b) for a, b in zip(BIG_NODES, BIG_NODES[1:], strict=False)), edge(BIG_NODES[-1], "gate"),
           edge("gate", "sizes")],
)

quick = define_workflow(name="quick", start_at="q", nodes={"q": compute(run=lambda ctx: {"quick": True})},
                        edges=[])

# --- scheduling order: a waiting run and a flood of fresh ones ---------------------------------


def _short(ctx):
    record(ctx)
    time.sleep(ctx.input.get("sleep", 0.05))
    return {"node": ctx.node_id}


waits = define_workflow(
    name="waits",
    start_at="before",
    nodes={"before": compute(run=_short), "ask": checkpoint(prompt="answer me"), "after": compute(run=_short)},
    edges=[edge("before", "ask"), edge("ask", "after")],
)

fresh = define_workflow(name="fresh", start_at="work", nodes={"work": compute(run=_short)}, edges=[])


# --- watchdog: a node its own worker cannot interrupt ------------------------------------------


def _stuck(ctx):
    """Block SIGALRM (the worker's own timeout) and sleep: only a kill from outside ends this."""
    record(ctx)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(120)
    return {"never": True}


stuck = define_workflow(
    name="stuck",
    start_at="stuck",
    nodes={"stuck": compute(run=_stuck, timeout_s=1), "after": compute(run=_short)},
    edges=[edge("stuck", "after")],
)

# --- lease fencing: many quick compute nodes in a chain ------------------------------------------

CHAIN = [f"c{i}" for i in range(1, 201)]


def _tick(ctx):
    record(ctx)
    time.sleep(ctx.input.get("sleep", 0.02))
    return {"node": ctx.node_id}


chain = define_workflow(
    name="chain",
    start_at=CHAIN[0],
    nodes={node: compute(run=_tick) for node in CHAIN},
    edges=[edge(a, b) for a, b in zip(CHAIN, CHAIN[1:], strict=False)],
    max_steps=1000,
)

# --- worker start-up timeout: the snapshot hangs on load in the worker, once --------------------

if sys.argv[0].endswith(os.path.join("worker", "main.py")):  # only in a worker process, never the host
    _flag = os.environ.get("PIWF_EDGE_HANG_FLAG")
    if _flag and not os.path.exists(_flag):
        with open(_flag, "w") as _handle:
            _handle.write(str(os.getpid()))
        time.sleep(120)

slow_start = define_workflow(name="slow-start", start_at="only", nodes={"only": compute(run=_short)}, edges=[])
