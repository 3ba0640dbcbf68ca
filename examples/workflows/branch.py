"""Branching with `switch`: route on a field of the previous node's output."""

from piwf_actors.workflows import compute, define_workflow, switch

triage = define_workflow(
    name="triage",
    start_at="classify",
    nodes={
        "classify": compute(run=lambda ctx: {"size": "large" if ctx.input.get("bytes", 0) > 1_000_000 else "small"}),
        "archive": compute(run=lambda ctx: {"action": "archived to cold storage"}),
        "keep": compute(run=lambda ctx: {"action": "kept in place"}),
    },
    edges=[switch("classify", on="$.size", cases={"large": "archive", "small": "keep"})],
)
