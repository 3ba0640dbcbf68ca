"""include_workflow: flattening, exits, nested includes, cycles, scoped contexts."""

from __future__ import annotations

from typing import Any

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows import (
    END,
    Edge,
    Switch,
    child_exits,
    compute,
    define_workflow,
    edge,
    include_workflow,
    node_context,
    node_input,
    route,
    switch,
)


def echo_input(ctx: Any) -> Any:
    return ctx.input


def make_child(name: str = "child") -> Any:
    """start → check; check switches on $.ok: true → done (exit), false → END (exit)."""
    return define_workflow(
        name=name, start_at="start",
        nodes={"start": compute(run=echo_input), "check": compute(run=echo_input), "done": compute(run=echo_input)},
        edges=[edge("start", "check"), switch("check", on="$.ok", cases={"true": "done"}, default=END)],
    )


def test_child_exits_are_nodes_that_can_end_it() -> None:
    assert child_exits(make_child()) == ["check", "done"]


def test_flattening_qualifies_nodes_and_routes() -> None:
    child = make_child()
    parent = define_workflow(
        name="parent", start_at="pre",
        nodes={"pre": compute(run=echo_input), "sub": include_workflow(child), "post": compute(run=echo_input)},
        edges=[edge("pre", "sub"), edge("sub.done", "post")],
    )
    assert list(parent.nodes) == ["pre", "sub/start", "sub/check", "sub/done", "post"]
    assert parent.routes["pre"] == Edge("sub/start")
    assert parent.routes["sub/start"] == Edge("sub/check")
    assert parent.routes["sub/check"] == Switch("$.ok", {"true": "sub/done"}, END)
    assert parent.routes["sub/done"] == Edge("post")
    assert parent.nodes["sub/done"].mount == "sub" and parent.nodes["pre"].mount is None
    mount = parent.mounts["sub"]
    assert (mount.parent, mount.workflow_name, mount.start) == (None, "child", "sub/start")


def test_routing_through_include_exits() -> None:
    child = make_child()
    parent = define_workflow(
        name="parent", start_at="sub",
        nodes={"sub": include_workflow(child), "post": compute(run=echo_input), "alt": compute(run=echo_input)},
        edges=[edge("sub.done", "post"), edge("sub.check", "alt")],
    )
    assert parent.start_at == "sub/start"
    assert route(parent, "sub/start", "ok", {}).next_node == "sub/check"
    # The exit's END default is replaced by the outer edge; its true case stays inside.
    assert route(parent, "sub/check", "ok", {"ok": True}).next_node == "sub/done"
    assert route(parent, "sub/check", "ok", {"ok": False}).next_node == "alt"
    assert route(parent, "sub/done", "ok", {}).next_node == "post"
    assert route(parent, "post", "ok", {}).next_node is None


def test_unconnected_exit_ends_the_run() -> None:
    parent = define_workflow(
        name="parent", start_at="sub",
        nodes={"sub": include_workflow(make_child()), "post": compute(run=echo_input)},
        edges=[edge("sub.done", "post")],
    )
    decision = route(parent, "sub/check", "ok", {"ok": False})
    assert decision.next_node is None and decision.error is None


def test_leaving_include_errors() -> None:
    nodes = {"sub": include_workflow(make_child()), "post": compute(run=echo_input)}
    with pytest.raises(WorkflowDefinitionError, match=r"'sub' is an include; leave it through one of its exits \(sub.check, sub.done\)"):
        define_workflow(name="p", start_at="sub", nodes=nodes, edges=[edge("sub", "post")])
    with pytest.raises(WorkflowDefinitionError, match="'start' is not an exit of include 'sub'"):
        define_workflow(name="p", start_at="sub", nodes=nodes, edges=[edge("sub.start", "post")])
    with pytest.raises(WorkflowDefinitionError, match="unknown source node 'nope.done'"):
        define_workflow(name="p", start_at="sub", nodes=nodes, edges=[edge("nope.done", "post")])
    with pytest.raises(WorkflowDefinitionError, match="unknown target node 'sub/done'"):
        define_workflow(name="p", start_at="sub", nodes=nodes, edges=[edge("sub.done", "sub/done")])
    with pytest.raises(WorkflowDefinitionError, match="already routes through a switch inside the include"):
        define_workflow(name="p", start_at="sub", nodes=nodes,
                        edges=[switch("sub.check", on="$.x", cases={"1": "post"})])
    with pytest.raises(WorkflowDefinitionError, match="include 'sub' is unreachable"):
        define_workflow(name="p", start_at="post", nodes=nodes, edges=[])
    with pytest.raises(WorkflowDefinitionError, match="node 'sub': include_workflow\\(\\) needs a Workflow"):
        define_workflow(name="p", start_at="sub", nodes={"sub": include_workflow("child")}, edges=[])  # type: ignore[arg-type]
    with pytest.raises(WorkflowDefinitionError, match="node 'sub': include input must be callable"):
        define_workflow(name="p", start_at="sub", nodes={"sub": include_workflow(make_child(), input={})}, edges=[])  # type: ignore[arg-type]


