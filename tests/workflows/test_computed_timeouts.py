"""Deadlines computed from the run, as a definition sees them: a decision's `on_timeout` (all of it, or
only its `after_s`) and a checkpoint's `timeout_s` may be callables of ctx; what can be checked when
the workflow is defined still is, the rest is checked when the worker calls them
(`validation.decision_timeout_for`, `checked_seconds`; on a real host: tests/testing/
test_computed_deadlines.py). The drawing says "(computed)" where a constant shows its duration."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows import (
    DecisionTimeout,
    checkpoint,
    choice,
    compute,
    define_workflow,
    edge,
    human_decision,
    text_input,
)
from piwf_actors.workflows.graph import build_graph
from piwf_actors.workflows.graph_render import render_mermaid, render_text
from piwf_actors.workflows.validation import checked_seconds, decision_timeout_for


def _decision(on_timeout: Any) -> Any:
    return human_decision(audience="ops", choices={"yes": choice("Yes"),
                                                   "no": choice("No", input=text_input("why", "Why?", 1, 10))},
                          request={"title": "T"}, on_timeout=on_timeout)


def _one(spec: Any) -> Any:
    return define_workflow(name="wf", start_at="n", nodes={"n": spec}, edges=[])


def _ctx(**data: Any) -> Any:
    return SimpleNamespace(input=data)


def test_a_callable_on_timeout_is_kept_and_checked_when_called() -> None:
    spec = _one(_decision(lambda ctx: {"after_s": ctx.input["s"], "response": {"choice": "yes"}})).nodes["n"]
    assert callable(spec.on_timeout)
    assert decision_timeout_for("n", spec, _ctx(s=90)) == DecisionTimeout(after_s=90.0, choice="yes")
    cases = [
        ({"after_s": 0, "response": {"choice": "yes"}}, "on_timeout.after_s must be a positive number of seconds"),
        ({"after_s": 60, "response": {"choice": "no"}}, "on_timeout.response: choice 'no' needs input"),
        ({"after_s": lambda ctx: 60, "response": {"choice": "yes"}}, "on_timeout.after_s must be a number of seconds, got function"),
        ({"after_s": 60}, "on_timeout must be {'after_s'"),
        ("soon", "on_timeout must be .* got 'soon'"),
    ]
    for returned, message in cases:
        computed = _one(_decision(lambda ctx, value=returned: value)).nodes["n"]
        with pytest.raises(WorkflowDefinitionError, match=f"^node 'n': {message}"):
            decision_timeout_for("n", computed, _ctx())
    assert decision_timeout_for("n", _one(_decision(lambda ctx: None)).nodes["n"], _ctx()) is None


def test_a_callable_after_s_keeps_the_response_checked_when_the_workflow_is_defined() -> None:
    spec = _one(_decision({"after_s": lambda ctx: ctx.input["s"], "response": {"choice": "yes"}})).nodes["n"]
    assert decision_timeout_for("n", spec, _ctx(s=5)) == DecisionTimeout(after_s=5.0, choice="yes")
    assert decision_timeout_for("n", spec, _ctx(s=None)) is None  # no deadline this time
    with pytest.raises(WorkflowDefinitionError, match="node 'n': on_timeout.after_s must be a number of seconds, got str"):
        decision_timeout_for("n", spec, _ctx(s="x"))
    with pytest.raises(WorkflowDefinitionError, match="node 'n': on_timeout.response: unknown choice 'maybe'"):
        _one(_decision({"after_s": lambda ctx: 60, "response": {"choice": "maybe"}}))


def test_a_checkpoint_timeout_may_be_computed_and_other_nodes_timeouts_may_not() -> None:
    spec = _one(checkpoint(prompt="p", timeout_s=lambda ctx: ctx.input["s"])).nodes["n"]
    assert callable(spec.timeout_s)
    assert checked_seconds("n", 30) == 30.0 and checked_seconds("n", None) is None
    for bad in (0, -1, float("nan"), float("inf"), True, "30", [30]):
        with pytest.raises(WorkflowDefinitionError, match="^node 'n': timeout_s must be a (positive |finite )?number of seconds"):
            checked_seconds("n", bad)
    # The error stays one short line whatever came back.
    with pytest.raises(WorkflowDefinitionError) as caught:
        checked_seconds("n", "9" * 5000)
    assert len(str(caught.value)) < 200
    with pytest.raises(WorkflowDefinitionError, match="node 'n': timeout_s must be a number of seconds, got function"):
        _one(compute(run=lambda ctx: {}, timeout_s=lambda ctx: 5))


def test_digests_tell_computations_apart() -> None:
    def digest(spec: Any) -> str:
        return _one(spec).digest

    assert digest(checkpoint(timeout_s=lambda ctx: 60)) == digest(checkpoint(timeout_s=lambda ctx: 60))
    assert digest(checkpoint(timeout_s=lambda ctx: 60)) != digest(checkpoint(timeout_s=lambda ctx: 61))
    assert digest(checkpoint(timeout_s=lambda ctx: 60)) != digest(checkpoint(timeout_s=60))
    response = {"choice": "yes"}
    assert (digest(_decision({"after_s": lambda ctx: 60, "response": response}))
            != digest(_decision({"after_s": lambda ctx: 120, "response": response})))
    assert (digest(_decision(lambda ctx: {"after_s": 60, "response": response}))
            != digest(_decision({"after_s": 60, "response": response})))


def test_the_drawing_says_a_timeout_is_computed() -> None:
    wf = define_workflow(name="wf", start_at="a", nodes={
        "a": _decision(lambda ctx: None),
        "b": _decision({"after_s": lambda ctx: 60, "response": {"choice": "yes"}}),
        "c": checkpoint(prompt="Note?", timeout_s=lambda ctx: 60),
        "d": checkpoint(prompt="Fixed", timeout_s=90),
    }, edges=[edge("a", "b"), edge("b", "c"), edge("c", "d")])
    summaries = {node.node_id: node.summary for node in build_graph(wf).nodes}
    assert summaries["a"] == "ops · yes | no · timeout (computed)"
    assert summaries["b"] == "ops · yes | no · timeout (computed) → yes"
    assert summaries["c"] == "Note? · timeout (computed)"
    assert summaries["d"] == "Fixed · timeout 1m30s"
    assert "timeout (computed)" in render_text(build_graph(wf))
    assert "timeout (computed) → yes" in render_mermaid(build_graph(wf))
