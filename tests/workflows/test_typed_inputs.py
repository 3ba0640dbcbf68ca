"""Typed inputs and outputs at definition time: Python types converted into the shape language, the
one-line refusals of values, the compact form people read, and what a definition refuses.

A host refusing a run's input, a worker refusing a node's output and `piwf start` printing the
expected shape are tested with real hosts in tests/integration/test_typed_io.py and
tests/cli/test_cli_typed_inputs.py.
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows import (
    ShapeError,
    action,
    agent,
    compute,
    define_workflow,
    load_snapshot,
    resolve,
    run_workflow,
    shape_of,
    shell,
    thaw,
    validate_shape,
)
from piwf_actors.workflows.schedules import define_schedule
from piwf_actors.workflows.schema import schema_problem
from piwf_actors.workflows.shapes import compact, input_refusal, value_problem


@dataclasses.dataclass
class Target:
    host: str
    port: int = 22


@dataclasses.dataclass
class Release:
    version: str
    dry_run: bool = False
    count: int | None = None
    ratio: Optional[float] = None  # noqa: UP045 (the typing spelling is converted too)
    tags: list[str] = dataclasses.field(default_factory=list)
    env: Literal["prod", "staging"] = "staging"
    targets: list[Target] = dataclasses.field(default_factory=list)
    labels: dict[str, int] = dataclasses.field(default_factory=dict)
    note: Annotated[str, "shown to people"] = ""
    extra: Any = None


class Job(TypedDict):
    name: str
    retries: NotRequired[int]


class Loose(TypedDict, total=False):
    a: str


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node] = dataclasses.field(default_factory=list)


def one(**options: Any) -> Any:
    return define_workflow(name="w", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[], **options)


def test_a_dataclass_becomes_a_closed_object_with_its_defaults_optional() -> None:
    assert shape_of(Release) == {
        "type": "object",
        "properties": {
            "version": {"type": "string"},
            "dry_run": {"type": "boolean"},
            "count": {"type": ["integer", "null"]},
            "ratio": {"type": ["number", "null"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "env": {"enum": ["prod", "staging"]},
            "targets": {"type": "array", "items": {
                "type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
                "required": ["host"], "additionalProperties": False}},
            "labels": {"type": "object", "additionalProperties": {"type": "integer"}},
            "note": {"type": "string"},
            "extra": {},
        },
        "required": ["version"],
        "additionalProperties": False,
    }


def test_typed_dicts_and_plain_types() -> None:
    # `from __future__ import annotations` makes NotRequired a string here: still seen as optional.
    assert shape_of(Job) == {"type": "object", "properties": {"name": {"type": "string"}, "retries": {"type": "integer"}},
                             "required": ["name"], "additionalProperties": False}
    assert shape_of(Loose)["required"] == []
    assert shape_of(list) == {"type": "array"}
    assert shape_of(dict) == {"type": "object"}
    assert shape_of(dict[str, Any]) == {"type": "object"}
    assert shape_of(tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert shape_of(int | str) == {"type": ["integer", "string"]}
    assert shape_of(Literal["a", 1] | None) == {"enum": ["a", 1, None]}
    assert shape_of(Job | None)["type"] == ["object", "null"]
    assert shape_of(None) == {"type": "null"}
    assert schema_problem(shape_of(Release)) is None


@pytest.mark.parametrize(("annotation", "problem"), [
    (set[int], "input.x: unsupported type set[int]; use str, int"),
    (dict[int, str], "input.x: dict keys must be str"),
    (Target | Release, "input.x: a union may only join plain types"),
    (Literal[1.5], "input.x: Literal values must be strings, integers, booleans or None"),
    (list[bytes], "input.x[]: unsupported type bytes"),
    (Node, "input.x.children[]: Node refers to itself; recursive types are not supported"),
])
def test_unsupported_types_are_refused_at_definition_naming_the_field(annotation: Any, problem: str) -> None:
    holder = dataclasses.make_dataclass("Holder", [("x", annotation)])
    with pytest.raises(WorkflowDefinitionError) as caught:
        one(input=holder)
    assert str(caught.value).startswith(f"workflow 'w': {problem}"), str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_annotation_that_does_not_resolve_is_refused() -> None:
    @dataclasses.dataclass
    class Late:
        x: NotDefinedAnywhere  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(WorkflowDefinitionError, match=r"workflow 'w': input: cannot resolve the annotations of "
                                                      r".*Late: NameError"):
        one(input=Late)
    with pytest.raises(ShapeError, match="is a string that was not resolved"):
        shape_of("int")


def test_a_hand_written_shape_is_checked_like_agent_output() -> None:
    wf = one(input={"type": "object", "properties": {"version": {"type": "string"}}, "required": ["version"]})
    assert thaw(wf.input_shape) == {"type": "object", "properties": {"version": {"type": "string"}},
                                    "required": ["version"]}
    with pytest.raises(WorkflowDefinitionError, match=r"workflow 'w': input: schema at \$.v has type 'str'"):
        one(input={"type": "object", "properties": {"v": {"type": "str"}}})
    # `dict[str, T]` is written with an additionalProperties schema; an empty one says nothing.
    assert schema_problem({"type": "object", "additionalProperties": {"type": "integer"}}) is None
    assert "$.*" in (schema_problem({"additionalProperties": {"type": "x"}}) or "")
    assert "non-empty schema" in (schema_problem({"additionalProperties": {}}) or "")


def test_value_problems_name_each_path_in_one_line() -> None:
    shape = shape_of(Release)
    assert value_problem(shape, {"version": "1"}, "input") is None
    assert value_problem(shape, {"count": "3"}, "input") == (
        "input: missing required property 'version'; input.count: expected integer or null, got string")
    assert value_problem(shape, {"version": "1", "targets": [{"host": 3}], "labels": {"a": "x"}}, "input") == (
        "input.targets[0].host: expected string, got integer; input.labels.a: expected integer, got string")
    assert value_problem(shape, {"version": "1", "verison": "1"}, "input") == "input: unexpected property 'verison'"
    many = value_problem(shape, {"a": 1, "b": 2, "c": 3, "d": 4}, "input") or ""
    assert many.endswith("(and 2 more)") and many.count(";") == 2
    assert validate_shape(shape, 3, "output") == ["output: expected object, got integer"]


def test_the_refusal_ends_with_the_compact_expected_shape() -> None:
    shape = shape_of(Release)
    assert compact(shape) == (
        '{version: string, dry_run?: boolean, count?: integer | null, ratio?: number | null, tags?: [string], '
        'env?: "prod" | "staging", targets?: [{host: string, port?: integer}], labels?: {*: integer}, '
        'note?: string, extra?: any}')
    assert input_refusal(None, {"anything": 1}) is None
    assert input_refusal(shape, {"version": "1"}) is None
    assert input_refusal(shape, {}) == f"input: missing required property 'version'; expected input: {compact(shape)}"
    assert len(compact({"type": "object", "properties": {f"field{i}": {"type": "string"} for i in range(100)}})) == 300


def test_the_input_shape_is_part_of_the_digest() -> None:
    plain, typed, other = one(), one(input=Release), one(input=Job)
    assert len({plain.digest, typed.digest, other.digest}) == 3
    assert one(input=Release).digest == typed.digest
    assert plain.input_shape is None


def test_output_shapes_on_compute_and_action_only() -> None:
    wf = define_workflow(name="w", start_at="a", edges=[], nodes={
        "a": compute(run=lambda ctx: {"n": 1}, output=dict[str, int])})
    assert thaw(wf.nodes["a"].output_shape) == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert define_workflow(name="w", start_at="a", edges=[], nodes={
        "a": action(run=lambda ctx: 1, output={"type": "integer"})}).nodes["a"].output_shape is not None
    # A node without one keeps the digest it had before output shapes existed (nothing is added).
    bare = define_workflow(name="w", start_at="a", edges=[], nodes={"a": compute(run=lambda ctx: {"n": 1})})
    assert bare.digest != wf.digest
    with pytest.raises(WorkflowDefinitionError, match=r"node 'a': output: unsupported type set\[int\]"):
        define_workflow(name="w", start_at="a", edges=[], nodes={"a": compute(run=lambda ctx: 1, output=set[int])})
    spec = dataclasses.replace(shell(["true"]), output_shape={"type": "object"})
    with pytest.raises(WorkflowDefinitionError, match="node 'a': output= applies to compute and action nodes, not shell"):
        define_workflow(name="w", start_at="a", edges=[], nodes={"a": spec})


def test_agent_expected_output_takes_a_dataclass() -> None:
    wf = define_workflow(name="w", start_at="a", edges=[], nodes={"a": agent("p", expected_output=Target)})
    assert thaw(wf.nodes["a"].expected_output) == shape_of(Target)
    with pytest.raises(WorkflowDefinitionError, match=r"node 'a': expected_output.x: unsupported type"):
        define_workflow(name="w", start_at="a", edges=[], nodes={
            "a": agent("p", expected_output=dataclasses.make_dataclass("H", [("x", set)]))})


def test_a_schedule_with_a_fixed_input_is_checked_against_its_workflow() -> None:
    typed = one(input=Target)
    assert define_schedule("s", typed, every_s=60, input={"host": "a"}).input["host"] == "a"
    with pytest.raises(WorkflowDefinitionError, match=r"schedule 's': input.port: expected integer, got string; "
                                                      r"expected input: \{host: string, port\?: integer\}"):
        define_schedule("s", typed, every_s=60, input={"host": "a", "port": "22"})
    # An input function is only known at each fire (the host checks the run it starts then).
    define_schedule("s", typed, every_s=60, input=lambda fire_time: {})


def test_child_nodes_accept_a_typed_child() -> None:
    child = one(input=Target)
    parent = define_workflow(name="p", start_at="c", edges=[],
                             nodes={"c": run_workflow(child, input=lambda ctx: {"host": "h"})})
    assert parent.nodes["c"].child.input_shape is not None


def test_the_shape_travels_with_the_snapshot(tmp_path: Path) -> None:
    source = textwrap.dedent('''
        from __future__ import annotations

        import dataclasses

        from piwf_actors.workflows import compute, define_workflow


        @dataclasses.dataclass
        class Deploy:
            version: str
            dry_run: bool = False


        deploy = define_workflow(name="deploy", start_at="a", input=Deploy,
                                 nodes={"a": compute(run=lambda ctx: ctx.input["version"], output=str)}, edges=[])
    ''')
    path = tmp_path / "deploy.py"
    path.write_text(source)
    resolved = resolve(str(path), None)
    assert compact(resolved.workflow.input_shape) == "{version: string, dry_run?: boolean}"
    again = load_snapshot(resolved.source, str(path), "deploy", resolved.workflow.digest, None)
    assert thaw(again.input_shape) == thaw(resolved.workflow.input_shape)
    assert thaw(again.nodes["a"].output_shape) == {"type": "string"}
    # The same file with another input shape is another definition: a stored run would refuse it.
    path.write_text(source.replace("dry_run: bool = False", "dry_run: int = 0"))
    assert resolve(str(path), None).workflow.digest != resolved.workflow.digest
