"""The node kind registry (workflows/kinds/): every kind is one record with all its parts, the
definition code finds kinds through it, and a record with a part missing is refused when it is built."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

import piwf_actors.workflows as public
from piwf_actors.errors import NodeKindError
from piwf_actors.workflows import NODE_KINDS, ComputeSpec, compute, define_workflow, notify
from piwf_actors.workflows.graph import build_graph
from piwf_actors.workflows.graph_render import render_dot, render_mermaid
from piwf_actors.workflows.kinds import KINDS, PLAIN, Drawing, KindRegistry, NodeKind, kind_of
from piwf_actors.workflows.kinds.base import no_children
from piwf_actors.workflows.model import NodeSpec, Workflow

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True, slots=True)
class PingSpec(NodeSpec):
    """A kind of this test's own, as a newcomer would write it."""

    kind: ClassVar[str] = "ping"
    host: str


def _check_ping(node_id: str, spec: Any) -> dict[str, Any]:
    return {}


def _ping(**overrides: Any) -> NodeKind:
    parts: dict[str, Any] = {"spec": PingSpec, "check": _check_ping, "describe": lambda spec: [spec.host],
                             "drawing": Drawing(('["', '"]'), "box")}
    return NodeKind(**(parts | overrides))


def test_the_registry_lists_every_kind_once_with_all_its_parts() -> None:
    assert KINDS.names == NODE_KINDS == (
        "compute", "action", "shell", "checkpoint", "notify", "agent", "human_decision",
        "sleep", "wait_message", "wait_event", "run_workflow", "map_workflow", "parallel")
    for kind in KINDS:
        assert issubclass(kind.spec, NodeSpec) and kind.spec.kind == kind.name
        assert callable(kind.check) and callable(kind.describe) and callable(kind.children)
        assert isinstance(kind.drawing, Drawing) and kind.drawing.mermaid and kind.drawing.dot_shape
        assert KINDS.named(kind.name) is kind and KINDS.drawing(kind.name) is kind.drawing


def test_every_kind_is_public_under_its_name_with_its_spec() -> None:
    """`from piwf_actors.workflows import <kind>, <Kind>Spec` works for every kind."""
    for kind in KINDS:
        assert callable(getattr(public, kind.name)), kind.name
        assert getattr(public, kind.spec.__name__) is kind.spec
        assert kind.name in public.__all__ and kind.spec.__name__ in public.__all__


def test_every_kind_is_documented() -> None:
    """Its helper appears as `name(` in the README or a page of docs/ (where writing workflows is told)."""
    text = "\n".join(path.read_text(encoding="utf-8") for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")])
    missing = [kind.name for kind in KINDS if not re.search(rf"`{kind.name}\(", text)]
    assert missing == []


def test_a_spec_finds_its_kind_and_a_subclass_its_parents() -> None:
    class Timed(ComputeSpec):
        pass

    assert kind_of(compute(run=len)) is KINDS.named("compute")
    assert kind_of(Timed(run=len)) is KINDS.named("compute")
    assert kind_of(PingSpec(host="x")) is None and KINDS.named("ping") is None


def test_a_kind_the_renderer_does_not_know_is_drawn_plain() -> None:
    assert KINDS.drawing("ping") is PLAIN and KINDS.drawing("") is PLAIN
    wf = define_workflow(name="w", start_at="a", nodes={"a": notify(message="hi")}, edges=[])
    graph = build_graph(wf)
    stranger = type(graph.nodes[0])("a", "ping", "x")  # a graph a newer host stored, read here
    graph = type(graph)(graph.workflow, graph.start, (stranger,), ())
    assert 'n1["a<br/>ping: x"]' in render_mermaid(graph)
    assert 'n1 [shape=box, label="a\\nping: x"];' in render_dot(graph)


def test_a_kind_of_a_new_module_joins_a_registry() -> None:
    registry = KindRegistry([*KINDS, _ping()])
    assert registry.names[-1] == "ping" and registry.of(PingSpec(host="h")).describe(PingSpec(host="h")) == ["h"]
    assert registry.of(PingSpec(host="h")).children is no_children


@pytest.mark.parametrize(("overrides", "message"), [
    ({"spec": dict}, r"node kind 'None': its spec must be a subclass of NodeSpec, got <class 'dict'>"),
    ({"spec": NodeSpec}, r"node kind '': its spec must be a subclass of NodeSpec"),
    ({"check": None}, r"node kind 'ping': its check must be a function"),
    ({"describe": "x"}, r"node kind 'ping': its describe must be a function"),
    ({"children": 3}, r"node kind 'ping': its children must be a function"),
    ({"switch_cases": 3}, r"node kind 'ping': its switch_cases must be a function or None"),
    ({"drawing": ("box",)}, r"node kind 'ping': its drawing must be a Drawing, got tuple"),
])
def test_a_kind_with_a_part_missing_is_refused_when_it_is_built(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(NodeKindError, match=f"^{message}"):
        _ping(**overrides)


def test_a_kind_needs_a_name() -> None:
    @dataclass(frozen=True, kw_only=True, slots=True)
    class Nameless(NodeSpec):
        pass

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Shouting(NodeSpec):
        kind: ClassVar[str] = "Ping Pong"

    with pytest.raises(NodeKindError, match=r"^node kind '': Nameless.kind must be a name matching"):
        _ping(spec=Nameless)
    with pytest.raises(NodeKindError, match=r"^node kind 'Ping Pong': Shouting.kind must be a name matching"):
        _ping(spec=Shouting)


def test_a_registry_refuses_a_kind_twice() -> None:
    @dataclass(frozen=True, kw_only=True, slots=True)
    class OtherPing(NodeSpec):
        kind: ClassVar[str] = "ping"

    with pytest.raises(NodeKindError, match=r"^node kind 'ping': registered twice$"):
        KindRegistry([_ping(), _ping(spec=OtherPing)])
    with pytest.raises(NodeKindError, match=r"^node kind 'compute': registered twice$"):
        KindRegistry([*KINDS, KINDS.named("compute")])
    with pytest.raises(NodeKindError, match=r"a registry lists NodeKind records only"):
        KindRegistry([PingSpec])  # type: ignore[list-item]


def test_the_definition_code_asks_the_kind() -> None:
    """A fan-out's children come from its kind's `children`, a decision's switch cases from `switch_cases`."""
    leaf = define_workflow(name="leaf", start_at="a", nodes={"a": compute(run=len)}, edges=[])
    fan = public.map_workflow(leaf, items=lambda ctx: [1])
    assert KINDS.of(fan).children(fan) == (("per item", leaf),)
    decision = public.human_decision(audience="ops", choices={"y": public.choice("Y")}, request={"title": "t"})
    assert list(KINDS.of(decision).switch_cases(decision)) == ["y"]
    assert all(kind.switch_cases is None for kind in KINDS if kind.name != "human_decision")
    assert [kind.name for kind in KINDS if kind.takes_output_shape] == ["compute", "action"]
    assert isinstance(leaf, Workflow)
