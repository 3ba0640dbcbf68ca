"""Parameters and return values of durable functions: typed Python values to and from the JSON a run records.

A function workflow (`piwf_actors.durable`) takes its run input as keyword arguments and returns its
output; its steps return values that are recorded and replayed. Three callers use these pure
functions (no I/O):
- the `@workflow` decorator, at definition: `parameters_shape(fn)` is the run's `input_shape`, which
  the host checks at `run.start` as for any workflow; a parameter it cannot describe (or `*args`,
  `**kwargs`, a positional-only one, an annotation that does not resolve) is a WorkflowDefinitionError;
- the worker, at each launch: `bind_input(fn, input)` gives the keyword arguments, converted from
  JSON to the annotated types (shapes.py's table) with the defaults applied;
- the worker, at each step and at the end: `to_json(value)` is what a step's (or the function's)
  return value is recorded as, and `restore(recorded, annotation)` is what the function gets back —
  on the first run too, so it sees the same types whether a step ran now or was replayed.

So `restore(to_json(x), T) == x` for every `x` of a type `T` that `shapes.shape_of` describes: a
dataclass comes back as an instance (nested ones too; the fields its `__init__` takes are the
recorded ones), a TypedDict as a dict, `tuple[T, ...]` as a tuple, an int where the annotation says
float as a float. Unannotated parameters and `Any` take the JSON value as it is.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.json_values import MAX_VALUE_DEPTH, json_value_problem
from piwf_actors.workflows.shapes import ShapeError, class_fields, shape_of

_KINDS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null",
                           dict: "object", list: "array", tuple: "array"}
_REFUSED_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "is positional-only",
    inspect.Parameter.VAR_POSITIONAL: "collects positional arguments (*args)",
    inspect.Parameter.VAR_KEYWORD: "collects keyword arguments (**kwargs)",
}


def parameters_shape(fn: Callable[..., Any]) -> dict[str, Any]:
    """The shape of `fn`'s run input: an object whose keys are its parameters, each annotated one
    shaped by `shape_of`, an unannotated one `{}` (anything); a parameter with a default may be left
    out. When none is required, null is taken too (an input left out). Raises a one-line
    WorkflowDefinitionError naming the parameter it cannot describe."""
    hints = _hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in _parameters(fn):
        properties[parameter.name] = _parameter_shape(fn, parameter.name, hints)
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    return {"type": "object" if required else ["object", "null"], "properties": properties,
            "required": required, "additionalProperties": False}


def return_annotation(fn: Callable[..., Any]) -> Any:
    """`fn`'s resolved return annotation (`Any` when there is none), for `restore`. Raises a one-line
    WorkflowDefinitionError when it does not resolve or is not a type `shape_of` describes."""
    annotation = _hints(fn).get("return", Any)
    try:
        shape_of(annotation)
    except ShapeError as exc:
        raise WorkflowDefinitionError(f"{_name(fn)}: the return annotation: {_after(str(exc), '$')}") from None
    return annotation


def bind_input(fn: Callable[..., Any], raw_input: Any) -> dict[str, Any]:
    """The keyword arguments to call `fn` with, for the run input `raw_input` (a JSON object, or None
    when `fn` requires nothing): each value restored to its parameter's annotation, each parameter left
    out given its default. The host checked `raw_input` against `parameters_shape(fn)`; what does not
    fit anyway (an unknown or a missing parameter, a wrong value) raises a one-line ValueError naming
    it: nothing is dropped. Runs `__post_init__` of the dataclasses it builds (user code)."""
    parameters = _parameters(fn)
    if raw_input is None:
        raw_input = {}
    if not isinstance(raw_input, Mapping):
        raise ValueError(f"input: expected an object with the parameters of {_name(fn)}, "
                         f"got {_kind(raw_input)}")
    names = {parameter.name for parameter in parameters}
    unknown = [key for key in raw_input if key not in names]
    if unknown:
        takes = ", ".join(sorted(names)) or "none"
        raise ValueError(f"input: {_name(fn)} has no parameter {str(unknown[0])[:100]!r} (it takes: {takes})")
    hints = _hints(fn)
    arguments: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.name not in raw_input:
            if parameter.default is inspect.Parameter.empty:
                raise ValueError(f"input: missing required parameter {parameter.name!r} of {_name(fn)}")
            arguments[parameter.name] = parameter.default
            continue
        try:
            arguments[parameter.name] = restore(raw_input[parameter.name], hints.get(parameter.name, Any),
                                                f"input.{parameter.name}")
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    return arguments


def to_json(value: Any) -> Any:
    """`value` as the JSON a run records: dataclass instances become dicts of the fields their
    `__init__` takes, tuples lists, mappings dicts, subclasses of str/int/float (enums) their plain
    value; everything is copied, `value` is never changed. Anything that is not JSON (a set, bytes,
    an object, a non-text key, NaN or infinity, nesting past `MAX_VALUE_DEPTH`) raises a one-line
    TypeError naming its path (`$.items[2].name`), as json_values does for any run value."""
    plain = _plain(value, 0)
    problem = json_value_problem(plain, "$")
    if problem is not None:
        raise TypeError(problem)
    return plain


def restore(value: Any, annotation: Any, path: str = "$") -> Any:
    """The JSON `value` as a value of the type `annotation` (one `shape_of` describes; see the module
    docstring). A value that does not fit raises a one-line TypeError naming its path below `path`
    (`$.targets[2].port: expected integer, got string`)."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    if annotation is None or annotation is type(None):
        return _expect(value, value is None, "null", path)
    if annotation is bool:
        return _expect(value, type(value) is bool, "boolean", path)
    if annotation is int:
        if type(value) is float and value.is_integer():  # the shape language takes 2.0 as an integer
            return int(value)
        return _expect(value, isinstance(value, int) and not isinstance(value, bool), "integer", path)
    if annotation is float:
        return float(_expect(value, isinstance(value, (int, float)) and not isinstance(value, bool),
                             "number", path))
    if annotation is str:
        return _expect(value, isinstance(value, str), "string", path)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Annotated, typing.Required, typing.NotRequired):
        return restore(value, args[0], path)
    if origin is typing.Literal:
        if not any(_kind(value) == _kind(option) and value == option for option in args):
            raise TypeError(f"{path}: {_shown(value)} is not one of {list(args)!r}")
        return value
    if origin is typing.Union or origin is types.UnionType:
        return _restore_union(value, args, path)
    if annotation is list or origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        _expect(value, isinstance(value, (list, tuple)), "array", path)
        items = [restore(item, args[0], f"{path}[{index}]") for index, item in enumerate(value)] if args \
            else list(value)
        return tuple(items) if origin is tuple else items
    if annotation is dict or origin is dict:
        _expect(value, isinstance(value, Mapping), "object", path)
        if not args:
            return dict(value)
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{path}: has a key of type {type(key).__name__} (object keys are text)")
        return {key: restore(item, args[1], _key_path(path, key)) for key, item in value.items()}
    if isinstance(annotation, type) and (dataclasses.is_dataclass(annotation) or typing.is_typeddict(annotation)):
        return _restore_class(value, annotation, path)
    raise TypeError(f"{path}: cannot restore a value of the type {annotation!r}; "
                    "the types shapes.shape_of describes are supported")


