"""A three-node pipeline: compute → shell → compute."""

from piwf_actors.workflows import compute, define_workflow, edge, shell

pipeline = define_workflow(
    name="pipeline",
    start_at="prepare",
    nodes={
        "prepare": compute(run=lambda ctx: {"words": ctx.input.get("text", "hello durable world").split()}),
        "count": shell(command=lambda ctx: ["sh", "-c", f"echo {len(ctx.outputs['prepare']['words'])}"]),
        "report": compute(run=lambda ctx: {"words": int(ctx.outputs["count"]["stdout"].strip()),
                                           "first": ctx.outputs["prepare"]["words"][0]}),
    },
    edges=[edge("prepare", "count"), edge("count", "report")],
)