def test_outer_switch_from_route_less_exit_and_failed_outcome() -> None:
    parent = define_workflow(
        name="parent", start_at="sub",
        nodes={"sub": include_workflow(make_child()), "ok": compute(run=echo_input), "bad": compute(run=echo_input)},
        edges=[switch("sub.done", on="$result.outcome", cases={"ok": "ok", "failed": "bad"})],
    )
    assert route(parent, "sub/done", "failed", {"error": "x"}).next_node == "bad"
    assert route(parent, "sub/start", "failed", {}).error[0] == "node_failed"


def test_nested_includes() -> None:
    inner = make_child("inner")
    middle = define_workflow(
        name="middle", start_at="in",
        nodes={"in": include_workflow(inner, input=lambda ctx: {"depth": 2, "from": ctx.input}),
               "tail": compute(run=echo_input)},
        edges=[edge("in.done", "tail")],
    )
    assert child_exits(middle) == ["in/check", "tail"]
    outer = define_workflow(
        name="outer", start_at="mid",
        nodes={"mid": include_workflow(middle, input=lambda ctx: {"depth": 1}), "last": compute(run=echo_input)},
        edges=[edge("mid.tail", "last"), edge("mid.in/check", "last")],
    )
    assert list(outer.nodes) == ["mid/in/start", "mid/in/check", "mid/in/done", "mid/tail", "last"]
    assert outer.start_at == "mid/in/start"
    assert outer.nodes["mid/in/done"].mount == "mid/in"
    assert outer.mounts["mid/in"].parent == "mid" and outer.mounts["mid/in"].start == "mid/in/start"
    assert route(outer, "mid/in/done", "ok", {}).next_node == "mid/tail"
    assert route(outer, "mid/in/check", "ok", {"ok": "no"}).next_node == "last"
    assert route(outer, "mid/tail", "ok", {}).next_node == "last"
    assert node_input(outer, "mid/in/start", {"run": 0}, {}) == {"depth": 2, "from": {"depth": 1}}
    assert node_input(outer, "mid/tail", {"run": 0}, {}) == {"depth": 1}
    assert node_input(outer, "last", {"run": 0}, {}) == {"run": 0}


def test_include_cycles_are_refused() -> None:
    a1 = make_child("a")
    with pytest.raises(WorkflowDefinitionError, match="node 'self': include cycle: workflow 'a'"):
        define_workflow(name="a", start_at="self", nodes={"self": include_workflow(a1)}, edges=[])
    b = define_workflow(name="b", start_at="x", nodes={"x": include_workflow(a1)}, edges=[])
    with pytest.raises(WorkflowDefinitionError, match="include cycle: workflow 'a' would include itself through 'b'"):
        define_workflow(name="a", start_at="y", nodes={"y": include_workflow(b)}, edges=[])


def test_node_context_scopes_input_and_outputs() -> None:
    seen: list[Any] = []

    def child_input(ctx: Any) -> Any:
        seen.append(ctx)
        return {"n": ctx.outputs["pre"]["n"] + 1}

    parent = define_workflow(
        name="parent", start_at="pre",
        nodes={"pre": compute(run=echo_input), "sub": include_workflow(make_child(), input=child_input),
               "post": compute(run=echo_input)},
        edges=[edge("pre", "sub"), edge("sub.done", "post")],
    )
    outputs = {"pre": {"n": 1}, "sub/start": {"s": 1}, "sub/check": {"ok": True}}
    ctx = node_context(parent, "sub/done", {"run": True}, outputs, run_id="r1", attempt_id="a1")
    assert ctx.input == {"n": 2}
    assert dict(ctx.outputs) == {"start": {"s": 1}, "check": {"ok": True}}
    assert (ctx.run_id, ctx.node_id, ctx.attempt_id) == ("r1", "sub/done", "a1")
    assert seen[0].node_id == "sub" and seen[0].input == {"run": True}
    top = node_context(parent, "post", {"run": True}, outputs)
    assert top.input == {"run": True} and top.outputs["sub/check"] == {"ok": True}
    with pytest.raises(ValueError):
        node_context(parent, "sub", {}, {})


def test_include_without_input_sees_enclosing_input() -> None:
    parent = define_workflow(name="p", start_at="sub", nodes={"sub": include_workflow(make_child())}, edges=[])
    assert node_input(parent, "sub/check", {"x": 1}, {}) == {"x": 1}
