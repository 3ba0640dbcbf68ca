"""A release-style workflow with a person in the loop.

`approve` is a typed human decision: ship, stop, or ask for changes with a
text input. If nobody answers within `after_s`, the default response
(`stop`) is applied with `timeout` provenance.
"""

from piwf_actors.workflows import (
    choice,
    compute,
    decision_switch,
    define_workflow,
    edge,
    human_decision,
    notify,
    shell,
    text_input,
)


def make_release(after_s: float) -> object:
    return define_workflow(
        name="release" if after_s >= 60 else "release-quick",
        start_at="test",
        nodes={
            "test": shell(command=["sh", "-c", "echo 12 passed"], timeout_s=600, idempotent=True),
            "approve": human_decision(
                audience="operator",
                choices={
                    "ship": choice(label="Ship it"),
                    "stop": choice(label="Stop"),
                    "fix": choice(label="Needs changes",
                                  input=text_input(name="instructions", prompt="What should change?")),
                },
                request=lambda ctx: {
                    "title": f"Ship {ctx.input['version']}?",
                    "summary": ctx.outputs["test"]["stdout"].strip(),
                    "blocks": [{"kind": "fields", "fields": [{"label": "version", "value": str(ctx.input["version"])}]}],
                },
                on_timeout={"after_s": after_s, "response": {"choice": "stop"}},
            ),
            "ship": compute(run=lambda ctx: {"shipped": ctx.input["version"]}),
            "stopped": compute(run=lambda ctx: {"status": "stopped"}),
            "fix": notify(message=lambda ctx: ctx.outputs["approve"]["input"]["instructions"]),
        },
        edges=[
            edge("test", "approve"),
            decision_switch("approve", cases={"ship": "ship", "stop": "stopped", "fix": "fix"}),
        ],
    )


release = make_release(3600)
release_quick = make_release(2)
