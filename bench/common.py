"""What the benchmark scripts share: the trivial workflows they run (a graph, a function), percentiles, thread
groups."""

from __future__ import annotations

import os
import re
import time

WORKFLOW_SOURCE = '''\
"""Three trivial compute nodes: a → b → c."""

from piwf_actors.workflows import compute, define_workflow, edge

trivial = define_workflow(
    name="trivial3",
    start_at="a",
    nodes={
        "a": compute(run=lambda ctx: {"n": 1}),
        "b": compute(run=lambda ctx: {"n": ctx.outputs["a"]["n"] + 1}),
        "c": compute(run=lambda ctx: {"n": ctx.outputs["b"]["n"] + 1}),
    },
    edges=[edge("a", "b"), edge("b", "c")],
)
'''

#: The same three steps as a durable function (docs/functions.md): `throughput.py` runs it beside the graph.
FUNCTION_WORKFLOW_SOURCE = '''\
"""Three trivial steps of a workflow function: a → b → c (and the node `return`, the run's output)."""

from piwf_actors.durable import step, workflow


@step
def a() -> dict:
    return {"n": 1}


@step
def b(n: int) -> dict:
    return {"n": n + 1}


@step
def c(n: int) -> dict:
    return {"n": n + 1}


@workflow(name="trivial3_function")
def trivial_function(i: int = 0, nudge: bool = False) -> dict:
    return c(b(a()["n"])["n"])
'''


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `samples`; NaN when there are none."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


_RUN_ID = re.compile(r"run_[0-9a-z]{6,}")
_SERIAL = re.compile(r"[-_]\d+$")


def thread_group(name: str) -> str:
    """A thread's name without what tells threads of one kind apart.

    "RunnerSupervisor-7" → "RunnerSupervisor", "piwf-gateway_0" → "piwf-gateway",
    "runner-run_01m8pg3k…" → "runner-run_*": pykka numbers its actor threads, a
    ThreadPoolExecutor numbers its workers, and per-run threads carry the run id.
    No list of the host's thread names is kept here, so a renamed thread still
    shows up under its own name.
    """
    grouped = _SERIAL.sub("", _RUN_ID.sub("run_*", name.strip()))
    return grouped or name


def closing_line(began: float) -> str:
    """The last line of a bench: how long it took (since `time.perf_counter()` was `began`) and the
    load average then (a busy machine is what a surprising figure is checked against first)."""
    return (f"total {time.perf_counter() - began:.0f} s; load average now "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
