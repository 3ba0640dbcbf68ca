"""What the benchmark scripts share: the trivial workflow they run and percentiles."""

from __future__ import annotations

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


def pct(samples: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `samples`; NaN when there are none."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]
