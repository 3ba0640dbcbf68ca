"""The agent output schema subset and decision response checks."""

from __future__ import annotations

from typing import Any

import pytest

from piwf_actors.workflows import (
    END,
    check_decision_response,
    choice,
    decision_switch,
    define_workflow,
    human_decision,
    text_input,
    thaw,
    validate_shape,
)
from piwf_actors.workflows.schema import schema_problem

SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "score": {"type": "integer"},
        "ratio": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "level": {"enum": ["low", "high"]},
        "note": {"type": ["string", "null"]},
    },
    "required": ["summary", "score"],
    "additionalProperties": False,
}


def test_schema_problems() -> None:
    assert schema_problem(SCHEMA) is None
    assert schema_problem([]) == "schema at $ must be an object, got list"
    assert "unsupported keyword '$ref'" in (schema_problem({"$ref": "#"}) or "")
    assert "has type 'float'" in (schema_problem({"type": "float"}) or "")
    assert "required must be a list of strings" in (schema_problem({"required": "a"}) or "")
    assert "additionalProperties must be true or false" in (schema_problem({"additionalProperties": {}}) or "")
    assert "$.a[]" in (schema_problem({"properties": {"a": {"items": {"type": "x"}}}}) or "")
    assert "enum must be a non-empty list" in (schema_problem({"enum": []}) or "")


def test_conforming_values() -> None:
    assert validate_shape(SCHEMA, {"summary": "s", "score": 3, "ratio": 1, "tags": ["a"], "level": "low", "note": None}) == []
    assert validate_shape(SCHEMA, {"summary": "s", "score": 3.0}) == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([], "$: expected object, got array"),
        ({"score": 1}, "$: missing required property 'summary'"),
        ({"summary": "s", "score": True}, "$.score: expected integer, got boolean"),
        ({"summary": "s", "score": 1.5}, "$.score: expected integer, got number"),
        ({"summary": "s", "score": 1, "ratio": "1"}, "$.ratio: expected number, got string"),
        ({"summary": "s", "score": 1, "tags": ["a", 2]}, "$.tags[1]: expected string, got integer"),
        ({"summary": "s", "score": 1, "level": "mid"}, "$.level: 'mid' is not one of ['low', 'high']"),
        ({"summary": "s", "score": 1, "extra": 1}, "$: unexpected property 'extra'"),
        ({"summary": "s", "score": 1, "note": 3}, "$.note: expected string or null, got integer"),
    ],
)
def test_mismatches(value: Any, problem: str) -> None:
    assert problem in validate_shape(SCHEMA, value)


def test_frozen_schema_still_validates() -> None:
    from piwf_actors.workflows import agent

    wf = define_workflow(name="a", start_at="g", nodes={"g": agent("p", expected_output=SCHEMA)}, edges=[])
    frozen = wf.nodes["g"].expected_output
    assert thaw(frozen) == SCHEMA
    assert validate_shape(frozen, {"summary": "s"}) == ["$: missing required property 'score'"]


def test_decision_responses() -> None:
    wf = define_workflow(
        name="d", start_at="h",
        nodes={"h": human_decision("ops", {"ok": choice("OK"), "edit": choice("Edit", input=text_input("text", "?", 1, 5))},
                                   request=lambda ctx: {"title": "t"})},
        edges=[decision_switch("h", {"ok": END, "edit": END})],
    )
    spec = wf.nodes["h"]
    assert check_decision_response(spec, {"choice": "ok"}) is None
    assert check_decision_response(spec, {"choice": "edit", "input": {"text": "abc"}}) is None
    assert "unknown choice 'x'" in (check_decision_response(spec, {"choice": "x"}) or "")
    assert "takes no input" in (check_decision_response(spec, {"choice": "ok", "input": {}}) or "")
    assert "needs input" in (check_decision_response(spec, {"choice": "edit", "input": {"other": "a"}}) or "")
    assert "1..5 characters" in (check_decision_response(spec, {"choice": "edit", "input": {"text": ""}}) or "")
    assert "an object with 'choice'" in (check_decision_response(spec, {"choice": "ok", "more": 1}) or "")
    assert "an object with 'choice'" in (check_decision_response(spec, "ok") or "")
