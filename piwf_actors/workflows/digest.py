"""A workflow digest that is stable across processes for the same source.

The digest is the sha256 of a canonical JSON document (sorted keys, no
whitespace) describing the flattened structure: name, start, max_steps,
every node's kind and options (an output shape too), routes, mounts, and the
input shape when one is declared. A callable is described by
a fingerprint of its code, never by `id()` or a repr with an address:

- `co_code`, `co_names` and `co_consts` (recursively, nested code objects
  included; frozensets sorted because their order depends on the hash seed);
- default arguments and closure cells (simple values as themselves,
  functions recursively, anything else by type name);
- functions of the same module that the code refers to by global name, so
  editing a helper the lambda calls changes the digest too; a durable `@step`
  object (durable/steps.py) counts as the function it wraps, with its options.

A durable function workflow (`Workflow.function`) adds its function to the
document, described the same way (its steps' code included).

Line numbers are not part of the code fingerprint: moving code changes
nothing, changing what it does does.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import types
from collections.abc import Mapping
from typing import Any

from piwf_actors.workflows.model import Edge, Mount, NodeSpec, Switch, Workflow

_MAX_DEPTH = 24


#: Mapping keys whose canonical JSON is themselves in quotes and that sort as their pairs' JSON does:
#: printable ASCII after the closing quote (0x22), without the backslash JSON escapes.
_PLAIN_KEY = re.compile(r"[#-\[\]-~]*")


def _first(pair: list[Any]) -> Any:
    return pair[0]


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


class _Fingerprinter:
    """Turns values into JSON-able descriptions; `seen` breaks recursion between functions."""

    def __init__(self) -> None:
        # Functions being described right now (a cycle names them instead of
        # recursing) and finished descriptions (shared helpers are described once).
        self.active: set[int] = set()
        self.done: dict[int, Any] = {}

    def value(self, value: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH:
            return ["deep"]
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return ["float", repr(value)]
        if isinstance(value, (bytes, bytearray)):
            return ["bytes", bytes(value).hex()]
        if isinstance(value, complex):
            return ["complex", repr(value)]
        if value is Ellipsis:
            return ["ellipsis"]
        if isinstance(value, types.CodeType):
            return self.code(value, None, depth + 1)
        if isinstance(value, (list, tuple)):
            return [type(value).__name__, [self.value(item, depth + 1) for item in value]]
        if isinstance(value, (set, frozenset)):
            items = sorted(canonical_json(self.value(item, depth + 1)) for item in value)
            return ["set", items]
        if isinstance(value, Mapping):
            pairs = [[self.value(k, depth + 1), self.value(v, depth + 1)] for k, v in value.items()]
            if all(type(k) is str and _PLAIN_KEY.fullmatch(k) for k in value):
                # The same order as by each pair's canonical JSON, without encoding them all: such a
                # key is its own JSON text, and its characters all sort after the quote that ends it.
                return ["map", sorted(pairs, key=_first)]
            return ["map", sorted(pairs, key=canonical_json)]
        if isinstance(value, Workflow):
            return ["workflow", value.digest]
        if callable(value):
            return self.callable(value, depth + 1)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: self.value(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
            return ["dataclass", _qualname(type(value)), fields]
        return ["object", _qualname(type(value))]

    def callable(self, fn: Any, depth: int) -> Any:
        if isinstance(fn, types.MethodType):
            return ["method", self.callable(fn.__func__, depth + 1), ["object", _qualname(type(fn.__self__))]]
        if isinstance(fn, functools.partial):
            return [
                "partial", self.callable(fn.func, depth + 1),
                self.value(fn.args, depth + 1), self.value(fn.keywords, depth + 1),
            ]
        if isinstance(fn, types.FunctionType):
            return self.function(fn, depth)
        if isinstance(fn, type):
            return ["class", _qualname(fn)]
        if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
            return ["builtin", _qualname(fn)]
        wrapped = _durable_step(fn)
        if wrapped is not None:  # a `@step` object: described by the user's function and its options
            return ["step", self.value(getattr(fn, "options", None), depth + 1), self.function(wrapped, depth)]
        call = type(fn).__dict__.get("__call__")
        if isinstance(call, types.FunctionType):
            return ["callable_object", _qualname(type(fn)), self.function(call, depth)]
        return ["callable", _qualname(type(fn))]

    def function(self, fn: types.FunctionType, depth: int) -> Any:
        if id(fn) in self.done:
            return self.done[id(fn)]
        if id(fn) in self.active:
            return ["again", fn.__qualname__]
        self.active.add(id(fn))
        closure = [self.value(cell.cell_contents, depth + 1) if _cell_full(cell) else ["empty"]
                   for cell in fn.__closure__ or ()]
        described = [
            "function",
            self.code(fn.__code__, fn.__globals__, depth + 1),
            self.value(fn.__defaults__, depth + 1),
            self.value(fn.__kwdefaults__, depth + 1),
            closure,
        ]
        self.active.discard(id(fn))
        self.done[id(fn)] = described
        return described

    def code(self, code: types.CodeType, module_globals: dict[str, Any] | None, depth: int) -> Any:
        described, names = _code_parts(self, code, depth)
        helpers: dict[str, Any] = {}
        if module_globals is not None:
            for name in names:
                target = module_globals.get(name)
                # Only same-module functions: their code is part of this source file.
                if isinstance(target, types.FunctionType) and target.__globals__ is module_globals:
                    helpers[name] = self.function(target, depth + 1)
                elif (wrapped := _durable_step(target)) is not None and wrapped.__globals__ is module_globals:
                    helpers[name] = self.callable(target, depth + 1)  # a same-module `@step`
        return [*described, helpers]

    def code_description(self, code: types.CodeType, depth: int) -> list[Any]:
        """What describes `code` by itself (no globals): a pure function of the code object and `depth`."""
        consts = [self.value(const, depth + 1) for const in code.co_consts]
        return ["code", code.co_code.hex(), consts, list(code.co_names),
                code.co_argcount, code.co_kwonlyargcount, code.co_flags]


#: (id of a code object, depth) -> (the code object, its description without helpers, the global names
#: its code and nested code use, sorted). A warm worker executes a snapshot's one compiled code object
#: for every launch (workflows/loader.py), so each launch's functions share their code objects with the
#: last launch's and only the part that depends on the module (same-module helpers, defaults, closures)
#: is described again. Code objects are immutable and their constants are literals (no function, no
#: module state), so what is kept is the same whichever module runs the code. The entry holds the code
#: object, so its id is not reused while the entry lives. Bounded: a host loads ever new files (each
#: edit compiles new code objects) and this would keep them all; 4,096 entries is the code of a few
#: hundred workflow files, a few MB at most, and filling it only starts it over (a dict's insert and
#: clear hold the GIL: user-code threads may share it without a lock).
_CODE_PARTS: dict[tuple[int, int], tuple[types.CodeType, list[Any], tuple[str, ...]]] = {}
_CODE_PARTS_MAX = 4096


def _code_parts(printer: _Fingerprinter, code: types.CodeType, depth: int) -> tuple[list[Any], tuple[str, ...]]:
    key = (id(code), depth)
    kept = _CODE_PARTS.get(key)
    if kept is None or kept[0] is not code:
        kept = (code, printer.code_description(code, depth), tuple(sorted(_global_names(code))))
        if len(_CODE_PARTS) >= _CODE_PARTS_MAX:
            _CODE_PARTS.clear()
        _CODE_PARTS[key] = kept
    return kept[1], kept[2]


def _durable_step(value: Any) -> types.FunctionType | None:
    """The user function a `@step` object wraps (`__wrapped__`, durable/steps.py), or None."""
    wrapped = getattr(value, "__wrapped__", None) if not isinstance(value, types.FunctionType) else None
    return wrapped if isinstance(wrapped, types.FunctionType) and hasattr(value, "options") else None


def _cell_full(cell: types.CellType) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return False
    return True


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _qualname(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{module}.{name}" if module else str(name)


def fingerprint(value: Any) -> str:
    """Hex sha256 of a callable's (or any value's) code fingerprint."""
    return hashlib.sha256(canonical_json(_Fingerprinter().value(value)).encode()).hexdigest()


def _node_doc(spec: NodeSpec, printer: _Fingerprinter) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": spec.kind}
    for name, added_later in _node_fields(type(spec)):
        value = getattr(spec, name)
        if value is None and added_later:
            continue  # absent unless declared: digests of nodes written before the field stay as they were
        doc[name] = printer.value(value)
    return doc


#: A node class's fields in order, each with whether it is left out while None (`_ADDED_LATER`): the same
#: for every node of the class, and `dataclasses.fields` is what a snapshot's load spent most on here.
_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _node_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        kind = getattr(cls, "kind", "")
        fields = _FIELDS[cls] = tuple(
            (field.name, (field.name, kind) in _ADDED_LATER or (field.name, "*") in _ADDED_LATER)
            for field in dataclasses.fields(cls))
    return fields


#: (field, node kind or "*": every kind) of the optional fields added after digests were stored, left out
#: while None: a node's `output=` shape, a checkpoint's audience (without one it goes to "*" profiles only),
#: a notification's audience (without one it stays in the session outbox), a node's rate limiter.
_ADDED_LATER = frozenset({("output_shape", "*"), ("audience", "checkpoint"), ("audience", "notify"),
                          ("rate", "*")})


def _route_doc(route: Edge | Switch) -> Any:
    if isinstance(route, Edge):
        return {"edge": route.target}
    return {"switch": {"on": route.on, "cases": dict(route.cases), "default": route.default}}


def workflow_digest(
    *,
    name: str,
    description: str,
    start_at: str,
    max_steps: int,
    nodes: Mapping[str, NodeSpec],
    routes: Mapping[str, Edge | Switch],
    mounts: Mapping[str, Mount],
    concurrency: Any = None,
    input_shape: Any = None,
    function: Any = None,
    rate: Any = None,
    debounce: Any = None,
) -> str:
    """The hex sha256 of the canonical description of a flattened workflow."""
    printer = _Fingerprinter()
    document = {
        "format": 1,
        "name": name,
        "description": description,
        "start_at": start_at,
        "max_steps": max_steps,
        "nodes": {node_id: _node_doc(spec, printer) for node_id, spec in nodes.items()},
        "routes": {node_id: _route_doc(route) for node_id, route in routes.items()},
        "mounts": {
            mount_id: {
                "parent": mount.parent, "workflow": mount.workflow_name, "start": mount.start,
                "input": printer.value(mount.input),
            }
            for mount_id, mount in mounts.items()
        },
    }
    if concurrency is not None:  # absent otherwise: digests of workflows without a limit stay as they were
        document["concurrency"] = printer.value(concurrency)
    if input_shape is not None:  # likewise: the input shape travels with the snapshot's digest
        document["input"] = printer.value(input_shape)
    if rate is not None:  # likewise for flow control by rate (workflows/rate_limits.py)
        document["rate"] = printer.value(rate)
    if debounce is not None:
        document["debounce"] = printer.value(debounce)
    if function is not None:  # a durable function workflow: its code (and its same-module steps')
        document["function"] = printer.value(function)
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()