def _restore_union(value: Any, members: tuple[Any, ...], path: str) -> Any:
    """The first member that takes `value`, trying the members of `value`'s own JSON type first (so
    `float | int` keeps 1 an int)."""
    if value is None and type(None) in members:
        return None
    exact = [member for member in members if isinstance(member, type) and type(value) is member]
    for member in exact + [member for member in members if member not in exact and member is not type(None)]:
        try:
            return restore(value, member, path)
        except TypeError:
            continue
    names = " | ".join(getattr(member, "__qualname__", repr(member)) for member in members)
    raise TypeError(f"{path}: {_shown(value)} fits none of {names}")


def _restore_class(value: Any, cls: type, path: str) -> Any:
    """A dataclass instance, or the dict of a TypedDict, from a JSON object: an unknown key or a
    missing required one is refused; a dataclass's defaults come from its constructor."""
    _expect(value, isinstance(value, Mapping), f"object for {cls.__qualname__}", path)
    try:
        fields = class_fields(cls, path)
    except ShapeError as exc:
        raise TypeError(str(exc)) from None
    names = {name for name, _, _ in fields}
    unknown = [key for key in value if key not in names]
    if unknown:
        raise TypeError(f"{path}: {cls.__qualname__} has no field {str(unknown[0])[:100]!r}")
    arguments = {}
    for name, hint, required in fields:
        if name in value:
            arguments[name] = restore(value[name], hint, f"{path}.{name}")
        elif required:
            raise TypeError(f"{path}: missing required field {name!r} of {cls.__qualname__}")
    if not dataclasses.is_dataclass(cls):
        return arguments
    try:
        return cls(**arguments)
    except Exception as exc:  # __post_init__ is user code: its refusal is the value's problem, in one line
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise TypeError(f"{path}: {cls.__qualname__} refused the value: {text}") from None


