"""Typed message records: frozen dataclasses converted at the wire edge.

    @registry.register                      # above @dataclass: slots=True
    @dataclass(frozen=True, slots=True)     # makes a new class
    class RunCancel(WireRecord):
        KIND: ClassVar[str] = "run.cancel"
        run_id: str
        reason: str | None = None

`to_wire()` gives a wire map with the tag (`"kind": KIND`) and every field;
`from_wire(data)` checks that map against the field annotations and raises a
single DecodeError naming the field path (`items[2].run_id`). Supported
annotations: str, int (bool refused, 64-bit range), float (int accepted),
bool, bytes, dict / dict[str, X], list / list[X], tuple / tuple[X, ...]
(stored as tuple), Any (any wire value, not re-checked: the codec already
did), X | None, Literal[...] of str/int/bool/None, and nested WireRecord
subclasses. Anything else is a TypeError when the record is first used.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any, ClassVar, Literal, Self, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from piwf_actors.errors import DecodeError
from piwf_actors.messages.codec import INT_MAX, INT_MIN, pack, unpack, wire_type_name

__all__ = ["RecordRegistry", "WireRecord"]

_Converter = Callable[[Any], Any]
_MISSING: Any = object()


class _Invalid(Exception):
    """A decode failure on its way up; each level adds its path segment."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    @classmethod
    def at(cls, segment: str, reason: str) -> _Invalid:
        invalid = cls(reason)
        invalid.path.append(segment)
        return invalid

    def describe(self) -> str:
        where = "".join(reversed(self.path)).lstrip(".")
        return f"{where[:200]}: {self.reason}" if where else self.reason


def _short(value: Any) -> str:
    # Peers choose these values; keep the message one short line.
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


class WireRecord:
    """Mixin for `@dataclass(frozen=True, slots=True)` message records.

    Subclasses set `KIND` (the tag value) and may override `TAG_KEY` (the
    tag's map key, "kind" unless the protocol says otherwise, e.g. "type").
    A `__post_init__` may check ranges; ValueError/TypeError it raises during
    `from_wire` become DecodeError.
    """

    __slots__ = ()

    KIND: ClassVar[str]
    TAG_KEY: ClassVar[str] = "kind"

    def to_wire(self) -> dict[str, Any]:
        """The record as a wire map: tag, then every field (None included).

        Nested records become maps and tuples become lists; `Any` and `dict`
        field values are passed through and checked by `pack`.
        """
        plan = _plan_for(type(self))
        wire: dict[str, Any] = {plan.tag_key: plan.kind}
        for field in plan.fields:
            value = getattr(self, field.name)
            wire[field.name] = value if field.encode is None else field.encode(value)
        return wire

    @classmethod
    def from_wire(cls, data: Any) -> Self:
        """Build the record from a wire map; DecodeError on any mismatch.

        Refused: a non-map, a missing or different tag, a missing required
        field, an unexpected field, a value of the wrong type or range.
        """
        try:
            return _decode_record(cls, data)
        except _Invalid as invalid:
            raise DecodeError(f"invalid {cls.KIND} record: {invalid.describe()}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    required: bool
    decode: _Converter | None  # None: any value is taken as is
    encode: _Converter | None  # None: the value is already a wire value


@dataclasses.dataclass(frozen=True, slots=True)
class _RecordPlan:
    kind: str
    tag_key: str
    fields: tuple[_FieldPlan, ...]


R = TypeVar("R", bound=WireRecord)


def _decode_record(cls: type[R], data: Any) -> R:
    plan = _plan_for(cls)
    if type(data) is not dict:
        raise _Invalid(f"expected a map, got {wire_type_name(data)}")
    tag = data.get(plan.tag_key, _MISSING)
    if tag != plan.kind or type(tag) is not str:
        reason = "missing" if tag is _MISSING else f"expected {plan.kind!r}, got {_short(tag)}"
        raise _Invalid.at("." + plan.tag_key, reason)
    kwargs: dict[str, Any] = {}
    for field in plan.fields:
        value = data.get(field.name, _MISSING)
        if value is _MISSING:
            if field.required:
                raise _Invalid.at("." + field.name, "missing")
            continue
        if field.decode is not None:
            try:
                value = field.decode(value)
            except _Invalid as invalid:
                invalid.path.append("." + field.name)
                raise
        kwargs[field.name] = value
    if len(kwargs) + 1 != len(data):
        known = {field.name for field in plan.fields}
        known.add(plan.tag_key)
        extra = next(key for key in data if key not in known)
        raise _Invalid.at("." + extra if type(extra) is str else _short(extra), "unexpected field")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        raise _Invalid(" ".join(str(exc).split())[:300] or type(exc).__name__) from None


# --- plans: built once per class, on first use ---------------------------------
#
# Lazily, because a record may name a record class defined further down its
# module, which get_type_hints cannot resolve while the module is executing.
# A race between threads only builds the same plan twice.

_PLANS: dict[type[WireRecord], _RecordPlan] = {}  # cache, never invalidated


def _plan_for(cls: type[WireRecord]) -> _RecordPlan:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _build_plan(cls)
    return plan


def _build_plan(cls: type[WireRecord]) -> _RecordPlan:
    if not (isinstance(cls, type) and issubclass(cls, WireRecord) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass WireRecord subclass")
    kind = getattr(cls, "KIND", None)
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"{cls.__qualname__} needs a non-empty str KIND")
    try:
        hints = get_type_hints(cls)
    except Exception as exc:
        raise TypeError(f"cannot resolve the annotations of {cls.__qualname__}: {exc}") from exc
    fields = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue  # derived in __post_init__, not part of the message
        if field.name == cls.TAG_KEY:
            raise TypeError(f"{cls.__qualname__}.{field.name} clashes with the tag key")
        try:
            decode, encode = _converters(hints[field.name])
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__}.{field.name}: {exc}") from None
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        fields.append(_FieldPlan(field.name, required, decode, encode))
    return _RecordPlan(kind, cls.TAG_KEY, tuple(fields))


