"""msgpack encoding of wire values, strict in both directions.

A *wire value* is None, bool, int in [-2**63, 2**64 - 1], float, str, bytes,
a list (tuples are accepted when packing) or a dict with str keys, nested at
most `MAX_DEPTH` containers deep: ``[]`` has depth 1, ``{"a": [1]}`` depth 2.

`pack` raises only `EncodeError`; `unpack` and `unpack_map` raise only
`DecodeError` (or its subclass `FrameTooLarge`), whatever the bytes are,
because they read what untrusted peers send.
"""

from __future__ import annotations

from typing import Any, NoReturn

import msgpack

from piwf_actors.errors import DecodeError, EncodeError, FrameTooLarge

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_FRAME_BYTES",
    "pack",
    "unpack",
    "unpack_map",
    "wire_type_name",
]

MAX_FRAME_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32
# msgpack's integer range: int64 for negatives, uint64 for the rest.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1

# Exact types only: a subclass (IntEnum, StrEnum, namedtuple, OrderedDict,
# msgpack.ExtType, which is a namedtuple) would come back as its base type or
# not at all, so it is refused rather than silently changed.
_SCALAR_TYPES = frozenset({type(None), bool, int, float, str, bytes})

# Everything the C unpacker (or a hook) is known to raise for bad input.
# RuntimeError covers RecursionError; UnpackException covers OutOfData and
# BufferFull, which are not ValueErrors.
_UNPACK_FAILURES = (
    ValueError,
    TypeError,
    OverflowError,
    MemoryError,
    RuntimeError,
    msgpack.UnpackException,
)

_SILENT_FAILURES: dict[type[BaseException], str] = {
    msgpack.FormatError: "reserved or unknown type byte",
    msgpack.StackError: "nesting too deep",
}

_PATH_LIMIT = 200


class _Refused(Exception):
    """Raised inside the tree walk; carries the path back up, innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def describe(self) -> str:
        if not self.path:
            return self.reason
        where = "$" + "".join(reversed(self.path))
        if len(where) > _PATH_LIMIT:
            where = where[: _PATH_LIMIT - 1] + "…"
        return f"{self.reason} at {where}"


def _key_segment(key: str) -> str:
    # Keys may come from a peer: repr() keeps them on one line, the cut keeps
    # the message short.
    return "." + key if key.isidentifier() and len(key) <= 40 else f"[{key[:40]!r}]"


def _walk(value: Any, depth: int) -> None:
    """Check that `value` (a container at nesting `depth`) is a wire value.

    Only containers recurse, so Python's recursion stays within MAX_DEPTH + 1
    frames even for self-referencing lists.
    """
    if depth > MAX_DEPTH:
        raise _Refused(f"nesting deeper than {MAX_DEPTH}")
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _Refused(f"map key of type {type(key).__name__} (keys must be str)")
            if type(item) not in _SCALAR_TYPES:
                try:
                    _walk(item, depth + 1)
                except _Refused as refused:
                    refused.path.append(_key_segment(key))
                    raise
    elif kind is list or kind is tuple:
        for index, item in enumerate(value):
            if type(item) not in _SCALAR_TYPES:
                try:
                    _walk(item, depth + 1)
                except _Refused as refused:
                    refused.path.append(f"[{index}]")
                    raise
    else:
        raise _Refused(f"unsupported type {kind.__name__}")


def _check_tree(value: Any) -> None:
    if type(value) not in _SCALAR_TYPES:
        _walk(value, 1)


def pack(value: Any) -> bytes:
    """Encode a wire value as msgpack (str as UTF-8 str, bytes as bin).

    Raises EncodeError (one line, naming the offending path) for any other
    type, a non-str map key, nesting deeper than MAX_DEPTH, an int outside
    the 64-bit range or a str that is not encodable as UTF-8 (lone
    surrogates). The size is not limited here; `encode_frame` does that.
    """
    try:
        _check_tree(value)
    except _Refused as refused:
        raise EncodeError(f"cannot encode: {refused.describe()}") from None
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True)
    except OverflowError:
        # msgpack's range check is cheaper than checking every int ourselves.
        raise EncodeError("cannot encode: integer outside [-2**63, 2**64-1]") from None
    except (ValueError, TypeError) as exc:  # UnicodeEncodeError, >4 GiB strings
        raise EncodeError(f"cannot encode: {' '.join(str(exc).split())[:200]}") from None
    return packed


def _refuse_ext(code: int, data: bytes) -> NoReturn:
    # Reached only for zero-length ext payloads (max_ext_len=0 stops the
    # rest); type -1 never gets here, msgpack treats it as a Timestamp first.
    raise ValueError(f"extension type {code} refused")


def _map_from_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # msgpack keeps the last of duplicate keys silently; two readers of the
    # same frame could then disagree on what it said, so refuse them.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate map key")
    return result


def _decode_failure(exc: BaseException) -> NoReturn:
    # FormatError and StackError arrive without a message.
    detail = " ".join(str(exc).split())[:200]
    if not detail:
        detail = _SILENT_FAILURES.get(type(exc), type(exc).__name__)
    raise DecodeError(f"invalid msgpack: {detail}") from None


def unpack(data: bytes | bytearray, *, max_bytes: int = MAX_FRAME_BYTES) -> Any:
    """Decode exactly one msgpack value from `data` (at most `max_bytes` long).

    The result is a wire value: arrays become lists, map keys are str. Raises
    FrameTooLarge if `data` is longer than `max_bytes`, and DecodeError for
    everything else that is wrong: truncated input, trailing bytes, reserved
    byte 0xc1, non-UTF-8 str, bin or non-str map keys, duplicate map keys,
    any extension type (Timestamp included), declared lengths larger than
    the input, nesting deeper than MAX_DEPTH, or `data` not being bytes.
    """
    try:
        size = len(data)
    except TypeError:
        raise DecodeError(f"cannot decode a {type(data).__name__}") from None
    if size > max_bytes:
        raise FrameTooLarge(size, max_bytes)
    try:
        # Every element takes at least one byte (a map entry two), so these
        # bounds refuse huge declared lengths before anything is allocated.
        value = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            timestamp=0,
            ext_hook=_refuse_ext,
            object_pairs_hook=_map_from_pairs,
            max_ext_len=0,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=size,
            max_map_len=size // 2,
        )
    except _UNPACK_FAILURES as exc:
        _decode_failure(exc)
    try:
        # Also catches bin map keys (strict_map_key admits bytes) and any
        # Timestamp that got past the ext limits.
        _check_tree(value)
    except _Refused as refused:
        raise DecodeError(f"invalid message: {refused.describe()}") from None
    return value


def unpack_map(data: bytes | bytearray, *, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any]:
    """Like `unpack`, but the top-level value must be a map."""
    value = unpack(data, max_bytes=max_bytes)
    if type(value) is not dict:
        raise DecodeError(f"expected a map at the top level, got {wire_type_name(value)}")
    return value


_WIRE_TYPE_NAMES = {type(None): "nil", list: "array", tuple: "array", dict: "map"}


def wire_type_name(value: Any) -> str:
    """The msgpack-ish name of a value's type, for one-line error messages."""
    kind = type(value)
    return _WIRE_TYPE_NAMES.get(kind) or kind.__name__
