"""A small JSON-shape schema for agent output: a strict subset of JSON Schema.

Supported keywords: `type` (one of object, array, string, number, integer,
boolean, null, or a list of them), `properties`, `required`,
`additionalProperties` (true, false, or the schema every property not in
`properties` must match: how `dict[str, T]` is written), `items`, `enum`,
and the annotations `title` and `description`. Any other keyword is refused
when the workflow is defined, so a schema never silently checks less than it
seems to. The same language types agent output, run inputs
(`define_workflow(input=…)`) and node outputs (`compute(output=…)`);
`shapes.py` converts Python classes into it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "title", "description"}
)
_MAX_ERRORS = 20


def schema_problem(schema: Any, path: str = "$") -> str | None:
    """The first problem with `schema` as a one-line message, or None if it is usable."""
    if not isinstance(schema, Mapping):
        return f"schema at {path} must be an object, got {type(schema).__name__}"
    unknown = sorted(str(key) for key in schema if key not in _KEYWORDS)
    if unknown:
        return f"schema at {path} uses unsupported keyword {unknown[0]!r}"
    if "type" in schema:
        types = schema["type"]
        names = [types] if isinstance(types, str) else types
        if not isinstance(names, (list, tuple)) or not names or any(
            not isinstance(name, str) or name not in TYPES for name in names
        ):
            return f"schema at {path} has type {types!r}; expected one of {', '.join(TYPES)}"
    if "properties" in schema:
        properties = schema["properties"]
        if not isinstance(properties, Mapping):
            return f"schema at {path}: properties must be an object"
        for key, sub in properties.items():
            problem = schema_problem(sub, f"{path}.{key}")
            if problem:
                return problem
    if "required" in schema:
        required = schema["required"]
        if not isinstance(required, (list, tuple)) or any(not isinstance(k, str) for k in required):
            return f"schema at {path}: required must be a list of strings"
    if "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        if isinstance(extra, Mapping) and extra:
            problem = schema_problem(extra, f"{path}.*")
            if problem:
                return problem
        elif not isinstance(extra, bool):
            # An empty schema would mean "anything", which `true` says plainly.
            return f"schema at {path}: additionalProperties must be true or false, or a non-empty schema"
    if "items" in schema:
        problem = schema_problem(schema["items"], f"{path}[]")
        if problem:
            return problem
    if "enum" in schema and (not isinstance(schema["enum"], (list, tuple)) or not schema["enum"]):
        return f"schema at {path}: enum must be a non-empty list"
    return None


def _type_of(value: Any) -> str | None:
    """The JSON type name of `value`; integers are also numbers (checked by the caller)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, Sequence):
        return "array"
    return None


def _type_matches(value: Any, expected: str) -> bool:
    actual = _type_of(value)
    if expected == "number":
        return actual in ("number", "integer")
    if expected == "integer" and actual == "number":
        return float(value).is_integer()
    return actual == expected


def validate_shape(schema: Mapping[str, Any], value: Any, root: str = "$") -> list[str]:
    """Every mismatch between `value` and `schema`, as `path: problem` lines.

    An empty list means the value conforms. At most 20 problems are listed.
    `schema` must have passed `schema_problem`. Paths start at `root`
    (`$.summary`; `input.version` with root `input`).
    """
    errors: list[str] = []
    _check(schema, value, root, errors)
    return errors[:_MAX_ERRORS]


def _check(schema: Mapping[str, Any], value: Any, path: str, errors: list[str]) -> None:
    if len(errors) >= _MAX_ERRORS:
        return
    if "type" in schema:
        types = schema["type"]
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_matches(value, name) for name in names):
            errors.append(f"{path}: expected {' or '.join(names)}, got {_type_of(value) or type(value).__name__}")
            return
    if "enum" in schema and not any(
        _type_of(value) == _type_of(option) and value == option for option in schema["enum"]
    ):
        errors.append(f"{path}: {value!r} is not one of {list(schema['enum'])!r}")
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                errors.append(f"{path}: missing required property {key!r}")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                _check(properties[key], item, f"{path}.{key}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected property {key!r}")
            elif isinstance(extra, Mapping):
                _check(extra, item, f"{path}.{key}", errors)
    elif isinstance(value, (list, tuple)) and "items" in schema:
        for index, item in enumerate(value):
            _check(schema["items"], item, f"{path}[{index}]", errors)