def _converters(hint: Any) -> tuple[_Converter | None, _Converter | None]:
    """(decode, encode) for one annotation; TypeError if it is not supported."""
    if hint is Any:
        return None, None
    if hint is int:
        return _decode_int, None
    if hint is float:
        return _decode_float, None
    if hint in (str, bool, bytes):
        return _exact(hint), None
    if isinstance(hint, type) and issubclass(hint, WireRecord):
        return _nested_record(hint), _encode_record
    origin, args = get_origin(hint), get_args(hint)
    if hint is dict or origin is dict:
        return _dict_converters(args)
    if hint in (list, tuple) or origin in (list, tuple):
        return _sequence_converters(origin or hint, args)
    if origin is Union or origin is types.UnionType:
        return _optional_converters(args)
    if origin is Literal:
        return _literal(args), None
    raise TypeError(f"unsupported annotation {hint!r}")


def _exact(expected: type) -> _Converter:
    label = expected.__name__

    def decode(value: Any) -> Any:
        if type(value) is expected:
            return value
        raise _Invalid(f"expected {label}, got {wire_type_name(value)}")

    return decode


def _decode_int(value: Any) -> int:
    if type(value) is not int:  # bool is an int subclass; refused here
        raise _Invalid(f"expected int, got {wire_type_name(value)}")
    if not INT_MIN <= value <= INT_MAX:
        raise _Invalid("int outside [-2**63, 2**64-1]")
    return value


