"""Workflows the browser tests start by file path (never imported by the tests themselves)."""

from __future__ import annotations

from piwf_actors.workflows import (
    agent,
    checkpoint,
    choice,
    compute,
    define_workflow,
    edge,
    human_decision,
    switch,
    text_input,
)

release = define_workflow(
    name="release",
    start_at="approve",
    nodes={
        "approve": human_decision(
            audience="operator",
            choices={"ship": choice(label="Ship it"),
                     "stop": choice(label="Stop"),
                     "fix": choice(label="Needs changes",
                                   input=text_input(name="instructions", prompt="What should change?"))},
            request=lambda ctx: {"title": f"Ship {ctx.input['version']}?",
                                 "summary": f"Tests passed on {ctx.input['version']}; deploy to production?"},
            on_timeout={"after_s": 3600, "response": {"choice": "stop"}},
        ),
        "ship": compute(run=lambda ctx: {"shipped": ctx.input["version"]}),
        "stopped": compute(run=lambda ctx: {"status": "stopped"}),
        "fix": compute(run=lambda ctx: {"todo": ctx.outputs["approve"]["input"]["instructions"]}),
    },
    edges=[switch("approve", on="$.choice", cases={"ship": "ship", "stop": "stopped", "fix": "fix"})],
)

notes = define_workflow(
    name="release-notes",
    start_at="version",
    nodes={"version": checkpoint(prompt="Which version do the notes cover?"),
           "summary": agent(prompt="Summarize the changes in one line",
                            expected_output={"type": "object", "required": ["summary"],
                                             "properties": {"summary": {"type": "string"}}})},
    edges=[edge("version", "summary")],
)
