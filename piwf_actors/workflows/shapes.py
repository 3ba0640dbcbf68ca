"""Typed inputs and outputs: Python classes converted into the shape language of `schema.py`.

`define_workflow(input=…)`, `compute(output=…)` / `action(output=…)` and
`agent(expected_output=…)` take either a shape written in that language (a
JSON-Schema subset, checked by `schema_problem`) or a Python type, which
`shape_of` converts once, when the workflow is defined:

| Python | shape |
| --- | --- |
| `str`, `int`, `float`, `bool`, `None` | `{"type": "string" / "integer" / "number" / "boolean" / "null"}` |
| `list[T]`, `tuple[T, ...]` (bare `list`: any items) | `{"type": "array", "items": T}` |
| `dict[str, T]` (bare `dict`: any values) | `{"type": "object", "additionalProperties": T}` |
| `T | None`, `Optional[T]`; `int | str` | T's `type` with `"null"` added; `["integer", "string"]` |
| `Literal["a", 1]` | `{"enum": ["a", 1]}` |
| `Any` | `{}` (anything) |
| a dataclass, a TypedDict | `{"type": "object", "properties": …, "required": […], "additionalProperties": false}` |

A dataclass field with a default (a TypedDict key that is not required) may be
left out; an unknown key is refused, so a misspelt field name is caught. The
value a node sees stays the plain JSON value (`ctx.input` is a dict, not an
instance): the class only describes it (a durable function's parameters and step results are
converted to it: typed_values.py). Anything else (a set, a union of two
classes, a recursive class, a string annotation that does not resolve) is a
`ShapeError` naming where it sits.

`value_problem` is the one-line refusal of a value; `compact` renders a shape
for people (`{version: string, dry_run?: boolean}`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from typing import Any

from piwf_actors.workflows.model import freeze
from piwf_actors.workflows.schema import schema_problem, validate_shape

#: Joins a refused run input's problems and the shape it should have had, in one line (`piwf start`
#: splits the line there to print the shape on a line of its own: cli/runs.py).
EXPECTED_INPUT = "; expected input: "
#: At most this many of a value's problems are named in its refusal.
MAX_NAMED = 3

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_SUPPORTED = ("str, int, float, bool, None, list[T], tuple[T, ...], dict[str, T], T | None, Literal[...], Any, "
              "or a dataclass / TypedDict")


class ShapeError(ValueError):
    """A type or shape that cannot describe JSON values; the message is one line naming where."""


def shape_of(annotation: Any, root: str = "$") -> dict[str, Any]:
    """The shape (plain dicts and lists) of values of the Python type `annotation`; see the module
    docstring for what is supported. Raises ShapeError naming the path below `root` of the first
    type that is not."""
    return _Converter().convert(annotation, root)


def checked_shape(value: Any, root: str = "$") -> Any:
    """A definition's shape argument made ready to check values with: None stays None, a mapping must
    pass `schema_problem`, anything else is a type for `shape_of`. The result is deep-frozen (like
    every mapping inside a Workflow). Raises ShapeError, whose message starts with `root`."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        problem = schema_problem(value)
        if problem:
            raise ShapeError(f"{root}: {problem}")
        return freeze(value)
    return freeze(shape_of(value, root))


def value_problem(shape: Mapping[str, Any], value: Any, root: str) -> str | None:
    """Why `value` does not have `shape`, in one line naming the path of each problem (at most
    three: `input.count: expected integer, got string`), or None when it conforms."""
    problems = validate_shape(shape, value, root)
    if not problems:
        return None
    text = "; ".join(problems[:MAX_NAMED])
    if len(problems) > MAX_NAMED:
        text += f" (and {len(problems) - MAX_NAMED} more)"
    text = " ".join(text.split())
    return text if len(text) <= 600 else text[:599] + "…"


def input_refusal(shape: Mapping[str, Any] | None, value: Any) -> str | None:
    """The one-line refusal of a run input that does not have its workflow's input `shape` — the
    problems, then the shape expected — or None when it conforms (or the workflow declares none)."""
    if shape is None:
        return None
    problem = value_problem(shape, value, "input")
    return None if problem is None else f"{problem}{EXPECTED_INPUT}{compact(shape)}"


def compact(shape: Mapping[str, Any], limit: int = 300) -> str:
    """A shape for people, on one line: `{version: string, dry_run?: boolean, tags?: [string]}`
    (`?`: may be left out; `{*: integer}`: any keys; `"a" | "b"`: one of these values)."""
    text = _compact(shape, 0)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(shape: Mapping[str, Any], depth: int) -> str:
    if depth > 8:
        return "…"
    if "enum" in shape:
        return " | ".join(json.dumps(option, ensure_ascii=False) for option in shape["enum"])
    types_ = shape.get("type")
    names = [types_] if isinstance(types_, str) else list(types_ or ())
    if not names:
        names = ["object"] if "properties" in shape else ["array"] if "items" in shape else ["any"]
    parts = []
    for name in names:
        extra = shape.get("additionalProperties")
        if name == "object" and ("properties" in shape or isinstance(extra, Mapping)):
            required = set(shape.get("required", ()))
            fields = [f"{key}{'' if key in required else '?'}: {_compact(sub, depth + 1)}"
                      for key, sub in (shape.get("properties") or {}).items()]
            if isinstance(extra, Mapping):
                fields.append(f"*: {_compact(extra, depth + 1)}")
            parts.append("{" + ", ".join(fields) + "}")
        elif name == "array" and "items" in shape:
            parts.append(f"[{_compact(shape['items'], depth + 1)}]")
        else:
            parts.append(name)
    return " | ".join(parts)