def _decode_float(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        if INT_MIN <= value <= INT_MAX:
            return float(value)
        raise _Invalid("int outside [-2**63, 2**64-1]")
    raise _Invalid(f"expected float, got {wire_type_name(value)}")


def _nested_record(record_cls: type[WireRecord]) -> _Converter:
    def decode(value: Any) -> Any:
        return _decode_record(record_cls, value)

    return decode


def _encode_record(value: WireRecord) -> dict[str, Any]:
    return value.to_wire()


def _dict_converters(args: tuple[Any, ...]) -> tuple[_Converter, _Converter | None]:
    if args and args[0] is not str:
        raise TypeError("dict keys must be str")
    item_decode, item_encode = _converters(args[1]) if args else (None, None)

    def decode(value: Any) -> Any:
        if type(value) is not dict:
            raise _Invalid(f"expected map, got {wire_type_name(value)}")
        if item_decode is None:
            return value
        result = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Invalid(f"map key of type {wire_type_name(key)}")
            try:
                result[key] = item_decode(item)
            except _Invalid as invalid:
                invalid.path.append(f"[{_short(key)}]")
                raise
        return result

    if item_encode is None:
        return decode, None

    def encode(value: dict[str, Any]) -> dict[str, Any]:
        return {key: item_encode(item) for key, item in value.items()}

    return decode, encode


def _sequence_converters(container: type, args: tuple[Any, ...]) -> tuple[_Converter, _Converter]:
    if container is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
        raise TypeError("only variable-length tuple[X, ...] is supported")
    item_decode, item_encode = _converters(args[0]) if args else (None, None)

    def decode(value: Any) -> Any:
        # Wire arrays are lists; tuples are taken too so that from_wire also
        # reads maps built in-process.
        if type(value) is not list and type(value) is not tuple:
            raise _Invalid(f"expected array, got {wire_type_name(value)}")
        if item_decode is None:
            return container(value)
        items = []
        for index, item in enumerate(value):
            try:
                items.append(item_decode(item))
            except _Invalid as invalid:
                invalid.path.append(f"[{index}]")
                raise
        return items if container is list else tuple(items)

    def encode(value: Any) -> list[Any]:
        if item_encode is None:
            return list(value)
        return [item_encode(item) for item in value]

    return decode, encode


def _optional_converters(args: tuple[Any, ...]) -> tuple[_Converter | None, _Converter | None]:
    others = [arg for arg in args if arg is not type(None)]
    if len(others) != 1 or len(args) != 2:
        raise TypeError("only X | None unions are supported")
    inner_decode, inner_encode = _converters(others[0])
    if inner_decode is None:
        return None, None  # Any | None is just Any

    def decode(value: Any) -> Any:
        return None if value is None else inner_decode(value)

    if inner_encode is None:
        return decode, None

    def encode(value: Any) -> Any:
        return None if value is None else inner_encode(value)

    return decode, encode


def _literal(args: tuple[Any, ...]) -> _Converter:
    if not all(type(arg) in (str, int, bool, type(None)) for arg in args):
        raise TypeError("Literal values must be str, int, bool or None")
    # Keyed by type as well: True == 1, but a bool is not the int literal 1.
    allowed = frozenset((type(arg), arg) for arg in args)
    expected = ", ".join(repr(arg) for arg in args)

    def decode(value: Any) -> Any:
        try:
            if (type(value), value) in allowed:
                return value
        except TypeError:  # unhashable: a list or a map
            pass
        raise _Invalid(f"expected one of {expected[:200]}, got {_short(value)}")

    return decode


class RecordRegistry:
    """Kind tag → record class, for decoding whatever kind arrives.

    Create one per protocol (the gateway's, the worker link's); it is
    filled at import time by `register` and only read afterwards.
    """

    def __init__(self, tag_key: str = "kind") -> None:
        self.tag_key = tag_key
        self._classes: dict[str, type[WireRecord]] = {}

    def register(self, cls: type[R]) -> type[R]:
        """Add a record class; usable as a decorator (above `@dataclass`).

        TypeError if `cls` is not a dataclass WireRecord with a str KIND and
        this registry's tag key, or if its KIND is taken by another class.
        """
        if not (isinstance(cls, type) and issubclass(cls, WireRecord) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"{cls!r} is not a dataclass WireRecord subclass (put @register above @dataclass)")
        kind = getattr(cls, "KIND", None)
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"{cls.__qualname__} needs a non-empty str KIND")
        if self.tag_key != cls.TAG_KEY:
            raise TypeError(f"{cls.__qualname__} is tagged by {cls.TAG_KEY!r}, this registry by {self.tag_key!r}")
        known = self._classes.get(kind)
        if known is not None and known is not cls:
            raise TypeError(f"kind {kind!r} is already registered to {known.__qualname__}")
        self._classes[kind] = cls
        return cls

    def decode(self, data: Any) -> WireRecord:
        """The record a wire map describes; DecodeError for an unknown kind or bad map."""
        if type(data) is not dict:
            raise DecodeError(f"expected a map, got {wire_type_name(data)}")
        kind = data.get(self.tag_key)
        cls = self._classes.get(kind) if type(kind) is str else None
        if cls is None:
            raise DecodeError(f"unknown {self.tag_key} {_short(kind)}")
        return cls.from_wire(data)

    def roundtrip(self, record: R) -> R:
        """`record` through to_wire, pack, unpack and decode (for tests).

        TypeError if its class is not the one registered for its kind.
        """
        if self._classes.get(record.KIND) is not type(record):
            raise TypeError(f"{type(record).__qualname__} is not registered here")
        return cast(R, self.decode(unpack(pack(record.to_wire()))))
