"""define_workflow: every validation error, and the normalized model it builds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows import (
    END,
    DecisionTimeout,
    Edge,
    Switch,
    action,
    agent,
    checkpoint,
    choice,
    compute,
    decision_switch,
    define_workflow,
    edge,
    human_decision,
    notify,
    shell,
    switch,
    text_input,
)


def noop(ctx: Any) -> dict[str, Any]:
    return {}


def one(node: Any, **kwargs: Any) -> Any:
    """A workflow with the single node `n`."""
    return define_workflow(name="wf", start_at="n", nodes={"n": node}, edges=[], **kwargs)


def decision(**kwargs: Any) -> Any:
    options: dict[str, Any] = {
        "audience": "ops",
        "choices": {"yes": choice("Yes"), "no": choice("No", input=text_input("why", "Why not?", 1, 10))},
        "request": {"title": "Go?"},
    }
    options.update(kwargs)
    return human_decision(**options)


def test_minimal_workflow_model() -> None:
    wf = define_workflow(
        name="build-1", start_at="a",
        nodes={"a": compute(run=noop, timeout_s=5), "b": shell(["echo", "x"], idempotent=True)},
        edges=[edge("a", "b")], description="demo",
    )
    assert wf.name == "build-1" and wf.start_at == "a" and wf.max_steps == 100
    assert wf.routes == {"a": Edge("b")}
    assert wf.nodes["a"].kind == "compute" and wf.nodes["a"].timeout_s == 5.0
    assert isinstance(wf.nodes["a"].timeout_s, float)
    assert wf.nodes["b"].command == ("echo", "x")
    assert wf.nodes["b"].has_side_effect and wf.nodes["b"].idempotent
    assert not wf.nodes["a"].has_side_effect and wf.nodes["a"].idempotent
    assert wf.source_path == __file__ and wf.attr is None
    assert len(wf.digest) == 64 and int(wf.digest, 16) >= 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        wf.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        wf.nodes["c"] = wf.nodes["a"]  # type: ignore[index]


def test_kind_flags() -> None:
    nodes = {
        "c": compute(run=noop), "a": action(run=noop), "s": shell("ls"), "k": checkpoint("ok?"),
        "n": notify("hi"), "g": agent("do it"), "h": decision(),
    }
    edges = [edge("c", "a"), edge("a", "s"), edge("s", "k"), edge("k", "n"), edge("n", "g"),
             edge("g", "h"), decision_switch("h", {"yes": END, "no": END})]
    wf = define_workflow(name="kinds", start_at="c", nodes=nodes, edges=edges)
    kinds = {node_id: spec.kind for node_id, spec in wf.nodes.items()}
    assert kinds == {"c": "compute", "a": "action", "s": "shell", "k": "checkpoint", "n": "notify",
                     "g": "agent", "h": "human_decision"}
    assert {n for n, s in wf.nodes.items() if s.has_side_effect} == {"a", "s"}
    assert {n for n, s in wf.nodes.items() if not s.idempotent} == {"a", "s"}
    assert wf.nodes["k"].timeout_s is None and wf.nodes["a"].timeout_s == 900.0


@pytest.mark.parametrize("name", ["", "Release", "-x", "a b", "a.b", "a/b", 7, "é"])
def test_bad_workflow_name(name: Any) -> None:
    with pytest.raises(WorkflowDefinitionError, match="workflow name"):
        define_workflow(name=name, start_at="n", nodes={"n": compute(run=noop)}, edges=[])


@pytest.mark.parametrize("node_id", ["", "a/b", "a.b", "-a", "a b", 3])
def test_bad_node_id(node_id: Any) -> None:
    with pytest.raises(WorkflowDefinitionError, match="node id"):
        define_workflow(name="wf", start_at="n", nodes={node_id: compute(run=noop)}, edges=[])


def test_node_ids_may_use_upper_case_digits_dash_underscore() -> None:
    wf = define_workflow(name="wf", start_at="_A-1", nodes={"_A-1": compute(run=noop)}, edges=[])
    assert list(wf.nodes) == ["_A-1"]


def test_unknown_start_node() -> None:
    with pytest.raises(WorkflowDefinitionError, match="unknown start node 'zz'"):
        define_workflow(name="wf", start_at="zz", nodes={"n": compute(run=noop)}, edges=[])


def test_unknown_edge_source_and_target() -> None:
    nodes = {"a": compute(run=noop), "b": compute(run=noop)}
    with pytest.raises(WorkflowDefinitionError, match="edge from 'x': unknown source node 'x'"):
        define_workflow(name="wf", start_at="a", nodes=nodes, edges=[edge("a", "b"), edge("x", "b")])
    with pytest.raises(WorkflowDefinitionError, match="edge from 'a': unknown target node 'c'"):
        define_workflow(name="wf", start_at="a", nodes=nodes, edges=[edge("a", "c")])
    with pytest.raises(WorkflowDefinitionError, match="switch from 'a', case 'k': unknown target node 'c'"):
        define_workflow(name="wf", start_at="a", nodes=nodes,
                        edges=[switch("a", on="$.k", cases={"k": "c"}, default="b")])
    with pytest.raises(WorkflowDefinitionError, match="switch from 'a', default: unknown target node 'c'"):
        define_workflow(name="wf", start_at="a", nodes=nodes,
                        edges=[switch("a", on="$.k", cases={"k": "b"}, default="c")])


def test_more_than_one_outgoing_route() -> None:
    nodes = {"a": compute(run=noop), "b": compute(run=noop), "c": compute(run=noop)}
    with pytest.raises(WorkflowDefinitionError, match=r"'a' has more than one outgoing route \(edges\[0\] and edges\[1\]\)"):
        define_workflow(name="wf", start_at="a", nodes=nodes,
                        edges=[edge("a", "b"), switch("a", on="$.x", cases={"1": "c"}), edge("b", "c")])


def test_unreachable_node() -> None:
    nodes = {"a": compute(run=noop), "b": compute(run=noop), "lost": compute(run=noop)}
    with pytest.raises(WorkflowDefinitionError, match="node 'lost' is unreachable from start node 'a'"):
        define_workflow(name="wf", start_at="a", nodes=nodes, edges=[edge("a", "b"), edge("lost", "b")])


@pytest.mark.parametrize("max_steps", [0, -1, 1.5, True, "10"])
def test_non_positive_max_steps(max_steps: Any) -> None:
    with pytest.raises(WorkflowDefinitionError, match="max_steps must be a positive integer"):
        one(compute(run=noop), max_steps=max_steps)


def test_empty_nodes_and_bad_edges() -> None:
    with pytest.raises(WorkflowDefinitionError, match="nodes must be a non-empty mapping"):
        define_workflow(name="wf", start_at="a", nodes={}, edges=[])
    with pytest.raises(WorkflowDefinitionError, match="edges must be a list"):
        define_workflow(name="wf", start_at="a", nodes={"a": compute(run=noop)}, edges="a->b")  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match=r"edges\[0\] must be built with edge\(\) or switch\(\)"):
        define_workflow(name="wf", start_at="a", nodes={"a": compute(run=noop)}, edges=[("a", "b")])  # type: ignore[list-item]
    with pytest.raises(WorkflowDefinitionError, match="node 'a': expected a node helper"):
        define_workflow(name="wf", start_at="a", nodes={"a": noop}, edges=[])


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (compute(run=42), "node 'n': run must be callable, got int"),  # type: ignore[arg-type]
        (action(run="deploy"), "node 'n': run must be callable, got str"),  # type: ignore[arg-type]
        (agent("p", validate=3), "node 'n': validate must be callable"),  # type: ignore[arg-type]
        (checkpoint(prompt=5), "node 'n': prompt must be a string or a callable"),  # type: ignore[arg-type]
        (notify(message=None), "node 'n': message must be a string or a callable"),
        (agent(prompt=None), "node 'n': prompt must be a string or a callable"),
        (shell(command=5), "node 'n': command must be a list, a string or a callable"),
        (shell(command=[]), "node 'n': command must be a non-empty list of strings"),
        (shell(command=["ls", 1]), "node 'n': command must be a non-empty list of strings"),
        (shell(command="  "), "node 'n': command must not be empty"),
        (shell(command="ls", cwd=3), "node 'n': cwd must be a string or a callable"),
        (shell(command="ls", env=["A=1"]), "node 'n': env must be a mapping or a callable"),
        (shell(command="ls", env={"A": 1}), "node 'n': env entry 'A'"),
        (decision(request=["x"]), "node 'n': request must be a mapping or a callable"),
        (decision(request={"t": object()}), "node 'n': request must be JSON-shaped"),
    ],
)
def test_bad_node_options(node: Any, message: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=message):
        one(node)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (compute(run=noop, timeout_s=-1), "timeout_s must be a positive number of seconds, got -1"),
        (compute(run=noop, timeout_s=0), "timeout_s must be a positive"),
        (action(run=noop, timeout_s=float("inf")), "timeout_s must be a finite number of seconds, got inf"),
        (shell("ls", timeout_s="5"), "timeout_s must be a number of seconds, got str"),  # type: ignore[arg-type]
        (checkpoint(timeout_s=-5), "timeout_s must be a positive"),
        (agent("p", timeout_s=-0.1), "timeout_s must be a positive"),
        (compute(run=noop, retries=-1), "retries must be a non-negative integer, got -1"),
        (compute(run=noop, retries=1.5), "retries must be a non-negative integer"),  # type: ignore[arg-type]
        (action(run=noop, retry_backoff_s=-2), "retry_backoff_s must be a non-negative number"),
        (agent("p", max_submissions=0), "max_submissions must be a positive integer"),
        (action(run=noop, idempotent="yes"), "idempotent must be true or false"),  # type: ignore[arg-type]
    ],
)
def test_bad_numbers(node: Any, message: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=f"node 'n': {message}"):
        one(node)


def test_agent_expected_output_schema_is_checked() -> None:
    good = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    wf = one(agent("p", expected_output=good))
    assert wf.nodes["n"].expected_output["properties"]["ok"] == {"type": "boolean"}
    with pytest.raises(WorkflowDefinitionError, match="node 'n': expected_output: schema at \\$.ok has type 'bool'"):
        one(agent("p", expected_output={"type": "object", "properties": {"ok": {"type": "bool"}}}))
    with pytest.raises(WorkflowDefinitionError, match="unsupported keyword 'pattern'"):
        one(agent("p", expected_output={"type": "string", "pattern": "x"}))


def test_human_decision_choices_validated() -> None:
    with pytest.raises(WorkflowDefinitionError, match="node 'n': choices must be a non-empty mapping"):
        one(decision(choices={}))
    with pytest.raises(WorkflowDefinitionError, match="choice key 'a b'"):
        one(decision(choices={"a b": choice("A")}))
    with pytest.raises(WorkflowDefinitionError, match="choice 'a' must be built with choice"):
        one(decision(choices={"a": "A"}))
    with pytest.raises(WorkflowDefinitionError, match="choice 'a' needs a non-empty label"):
        one(decision(choices={"a": choice("")}))
    with pytest.raises(WorkflowDefinitionError, match="text input needs 0 <= min_length <= max_length"):
        one(decision(choices={"a": choice("A", input=text_input("t", "T", 5, 2))}))
    with pytest.raises(WorkflowDefinitionError, match="audience must be a non-empty string"):
        one(decision(audience=""))


def test_on_timeout_validated_against_choices() -> None:
    wf = one(decision(on_timeout={"after_s": 60, "response": {"choice": "no", "input": {"why": "late"}}}))
    timeout = wf.nodes["n"].on_timeout
    assert timeout == DecisionTimeout(after_s=60.0, choice="no", input={"why": "late"})
    assert timeout.response() == {"choice": "no", "input": {"why": "late"}}
    bad = [
        ({"after_s": 60, "response": {"choice": "maybe"}}, "unknown choice 'maybe'"),
        ({"after_s": 60, "response": {"choice": "yes", "input": {"x": "y"}}}, "choice 'yes' takes no input"),
        ({"after_s": 60, "response": {"choice": "no"}}, "choice 'no' needs input"),
        ({"after_s": 60, "response": {"choice": "no", "input": {"why": "x" * 11}}}, "1..10 characters"),
        ({"after_s": -1, "response": {"choice": "yes"}}, "on_timeout.after_s must be a positive"),
        ({"response": {"choice": "yes"}}, "on_timeout must be"),
    ]
    for on_timeout, message in bad:
        with pytest.raises(WorkflowDefinitionError, match=f"node 'n': .*{message}"):
            one(decision(on_timeout=on_timeout))


def test_decision_switch_must_cover_every_choice_once() -> None:
    nodes = {"d": decision(), "y": compute(run=noop), "x": compute(run=noop)}
    ok = define_workflow(name="wf", start_at="d", nodes=nodes,
                         edges=[decision_switch("d", {"yes": "y", "no": "x"})])
    assert ok.routes["d"] == Switch("$.choice", {"yes": "y", "no": "x"}, None)
    with pytest.raises(WorkflowDefinitionError, match="switch on node 'd': choice 'no' has no case"):
        define_workflow(name="wf", start_at="d", nodes=nodes,
                        edges=[decision_switch("d", {"yes": "y"}), edge("y", "x")])
    with pytest.raises(WorkflowDefinitionError, match="switch on node 'd': case 'maybe' is not a choice"):
        define_workflow(name="wf", start_at="d", nodes=nodes,
                        edges=[decision_switch("d", {"yes": "y", "no": "x", "maybe": "x"})])
    with pytest.raises(WorkflowDefinitionError, match="choice 'no' has no case"):
        define_workflow(name="wf", start_at="d", nodes=nodes,
                        edges=[switch("d", on="$output.choice", cases={"yes": "y"}, default="x")])


def test_switch_syntax_checked() -> None:
    nodes = {"a": compute(run=noop), "b": compute(run=noop)}
    for on in ["choice", "$.", "$.a..b", "$result.output", "$input.x", "$.a b"]:
        with pytest.raises(WorkflowDefinitionError, match="switch from 'a': on="):
            define_workflow(name="wf", start_at="a", nodes=nodes, edges=[switch("a", on=on, cases={"x": "b"})])
    with pytest.raises(WorkflowDefinitionError, match="case 'fail' can never match \\$result.outcome"):
        define_workflow(name="wf", start_at="a", nodes=nodes,
                        edges=[switch("a", on="$result.outcome", cases={"ok": "b", "fail": END})])
    with pytest.raises(WorkflowDefinitionError, match="case key 1 must be a string"):
        define_workflow(name="wf", start_at="a", nodes=nodes, edges=[switch("a", on="$.x", cases={1: "b"})])  # type: ignore[dict-item]
    with pytest.raises(WorkflowDefinitionError, match="at least one case"):
        define_workflow(name="wf", start_at="a", nodes=nodes, edges=[switch("a", on="$.x", cases={})])


def test_edge_to_end_marks_terminal_and_switch_may_end() -> None:
    nodes = {"a": compute(run=noop), "b": compute(run=noop)}
    wf = define_workflow(name="wf", start_at="a", nodes=nodes,
                         edges=[switch("a", on="$.go", cases={"true": "b"}, default=END), edge("b", END)])
    assert "b" not in wf.routes
    assert wf.routes["a"] == Switch("$.go", {"true": "b"}, END)


def test_loops_are_allowed() -> None:
    nodes = {"a": compute(run=noop), "b": compute(run=noop)}
    wf = define_workflow(name="wf", start_at="a", nodes=nodes, max_steps=7,
                         edges=[edge("a", "b"), switch("b", on="$.again", cases={"true": "a"}, default=END)])
    assert wf.max_steps == 7 and wf.routes["b"].cases == {"true": "a"}


def test_helper_arguments_are_copied() -> None:
    env = {"A": "1"}
    request = {"title": "x", "tags": ["a"]}
    wf = define_workflow(name="wf", start_at="s",
                         nodes={"s": shell("env", env=env), "d": decision(request=request)},
                         edges=[edge("s", "d"), decision_switch("d", {"yes": END, "no": END})])
    env["A"] = "2"
    request["tags"].append("b")  # type: ignore[attr-defined]
    assert wf.nodes["s"].env == {"A": "1"}
    assert wf.nodes["d"].request["tags"] == ("a",)
