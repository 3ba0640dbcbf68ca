"""A loop bounded by `max_steps`: `bump` counts up and routes back to itself until
the counter reaches the input's target. With target 3 it finishes; with a target
past the step budget the run fails with `max_steps_exceeded` instead of spinning."""

from piwf_actors.workflows import compute, define_workflow, edge, switch

counter = define_workflow(
    name="counter",
    start_at="start",
    max_steps=10,
    nodes={
        "start": compute(run=lambda ctx: {"n": 0}),
        "bump": compute(run=lambda ctx: {
            "n": ctx.outputs.get("bump", ctx.outputs["start"])["n"] + 1,
            "more": ctx.outputs.get("bump", ctx.outputs["start"])["n"] + 1 < ctx.input["target"],
        }),
        "done": compute(run=lambda ctx: {"count": ctx.outputs["bump"]["n"]}),
    },
    edges=[edge("start", "bump"), switch("bump", on="$.more", cases={"true": "bump", "false": "done"})],
)
