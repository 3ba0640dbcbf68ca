"""route(): the pure routing function."""

from __future__ import annotations

from typing import Any

import pytest

from piwf_actors.workflows import END, RouteDecision, compute, define_workflow, edge, route, switch


def noop(ctx: Any) -> None:
    return None


def flow(*edges: Any) -> Any:
    nodes = {name: compute(run=noop) for name in ("a", "b", "c", "d")}
    return define_workflow(name="r", start_at="a", nodes=nodes, edges=list(edges) + [edge("b", "c"), edge("c", "d")])


def test_edge_and_terminal() -> None:
    wf = flow(edge("a", "b"))
    assert route(wf, "a", "ok", None) == RouteDecision(next_node="b")
    assert route(wf, "d", "ok", {"x": 1}) == RouteDecision(next_node=None, error=None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("yes", "b"), (True, "c"), (False, "d"), (3, "b"), (None, "c"),
        (3.0, "d"), ([1], "d"), ({"k": 1}, "d"), ("3", "b"),
    ],
)
def test_switch_value_to_case_key(value: Any, expected: str) -> None:
    wf = flow(switch("a", on="$.v", cases={"yes": "b", "true": "c", "false": "d", "3": "b", "null": "c"}, default="d"))
    assert route(wf, "a", "ok", {"v": value}).next_node == expected


def test_nested_paths_and_explicit_output_prefix() -> None:
    wf = flow(switch("a", on="$output.result.items.1", cases={"x": "b"}, default="d"))
    assert route(wf, "a", "ok", {"result": {"items": ["w", "x"]}}).next_node == "b"
    assert route(wf, "a", "ok", {"result": {"items": ["w"]}}).next_node == "d"
    wf2 = flow(switch("a", on="$", cases={"go": "b"}, default="d"))
    assert route(wf2, "a", "ok", "go").next_node == "b"


def test_no_match_without_default_is_routing_error() -> None:
    wf = flow(switch("a", on="$.v", cases={"x": "b"}))
    decision = route(wf, "a", "ok", {"v": "y"})
    assert decision.next_node is None
    assert decision.error == ("routing_error", "node 'a': switch on $.v has no case for 'y'")
    assert route(wf, "a", "ok", {}).error == ("routing_error", "node 'a': switch on $.v has no case for no value")
    assert route(wf, "a", "ok", {"v": 1.5}).error[0] == "routing_error"


def test_missing_field_uses_default_but_null_matches_null() -> None:
    wf = flow(switch("a", on="$.v", cases={"null": "b"}, default="c"))
    assert route(wf, "a", "ok", {}).next_node == "c"
    assert route(wf, "a", "ok", {"v": None}).next_node == "b"
    assert route(wf, "a", "ok", "not a dict").next_node == "c"


def test_failed_node_routes_only_through_outcome_switch() -> None:
    wf = flow(switch("a", on="$result.outcome", cases={"ok": "b", "failed": "c"}))
    assert route(wf, "a", "ok", None).next_node == "b"
    assert route(wf, "a", "failed", {"error": "x"}).next_node == "c"
    assert route(wf, "b", "failed", None) == RouteDecision(error=("node_failed", "node 'b' failed"))
    assert route(wf, "d", "failed", None).error[0] == "node_failed"  # terminal node failed
    on_output = flow(switch("a", on="$.v", cases={"x": "b"}, default="c"))
    assert route(on_output, "a", "failed", {"v": "x"}).error[0] == "node_failed"


def test_outcome_switch_without_failed_case() -> None:
    wf = flow(switch("a", on="$result.outcome", cases={"ok": "b"}))
    assert route(wf, "a", "failed", None).error[0] == "routing_error"
    with_default = flow(switch("a", on="$result.outcome", cases={"ok": "b"}, default=END))
    assert route(with_default, "a", "failed", None) == RouteDecision()


def test_bad_arguments_are_engine_bugs() -> None:
    wf = flow(edge("a", "b"))
    with pytest.raises(ValueError, match="no node"):
        route(wf, "zz", "ok", None)
    with pytest.raises(ValueError, match="outcome"):
        route(wf, "a", "done", None)  # type: ignore[arg-type]
