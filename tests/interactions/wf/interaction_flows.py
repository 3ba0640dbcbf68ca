"""Workflows for the interaction tests (started by file path, never imported by the tests).

Input keys the nodes understand:
- `version`: shown in the decision's title;
- `oracle`: a file every node after a waiting node appends `"<node_id> <run_id>"` to,
  so a test can count executions outside the database;
- `sleep`: seconds the `blocker` node sleeps.
"""

from __future__ import annotations

import time

from piwf_actors.workflows import (
    agent,
    checkpoint,
    choice,
    compute,
    decision_switch,
    define_workflow,
    edge,
    human_decision,
    notify,
    text_input,
)


def _record(ctx) -> None:
    path = ctx.input.get("oracle") if hasattr(ctx.input, "get") else None
    if path:
        with open(path, "a") as oracle:
            oracle.write(f"{ctx.node_id} {ctx.run_id}\n")


def _ship(ctx):
    _record(ctx)
    return {"shipped": ctx.input["version"]}


def _stopped(ctx):
    _record(ctx)
    return {"status": "stopped"}


def _fix_message(ctx):
    _record(ctx)
    return ctx.outputs["approve"]["input"]["instructions"]


def make_decide(name: str, after_s: float):
    """`approve` (ship / stop / fix with a 1..20 character instruction) routes to a node each."""
    return define_workflow(
        name=name,
        start_at="approve",
        nodes={
            "approve": human_decision(
                audience="operator",
                choices={
                    "ship": choice(label="Ship it"),
                    "stop": choice(label="Stop"),
                    "fix": choice(label="Needs changes",
                                  input=text_input(name="instructions", prompt="What should change?",
                                                   min_length=1, max_length=20)),
                },
                request=lambda ctx: {"title": f"Ship {ctx.input['version']}?", "summary": "Tests passed.",
                                     "blocks": [{"kind": "bullets", "items": ["changelog updated"]}]},
                on_timeout={"after_s": after_s, "response": {"choice": "stop"}},
            ),
            "ship": compute(run=_ship),
            "stopped": compute(run=_stopped),
            "fix": notify(message=_fix_message),
        },
        edges=[decision_switch("approve", cases={"ship": "ship", "stop": "stopped", "fix": "fix"})],
    )


decide = make_decide("decide", 3600)
decide_quick = make_decide("decide-quick", 1)  # the default applies while a host runs
decide_crash = make_decide("decide-crash", 4)  # the default applies while no host runs
decide_paused = make_decide("decide-paused", 2)  # paused before the default applies


def _block(ctx):
    _record(ctx)
    time.sleep(float(ctx.input.get("sleep", 30)))
    return {"blocked": True}


blocker = define_workflow(name="blocker", start_at="block", nodes={"block": compute(run=_block)}, edges=[])


# --- a checkpoint, then a notification ---------------------------------------------------

checkpointed = define_workflow(
    name="checkpointed",
    start_at="ask",
    nodes={
        "ask": checkpoint(prompt=lambda ctx: f"What should {ctx.input['version']} contain?"),
        "tell": notify(message=lambda ctx: f"got {len(ctx.outputs['ask']['items'])} item(s)"),
    },
    edges=[edge("ask", "tell")],
)

checkpoint_quick = define_workflow(
    name="checkpoint-quick",
    start_at="ask",
    nodes={"ask": checkpoint(prompt="Anything to add?", timeout_s=2), "tell": notify(message="thanks")},
    edges=[edge("ask", "tell")],
)


# --- agent steps -------------------------------------------------------------------------

SUMMARY_SHAPE = {
    "type": "object",
    "required": ["summary"],
    "properties": {"summary": {"type": "string"}},
    "additionalProperties": False,
}


def _long_enough(_ctx, value):
    return None if len(value["summary"]) >= 5 else "summary is shorter than 5 characters"


def _after_agent(ctx):
    _record(ctx)
    return {"summary": ctx.outputs["summarize"]["summary"]}


def _agent_flow(name: str, *, max_submissions: int = 3, timeout_s: float | None = None):
    return define_workflow(
        name=name,
        start_at="summarize",
        nodes={
            "summarize": agent(prompt=lambda ctx: f"Summarize {ctx.input['topic']}", expected_output=SUMMARY_SHAPE,
                               validate=_long_enough, max_submissions=max_submissions, timeout_s=timeout_s),
            "after": compute(run=_after_agent),
        },
        edges=[edge("summarize", "after")],
    )


summarizer = _agent_flow("summarizer")
summarizer_two = _agent_flow("summarizer-two", max_submissions=2)
summarizer_timeout = _agent_flow("summarizer-timeout", max_submissions=1, timeout_s=1)
summarizer_paused = _agent_flow("summarizer-paused", max_submissions=1, timeout_s=2)
