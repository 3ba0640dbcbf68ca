"""A run per GitHub push: the webhook of docs/http.md's "Webhooks" (the push event's body is the input)."""

from piwf_actors.workflows import compute, define_workflow

on_push = define_workflow(
    name="on_push",
    start_at="summarize",
    nodes={
        "summarize": compute(run=lambda ctx: {"branch": ctx.input["ref"].removeprefix("refs/heads/"),
                                              "head": ctx.input["after"], "commits": len(ctx.input["commits"])}),
    },
    edges=[],
)