def _plain(value: Any, depth: int) -> Any:
    """A copy of `value` with dataclasses, tuples and subclasses made plain JSON types; what is not
    convertible stays for `json_value_problem` to name. Stops past MAX_VALUE_DEPTH (a cycle stops too)."""
    if depth > MAX_VALUE_DEPTH:
        return value
    if type(value) in (str, int, float, bool) or value is None:
        return value
    # Subclasses (a StrEnum, an IntEnum member): their plain value, as the JSON encoder would write it.
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _plain(getattr(value, field.name), depth + 1)
                for field in dataclasses.fields(value) if field.init}
    if isinstance(value, Mapping):
        return {key: _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, depth + 1) for item in value]
    return value


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    parameters = list(inspect.signature(fn).parameters.values())
    for parameter in parameters:
        if parameter.kind in _REFUSED_KINDS:
            raise WorkflowDefinitionError(
                f"{_name(fn)}: parameter {parameter.name!r} {_REFUSED_KINDS[parameter.kind]}; the run input "
                "is an object of named values, so each parameter must be one that takes a keyword")
    return parameters


def _parameter_shape(fn: Callable[..., Any], name: str, hints: Mapping[str, Any]) -> dict[str, Any]:
    if name not in hints:
        return {}
    try:
        return shape_of(hints[name], name)
    except ShapeError as exc:
        raise WorkflowDefinitionError(f"{_name(fn)}: parameter {name!r}: {_after(str(exc), name)}") from None


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    """`fn`'s annotations resolved (`from __future__ import annotations` makes them strings); one
    that does not resolve is a WorkflowDefinitionError naming its parameter."""
    try:
        return typing.get_type_hints(fn, include_extras=False)
    except Exception:  # resolved one by one below, to name the culprit
        pass
    unwrapped = inspect.unwrap(fn)
    global_names = getattr(unwrapped, "__globals__", {})
    hints = {}
    for name, annotation in dict(getattr(unwrapped, "__annotations__", None) or {}).items():
        try:
            hints.update(typing.get_type_hints(types.SimpleNamespace(__annotations__={name: annotation}),
                                               global_names))
        except Exception as exc:
            what = "the return annotation" if name == "return" else f"parameter {name!r}"
            problem = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise WorkflowDefinitionError(f"{_name(fn)}: {what}: cannot resolve the annotation "
                                          f"{str(annotation)[:100]!r}: {problem}") from None
    return hints


def _expect(value: Any, fits: bool, expected: str, path: str) -> Any:
    if not fits:
        raise TypeError(f"{path}: expected {expected}, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = "object" if isinstance(value, Mapping) else type(value).__name__
    return kind


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:99] + "…"


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() and len(key) <= 40 else f"{path}[{key[:40]!r}]"


def _after(message: str, root: str) -> str:
    """A ShapeError's message without its leading `root: ` (kept when the path goes deeper)."""
    return message[len(root) + 2:] if message.startswith(f"{root}: ") else message


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__qualname__', repr(fn))}()"