def _scalar(annotation: Any) -> str | None:
    if annotation is None:
        return "null"
    try:
        return _SCALARS.get(annotation)
    except TypeError:  # unhashable: no type at all (a list given where a type belongs)
        return None


def _name(annotation: Any) -> str:
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


class _Converter:
    """One conversion; `active` holds the classes being converted, so a recursive one is refused."""

    def __init__(self) -> None:
        self.active: list[type] = []

    def convert(self, annotation: Any, path: str) -> dict[str, Any]:
        if annotation is Any:
            return {}
        scalar = _scalar(annotation)
        if scalar is not None:
            return {"type": scalar}
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            return self.convert(args[0], path)
        if origin in (typing.Required, typing.NotRequired):
            return self.convert(args[0], path)
        if origin is typing.Literal:
            return self._literal(args, path)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args, path)
        if annotation is list or origin is list:
            return {"type": "array", **({"items": self.convert(args[0], f"{path}[]")} if args else {})}
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.convert(args[0], f"{path}[]")}
        if annotation is dict or origin is dict:
            return self._dict(args, path)
        if isinstance(annotation, type) and (dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation)):
            return self._class(annotation, path)
        if isinstance(annotation, str):
            raise ShapeError(f"{path}: the annotation {annotation!r} is a string that was not resolved; "
                             "name the type itself")
        raise ShapeError(f"{path}: unsupported type {_name(annotation)}; use {_SUPPORTED}")

    def _literal(self, options: tuple[Any, ...], path: str) -> dict[str, Any]:
        for option in options:
            if option is not None and type(option) not in (str, int, bool):
                raise ShapeError(f"{path}: Literal values must be strings, integers, booleans or None, "
                                 f"got {option!r}")
        return {"enum": list(options)}

    def _union(self, members: tuple[Any, ...], path: str) -> dict[str, Any]:
        others = [member for member in members if member is not type(None)]
        nullable = len(others) < len(members)
        if len(others) == 1:
            shape = self.convert(others[0], path)
        else:
            shapes = [self.convert(member, path) for member in others]
            if not all(set(shape) == {"type"} and isinstance(shape["type"], str) for shape in shapes):
                raise ShapeError(f"{path}: a union may only join plain types (int | str) or add None, "
                                 f"not {' | '.join(_name(member) for member in members)}")
            shape = {"type": [shape["type"] for shape in shapes]}
        return _nullable(shape) if nullable else shape

    def _dict(self, args: tuple[Any, ...], path: str) -> dict[str, Any]:
        if not args:
            return {"type": "object"}
        if args[0] is not str:
            raise ShapeError(f"{path}: dict keys must be str (JSON object keys are strings), got {_name(args[0])}")
        values = self.convert(args[1], f"{path}.*")
        return {"type": "object", **({"additionalProperties": values} if values else {})}

    def _class(self, cls: type, path: str) -> dict[str, Any]:
        if cls in self.active:
            raise ShapeError(f"{path}: {cls.__qualname__} refers to itself; recursive types are not supported")
        fields = class_fields(cls, path)
        self.active.append(cls)
        try:
            properties = {name: self.convert(hint, f"{path}.{name}") for name, hint, _ in fields}
        finally:
            self.active.pop()
        required = [name for name, _, needed in fields if needed]
        return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def class_fields(cls: type, path: str = "$") -> tuple[tuple[str, Any, bool], ...]:
    """The fields of a dataclass (those its `__init__` takes) or the keys of a TypedDict, in order, as
    (name, resolved type, required). A dataclass field is required when it has no default (nor
    default_factory). Raises ShapeError naming `path` when the class's annotations do not resolve.
    Remembered per class: typed_values.restore asks for them at each replayed step."""
    try:
        return _class_fields(cls)
    except Exception as exc:  # a forward reference that does not resolve where the class was defined
        raise ShapeError(f"{path}: cannot resolve the annotations of {cls.__qualname__}: "
                         f"{type(exc).__name__}: {exc}") from None


@functools.lru_cache(maxsize=512)
def _class_fields(cls: type) -> tuple[tuple[str, Any, bool], ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    if dataclasses.is_dataclass(cls):
        return tuple((field.name, hints[field.name], field.default is dataclasses.MISSING
                      and field.default_factory is dataclasses.MISSING)
                     for field in dataclasses.fields(cls) if field.init)
    return tuple((name, hint, _required_key(cls, name, hint)) for name, hint in hints.items())


def _required_key(cls: type, name: str, hint: Any) -> bool:
    """Whether a TypedDict's key is required. The hint decides first: Python 3.11 cannot see
    `NotRequired[...]` in a string annotation (`from __future__ import annotations`) and lists
    such a key in `__required_keys__`."""
    origin = typing.get_origin(hint)
    if origin is typing.NotRequired:
        return False
    return origin is typing.Required or name in getattr(cls, "__required_keys__", frozenset((name,)))


def _nullable(shape: dict[str, Any]) -> dict[str, Any]:
    """`shape` that also admits null (`{}` admits it already)."""
    if not shape:
        return shape
    out = dict(shape)
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    if "type" in out:
        names = [out["type"]] if isinstance(out["type"], str) else list(out["type"])
        out["type"] = names + ([] if "null" in names else ["null"])
    return out
