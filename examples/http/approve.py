"""A release that waits for a person's decision: the workflow of docs/http.md's curl examples."""

from piwf_actors.workflows import choice, compute, define_workflow, human_decision, switch

approve = define_workflow(
    name="approve",
    start_at="decide",
    nodes={
        "decide": human_decision(
            audience="operator",
            choices={"ship": choice(label="Ship it"), "stop": choice(label="Stop")},
            request=lambda ctx: {"title": f"Ship {ctx.input['version']}?", "summary": "Tests passed."},
        ),
        "shipped": compute(run=lambda ctx: {"shipped": ctx.input["version"]}),
        "stopped": compute(run=lambda ctx: {"stopped": ctx.input["version"]}),
    },
    edges=[switch("decide", on="$.choice", cases={"ship": "shipped", "stop": "stopped"})],
)
