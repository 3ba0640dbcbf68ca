"""`json_values.json_value_problem`: the one check of a value a run can hold (docs/protocol.md, "Values")."""

from __future__ import annotations

import collections

import pytest

from piwf_actors.json_values import MAX_VALUE_DEPTH, json_value_problem


def nested(depth: int) -> object:
    value: object = 0
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


def test_json_values_pass_and_the_depth_limit_is_exact() -> None:
    for value in (None, True, 0, -2**63, 1.5, "text", [], {}, {"a": [1, {"b": None}]}, (1, 2),
                  collections.OrderedDict(a=1), nested(MAX_VALUE_DEPTH)):
        assert json_value_problem(value) is None, value
    assert "nests deeper than 20" in str(json_value_problem(nested(MAX_VALUE_DEPTH + 1)))
    assert json_value_problem([[]] * 3, max_depth=2) is None
    assert json_value_problem([[[]]], max_depth=2) == "value[0][0] nests deeper than 2 lists and maps (the most a view can show)"


@pytest.mark.parametrize("value, where, says", [
    ({"a": [1, {"b": b"\x00"}]}, "payload.input.a[1].b", "holds binary data (1 bytes)"),
    (bytearray(b"ab"), "payload.input", "holds binary data (2 bytes)"),
    ([float("nan")], "payload.input[0]", "is NaN or infinite"),
    ({"x": float("-inf")}, "payload.input.x", "is NaN or infinite"),
    ({"a": {1: "one"}}, "payload.input.a", "has a map key of type int"),
    ({"odd key!": {1, 2}}, "payload.input['odd key!']", "holds a value of type set"),
])
def test_a_bad_value_is_named_by_its_path_in_one_line(value: object, where: str, says: str) -> None:
    problem = json_value_problem(value, "payload.input")
    assert problem is not None and problem.startswith(f"{where} {says}"), problem
    assert "\n" not in problem


def test_a_self_referencing_list_is_refused_not_followed() -> None:
    loop: list[object] = []
    loop.append(loop)
    assert "nests deeper than 20" in str(json_value_problem(loop))


def test_a_long_path_is_cut() -> None:
    value = {"k" * 40: {"k" * 40: {"k" * 40: {"k" * 40: b""}}}}
    problem = str(json_value_problem(value))
    assert problem.startswith("value." + "k" * 40) and "…" in problem and len(problem) < 400
