"""Typed values of durable functions (workflows/typed_values.py): the input shape read from a function's
parameters, the keyword arguments bound from a run input, return values recorded as JSON and restored
to their annotated types.

This file uses `from __future__ import annotations`, so every annotation here is a string resolved
with `typing.get_type_hints`, as in user modules that do the same; `test_annotations_as_objects`
covers the other spelling.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Literal, NotRequired, Optional, TypedDict

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.shapes import shape_of, value_problem
from piwf_actors.workflows.typed_values import bind_input, parameters_shape, restore, return_annotation, to_json


@dataclasses.dataclass
class Target:
    host: str
    port: int = 22


@dataclasses.dataclass
class Release:
    service: str
    env: Literal["staging", "prod"] = "staging"
    targets: list[Target] = dataclasses.field(default_factory=list)
    ratio: float = 1.0
    note: Optional[str] = None  # noqa: UP045 (the typing spelling is converted too)


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass
class Derived:
    base: int
    doubled: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.doubled = self.base * 2


@dataclasses.dataclass
class Positive:
    value: int

    def __post_init__(self) -> None:
        if self.value <= 0:
            raise ValueError(f"value must be positive,\n got {self.value}")


@dataclasses.dataclass
class WithSet:
    tags: set[str]


class Job(TypedDict):
    name: str
    retries: NotRequired[int]


class Options(TypedDict, total=False):
    verbose: bool
    level: int


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Tone(str, enum.Enum):  # noqa: UP042 (str() of such a member is "Tone.LOUD", not its value)
    LOUD = "loud"


def release(release: Release, notify: bool = True, *, reviewers: list[str] | None = None,
            attempts: int = 3) -> dict:
    return {}


def everything(name: str, count: int, ratio: float, flag: bool, nothing: None, tags: list[str],
               pair: tuple[int, ...], labels: dict[str, int], maybe: int | None, either: int | str,
               mode: Literal["a", "b", 1], anything: Any, untyped, job: Job, options: Options,
               points: list[Point], by_name: dict[str, Target]) -> Release:
    raise AssertionError("never called")


def no_parameters() -> None:
    return None


def all_optional(count: int = 1, label: str = "x") -> int:
    return count


GOOD_EVERYTHING: dict[str, Any] = {
    "name": "n", "count": 2, "ratio": 3, "flag": False, "nothing": None, "tags": ["a"], "pair": [1, 2],
    "labels": {"a": 1}, "maybe": None, "either": "s", "mode": 1, "anything": {"x": [1]}, "untyped": [None],
    "job": {"name": "j"}, "options": {}, "points": [{"x": 1.5}], "by_name": {"web-1": {"host": "h"}},
}


# --- parameters_shape -------------------------------------------------------------------------------------


def test_parameters_shape_is_an_object_of_the_parameters_with_defaults_optional() -> None:
    shape = parameters_shape(release)
    assert shape["type"] == "object"
    assert shape["additionalProperties"] is False
    assert shape["required"] == ["release"]
    assert shape["properties"]["release"] == shape_of(Release)
    assert shape["properties"]["notify"] == {"type": "boolean"}
    assert shape["properties"]["reviewers"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert value_problem(shape, {"release": {"service": "api"}}, "input") is None
    assert value_problem(shape, {"notify": False}, "input") == "input: missing required property 'release'"


def test_an_unannotated_parameter_takes_anything() -> None:
    shape = parameters_shape(everything)
    assert shape["properties"]["untyped"] == {}
    assert shape["properties"]["anything"] == {}
    assert value_problem(shape, GOOD_EVERYTHING, "input") is None


def test_a_function_without_required_parameters_takes_an_empty_object_or_null() -> None:
    for fn in (no_parameters, all_optional):
        shape = parameters_shape(fn)
        assert value_problem(shape, {}, "input") is None
        assert value_problem(shape, None, "input") is None
        assert value_problem(shape, [], "input") is not None
    assert parameters_shape(no_parameters)["properties"] == {}
    assert value_problem(parameters_shape(no_parameters), {"x": 1}, "input") == "input: unexpected property 'x'"
    assert value_problem(parameters_shape(release), None, "input") is not None


def positional_only(a: int, /, b: int) -> None: ...
def star_args(a: int, *rest: int) -> None: ...
def star_kwargs(a: int, **more: int) -> None: ...


@pytest.mark.parametrize(("fn", "words"), [
    (positional_only, "parameter 'a' is positional-only"),
    (star_args, "parameter 'rest' collects positional arguments (*args)"),
    (star_kwargs, "parameter 'more' collects keyword arguments (**kwargs)"),
])
def test_parameters_that_take_no_keyword_are_a_definition_error(fn: Any, words: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        parameters_shape(fn)
    message = str(caught.value)
    assert message.startswith(f"{fn.__qualname__}(): {words}")
    assert "\n" not in message
    with pytest.raises(WorkflowDefinitionError):
        bind_input(fn, {"a": 1, "b": 2})


def unresolved(a: int, b: NoSuchType) -> None: ...  # type: ignore[name-defined]  # noqa: F821
def unresolved_return(a: int) -> Missing: ...  # type: ignore[name-defined]  # noqa: F821
def unsupported(a: int, b: set[str]) -> None: ...
def unsupported_field(holder: WithSet) -> None: ...


def test_an_annotation_that_does_not_resolve_is_a_definition_error_naming_the_parameter() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        parameters_shape(unresolved)
    assert str(caught.value) == ("unresolved(): parameter 'b': cannot resolve the annotation 'NoSuchType': "
                                 "NameError: name 'NoSuchType' is not defined")
    with pytest.raises(WorkflowDefinitionError) as caught:
        parameters_shape(unresolved_return)
    assert str(caught.value).startswith("unresolved_return(): the return annotation: cannot resolve the "
                                        "annotation 'Missing'")


def test_a_type_without_a_shape_is_a_definition_error_naming_the_parameter_and_its_path() -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        parameters_shape(unsupported)
    assert str(caught.value).startswith("unsupported(): parameter 'b': unsupported type set[str]; use str, int")
    with pytest.raises(WorkflowDefinitionError) as caught:
        parameters_shape(unsupported_field)
    assert str(caught.value).startswith(
        "unsupported_field(): parameter 'holder': holder.tags: unsupported type set[str]")


def test_annotations_as_objects() -> None:
    """A module without `from __future__ import annotations` hands the types themselves."""
    namespace: dict[str, Any] = {"Release": Release}
    exec("def plain(release: Release, count: int = 2) -> Release:\n    return release\n", namespace)
    plain = namespace["plain"]
    assert parameters_shape(plain)["properties"]["release"] == shape_of(Release)
    assert bind_input(plain, {"release": {"service": "a"}}) == {"release": Release("a"), "count": 2}
    assert return_annotation(plain) is Release


def test_return_annotation() -> None:
    assert return_annotation(release) is dict
    assert return_annotation(everything) is Release
    assert return_annotation(no_parameters) is type(None)  # get_type_hints spells None so

    def unannotated():  # noqa: ANN202
        return 1
    assert return_annotation(unannotated) is Any

    def returns_set() -> set[int]:
        return set()
    with pytest.raises(WorkflowDefinitionError, match=r"^test_return_annotation.<locals>.returns_set\(\): the "
                       r"return annotation: unsupported type set\[int\]"):
        return_annotation(returns_set)


# --- bind_input -----------------------------------------------------------------------------------------


def test_bind_input_converts_to_the_annotated_types_and_applies_defaults() -> None:
    arguments = bind_input(release, {"release": {"service": "api", "targets": [{"host": "a"}, {"host": "b",
                                                                                               "port": 2}]}})
    assert arguments == {"release": Release("api", targets=[Target("a"), Target("b", 2)]), "notify": True,
                         "reviewers": None, "attempts": 3}
    assert isinstance(arguments["release"], Release)
    assert all(isinstance(target, Target) for target in arguments["release"].targets)
    assert arguments["release"].env == "staging"
    assert type(arguments["release"].ratio) is float


def test_bind_input_of_every_supported_type() -> None:
    arguments = bind_input(everything, GOOD_EVERYTHING)
    assert arguments == {
        "name": "n", "count": 2, "ratio": 3.0, "flag": False, "nothing": None, "tags": ["a"], "pair": (1, 2),
        "labels": {"a": 1}, "maybe": None, "either": "s", "mode": 1, "anything": {"x": [1]},
        "untyped": [None], "job": {"name": "j"}, "options": {}, "points": [Point(1.5)],
        "by_name": {"web-1": Target("h")},
    }
    assert type(arguments["ratio"]) is float
    assert type(arguments["pair"]) is tuple
    assert type(arguments["points"][0].x) is float


def test_a_function_without_parameters_binds_an_empty_object_or_null() -> None:
    assert bind_input(no_parameters, {}) == {}
    assert bind_input(no_parameters, None) == {}
    assert bind_input(all_optional, None) == {"count": 1, "label": "x"}
    assert bind_input(all_optional, {"label": "y"}) == {"count": 1, "label": "y"}


def test_bind_input_refuses_an_unknown_or_missing_parameter_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^input: release\(\) has no parameter 'notfy' \(it takes: attempts, "
                       r"notify, release, reviewers\)$"):
        bind_input(release, {"release": {"service": "a"}, "notfy": False})
    with pytest.raises(ValueError, match=r"^input: missing required parameter 'release' of release\(\)$"):
        bind_input(release, {"notify": False})
    with pytest.raises(ValueError, match=r"^input: missing required parameter 'release' of release\(\)$"):
        bind_input(release, None)
    with pytest.raises(ValueError, match=r"^input: no_parameters\(\) has no parameter 'x' \(it takes: none\)$"):
        bind_input(no_parameters, {"x": 1})
    with pytest.raises(ValueError, match=r"^input: expected an object with the parameters of release\(\), got "
                       r"array$"):
        bind_input(release, [1])


def test_bind_input_refuses_a_value_that_does_not_fit_naming_its_path() -> None:
    with pytest.raises(ValueError, match=r"^input.release.targets\[1\].port: expected integer, got string$"):
        bind_input(release, {"release": {"service": "a", "targets": [{"host": "a"}, {"host": "b", "port": "x"}]}})
    with pytest.raises(ValueError, match=r"^input.release: Release has no field 'servce'$"):
        bind_input(release, {"release": {"servce": "a"}})


@pytest.mark.parametrize("bad", [
    {**GOOD_EVERYTHING, "count": "2"},
    {**GOOD_EVERYTHING, "count": 2.5},
    {**GOOD_EVERYTHING, "flag": 1},
    {**GOOD_EVERYTHING, "nothing": 0},
    {**GOOD_EVERYTHING, "tags": ["a", 1]},
    {**GOOD_EVERYTHING, "pair": [1, "2"]},
    {**GOOD_EVERYTHING, "labels": {"a": "1"}},
    {**GOOD_EVERYTHING, "either": 1.5},
    {**GOOD_EVERYTHING, "mode": "c"},
    {**GOOD_EVERYTHING, "mode": True},
    {**GOOD_EVERYTHING, "job": {}},
    {**GOOD_EVERYTHING, "job": {"name": "j", "other": 1}},
    {**GOOD_EVERYTHING, "options": {"verbose": "yes"}},
    {**GOOD_EVERYTHING, "points": [{"y": 1}]},
    {**GOOD_EVERYTHING, "points": [{"x": 1, "z": 2}]},
    {**GOOD_EVERYTHING, "by_name": {"a": {"host": "h", "port": None}}},
    {**GOOD_EVERYTHING, "extra": 1},
    {key: value for key, value in GOOD_EVERYTHING.items() if key != "untyped"},
    None,
    "text",
])
def test_the_shape_refuses_what_bind_input_refuses(bad: Any) -> None:
    assert value_problem(parameters_shape(everything), bad, "input") is not None
    with pytest.raises(ValueError) as caught:
        bind_input(everything, bad)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("good", [
    GOOD_EVERYTHING,
    {**GOOD_EVERYTHING, "count": 2.0, "maybe": 4, "either": 5, "mode": "a", "options": {"level": 2}},
    {**GOOD_EVERYTHING, "job": {"name": "j", "retries": 2}, "pair": [], "points": [{"x": 1, "y": 2}]},
])
def test_what_the_shape_takes_binds(good: dict[str, Any]) -> None:
    assert value_problem(parameters_shape(everything), good, "input") is None
    arguments = bind_input(everything, good)
    assert set(arguments) == set(GOOD_EVERYTHING)


def takes_positive(item: Positive) -> None: ...


def test_a_dataclass_that_refuses_its_value_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"^input.item: Positive refused the value: ValueError: value must be "
                       r"positive, got -1$"):
        bind_input(takes_positive, {"item": {"value": -1}})


def test_bind_input_does_not_change_the_raw_input() -> None:
    raw = {"release": {"service": "a", "targets": [{"host": "h"}]}}
    before = repr(raw)
    bind_input(release, raw)
    assert repr(raw) == before


# --- to_json and restore ----------------------------------------------------------------------------------


ROUND_TRIPS: list[tuple[Any, Any]] = [
    ("text", str), (3, int), (-1.5, float), (2.0, float), (True, bool), (False, bool), (None, None),
    (["a", "b"], list[str]), ([[1], []], list[list[int]]), ([1, "x", None], list),
    ((1, 2, 3), tuple[int, ...]), ((), tuple[str, ...]),
    ({"a": 1.5}, dict[str, float]), ({"a": {"b": [1]}}, dict), ({}, dict[str, Target]),
    (None, Optional[int]), (4, Optional[int]), (None, int | None), ("x", int | str), (7, int | str),  # noqa: UP045
    (1.5, float | int), (1, float | int), ("prod", Literal["staging", "prod"]), (1, Literal[1, "1"]),
    ("1", Literal[1, "1"]), (None, Literal["a"] | None), ({"any": [1, {"b": None}]}, Any),
    (Target("h"), Target), (Release("api", "prod", [Target("a", 1)], 0.5, "n"), Release),
    (Release("api"), Release), (Point(1.0, 2.5), Point), (Derived(4), Derived),
    ([Target("a"), Target("b", 8)], list[Target]), ({"x": Point(0.5)}, dict[str, Point]),
    (Release("api"), Optional[Release]), (None, Release | None),  # noqa: UP045
    ({"name": "j"}, Job), ({"name": "j", "retries": 2}, Job), ({}, Options), ({"level": 3}, Options),
    ([{"name": "j"}], list[Job]),
]


@pytest.mark.parametrize(("value", "annotation"), ROUND_TRIPS)
def test_restore_of_to_json_gives_the_value_back(value: Any, annotation: Any) -> None:
    recorded = to_json(value)
    assert value_problem(shape_of(annotation), recorded, "$") is None
    restored = restore(recorded, annotation)
    assert restored == value
    assert type(restored) is type(value)


def test_to_json_makes_dataclasses_and_tuples_plain_and_keeps_number_types() -> None:
    recorded = to_json({"release": Release("api", targets=[Target("a")]), "pair": (1, 2.0), "flag": True})
    assert recorded == {"release": {"service": "api", "env": "staging", "targets": [{"host": "a", "port": 22}],
                                    "ratio": 1.0, "note": None}, "pair": [1, 2.0], "flag": True}
    assert type(recorded["pair"][0]) is int
    assert type(recorded["pair"][1]) is float
    assert type(recorded["flag"]) is bool
    assert to_json(Derived(2)) == {"base": 2}  # a field __init__ does not take is computed again on restore
    assert to_json(Point(1, 2)) == {"x": 1, "y": 2}


def test_to_json_gives_subclasses_of_json_types_as_their_plain_value() -> None:
    recorded = to_json([Level.HIGH, Tone.LOUD])
    assert recorded == [3, "loud"]
    assert [type(item) for item in recorded] == [int, str]


@pytest.mark.parametrize(("value", "message"), [
    ({"a": [1, {2}]}, "$.a[1] holds a value of type set; values are JSON"),
    ([b"x"], "$[0] holds binary data (1 bytes)"),
    ({"n": math.nan}, "$.n is NaN or infinite, which cannot be stored"),
    (Point(math.inf), "$.x is NaN or infinite, which cannot be stored"),
    ({"c": Color.RED}, "$.c holds a value of type Color"),
    ({1: "a"}, "$ has a map key of type int (map keys are text)"),
    (object(), "$ holds a value of type object"),
])
def test_to_json_refuses_what_is_not_json_in_one_line_naming_the_path(value: Any, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        to_json(value)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_to_json_refuses_a_value_that_contains_itself() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(TypeError, match="nests deeper than 20"):
        to_json(loop)


def test_to_json_never_changes_its_argument_and_shares_no_container_with_it() -> None:
    value = {"items": [{"a": 1}, (2, 3)], "release": Release("api", targets=[Target("h")])}
    before = repr(value)
    recorded = to_json(value)
    assert repr(value) == before
    recorded["items"][0]["a"] = 99
    recorded["items"].append(4)
    recorded["release"]["targets"].clear()
    assert repr(value) == before


@pytest.mark.parametrize(("value", "annotation", "message"), [
    ({"service": "a", "targets": [{"host": "a"}, {"host": "b"}, {"host": 3}]}, Release,
     "$.targets[2].host: expected string, got integer"),
    ({"service": "a", "env": "dev"}, Release, "$.env: 'dev' is not one of ['staging', 'prod']"),
    ({"env": "prod"}, Release, "$: missing required field 'service' of Release"),
    ({"service": "a", "other": 1}, Release, "$: Release has no field 'other'"),
    (["a"], Release, "$: expected object for Release, got array"),
    ({"retries": 1}, Job, "$: missing required field 'name' of Job"),
    ("3", int, "$: expected integer, got string"),
    (2.5, int, "$: expected integer, got number"),
    (True, int, "$: expected integer, got boolean"),
    (1, bool, "$: expected boolean, got integer"),
    (True, float, "$: expected number, got boolean"),
    (0, None, "$: expected null, got integer"),
    ({"a": 1}, list[int], "$: expected array, got object"),
    ([1, "2"], tuple[int, ...], "$[1]: expected integer, got string"),
    ({"a b": "x"}, dict[str, int], "$['a b']: expected integer, got string"),
    ({1: 2}, dict[str, int], "$: has a key of type int (object keys are text)"),
    (True, Literal[1], "$: True is not one of [1]"),
    (1.5, int | str, "$: 1.5 fits none of int | str"),
    ("x", Optional[int], "$: 'x' fits none of int | NoneType"),  # noqa: UP045
    ([1], set[int], "$: cannot restore a value of the type set[int]"),
])
def test_restore_refuses_what_does_not_fit_in_one_line_naming_the_path(value: Any, annotation: Any,
                                                                       message: str) -> None:
    with pytest.raises(TypeError) as caught:
        restore(value, annotation)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_restore_applies_defaults_and_converts_numbers() -> None:
    restored = restore({"service": "a", "ratio": 2}, Release)
    assert restored == Release("a", "staging", [], 2.0, None)
    assert type(restored.ratio) is float
    assert restore(3.0, int) == 3
    assert type(restore(3.0, int)) is int
    assert restore({"x": 1}, Point) == Point(1.0, 0.0)
    assert restore({"base": 5}, Derived).doubled == 10
    first, second = restore({"service": "a"}, Release), restore({"service": "b"}, Release)
    assert first.targets is not second.targets  # each gets its default_factory's own list


def test_restore_names_the_path_below_a_given_root() -> None:
    with pytest.raises(TypeError, match=r"^output.points\[0\].x: expected number, got string$"):
        restore({"points": [{"x": "1"}]}, dict[str, list[Point]], "output")
