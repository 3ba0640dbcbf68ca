"""Workflows whose deadlines are computed from the run (test_computed_deadlines.py): module-level
attributes of this file, which the host's workers load from its snapshot."""

from __future__ import annotations

from piwf_actors.workflows import checkpoint, choice, compute, decision_switch, define_workflow, edge, human_decision

_CHOICES = {"go": choice(label="Go"), "stop": choice(label="Stop")}
_AFTER = {"go": "went", "stop": "stopped"}


def _outcomes() -> dict:
    return {"went": compute(run=lambda ctx: {"went": True}), "stopped": compute(run=lambda ctx: {"went": False})}


# The whole default computed: the deadline and the response depend on the run's input (None: no deadline).
whole = define_workflow(name="whole", start_at="approve", nodes={
    "approve": human_decision(
        audience="operator", choices=_CHOICES, request={"title": "Go on?"},
        on_timeout=lambda ctx: None if ctx.input.get("hours") is None else {
            "after_s": ctx.input["hours"] * 3600, "response": {"choice": ctx.input.get("default", "stop")}},
    ),
    **_outcomes(),
}, edges=[decision_switch("approve", cases=_AFTER)])

# Only the time computed: the response is checked against the choices when the workflow is defined.
timed = define_workflow(name="timed", start_at="approve", nodes={
    "approve": human_decision(
        audience="operator", choices=_CHOICES, request={"title": "Go on?"},
        on_timeout={"after_s": lambda ctx: ctx.input["hours"] * 3600, "response": {"choice": "stop"}},
    ),
    **_outcomes(),
}, edges=[decision_switch("approve", cases=_AFTER)])

note = define_workflow(name="note", start_at="ask", nodes={
    "ask": checkpoint(prompt="Anything to note?", timeout_s=lambda ctx: ctx.input["minutes"] * 60),
    "noted": compute(run=lambda ctx: {"note": ctx.outputs["ask"]}),
}, edges=[edge("ask", "noted")])
