"""The workflow the `sites` resource manager starts: build a (pretend) static site."""

from piwf_actors.workflows import compute, define_workflow

build_site = define_workflow(
    name="build-site",
    start_at="render",
    nodes={
        "render": compute(run=lambda ctx: {"pages": len(ctx.input["pages"]),
                                           "title": ctx.input["title"].title()}),
    },
    edges=[],
)
