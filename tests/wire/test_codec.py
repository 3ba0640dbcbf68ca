"""codec: what pack accepts and unpack refuses, at the exact limits."""

from __future__ import annotations

import collections
import datetime
import enum
import tracemalloc
from typing import Any

import msgpack
import pytest

from piwf_actors.errors import DecodeError, EncodeError, FrameTooLarge
from piwf_actors.wire import INT_MAX, INT_MIN, MAX_DEPTH, MAX_FRAME_BYTES, pack, unpack, unpack_map


def nested_lists(depth: int, leaf: Any = 1) -> Any:
    """`depth` lists inside each other, the innermost holding `leaf`."""
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_maps(depth: int, leaf: Any = "leaf") -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


# --- pack -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        INT_MIN,
        INT_MAX,
        1.5,
        float("inf"),
        "",
        "héllo ✓",
        b"",
        b"\x00\xff",
        [],
        {},
        {"a": [1, {"b": None}], "c": b"x"},
    ],
)
def test_pack_unpack_roundtrip(value: Any) -> None:
    assert unpack(pack(value)) == value


def test_pack_uses_bin_for_bytes_and_str_for_text() -> None:
    assert pack(b"a") == b"\xc4\x01a"
    assert pack("a") == b"\xa1a"


def test_tuples_pack_as_arrays_and_come_back_as_lists() -> None:
    assert unpack(pack((1, (2, 3)))) == [1, [2, 3]]


def test_nan_survives() -> None:
    result = unpack(pack(float("nan")))
    assert result != result


@pytest.mark.parametrize("value", [INT_MAX + 1, INT_MIN - 1, [1, {"a": 2**70}]])
def test_pack_refuses_ints_outside_64_bits(value: Any) -> None:
    with pytest.raises(EncodeError, match="integer outside"):
        pack(value)


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        object(),
        {1, 2},
        bytearray(b"x"),
        memoryview(b"x"),
        msgpack.ExtType(1, b"x"),
        msgpack.Timestamp(1),
        datetime.datetime(2024, 1, 1),
        Color.RED,
        Name("x"),
        collections.OrderedDict(a=1),
        [1, 2, {"a": object()}],
    ],
    ids=lambda value: type(value).__name__,
)
def test_pack_refuses_other_types(value: Any) -> None:
    with pytest.raises(EncodeError, match="unsupported type"):
        pack(value)


@pytest.mark.parametrize("key", [1, b"k", (1,), None, True])
def test_pack_refuses_non_str_keys(key: Any) -> None:
    with pytest.raises(EncodeError, match="map key"):
        pack({"outer": {key: 1}})


def test_pack_error_names_the_path_on_one_line() -> None:
    with pytest.raises(EncodeError) as caught:
        pack({"payload": {"items": [1, 2, {"when": datetime.date(2024, 1, 1)}]}})
    message = str(caught.value)
    assert "$.payload.items[2].when" in message
    assert "\n" not in message


def test_pack_refuses_lone_surrogates() -> None:
    with pytest.raises(EncodeError):
        pack({"a": "\ud800"})


def test_pack_depth_limit() -> None:
    assert unpack(pack(nested_lists(MAX_DEPTH))) == nested_lists(MAX_DEPTH)
    assert unpack(pack(nested_maps(MAX_DEPTH))) == nested_maps(MAX_DEPTH)
    with pytest.raises(EncodeError, match="nesting deeper than 32"):
        pack(nested_lists(MAX_DEPTH + 1))
    with pytest.raises(EncodeError, match="nesting deeper than 32"):
        pack(nested_maps(MAX_DEPTH + 1))


def test_pack_refuses_self_reference() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EncodeError, match="nesting"):
        pack(loop)


# --- unpack -----------------------------------------------------------------


def test_unpack_size_boundary() -> None:
    data = pack({"k": b"x" * 95})
    assert len(data) == 100
    assert unpack(data, max_bytes=100) == {"k": b"x" * 95}
    with pytest.raises(FrameTooLarge) as caught:
        unpack(data, max_bytes=99)
    assert (caught.value.size, caught.value.limit) == (100, 99)


def test_unpack_default_limit_is_4_mib() -> None:
    # bin32 header is 5 bytes; fixmap 1 + fixstr "k" 2 = 8 bytes around the blob.
    exact = pack({"k": b"x" * (MAX_FRAME_BYTES - 8)})
    assert len(exact) == MAX_FRAME_BYTES
    assert len(unpack(exact)["k"]) == MAX_FRAME_BYTES - 8
    with pytest.raises(FrameTooLarge):
        unpack(pack({"k": b"x" * (MAX_FRAME_BYTES - 7)}))


def test_unpack_depth_limit() -> None:
    assert unpack(b"\x91" * MAX_DEPTH + b"\xc0") == nested_lists(MAX_DEPTH, leaf=None)
    assert unpack(b"\x81\xa1k" * MAX_DEPTH + b"\xc0") == nested_maps(MAX_DEPTH, leaf=None)
    with pytest.raises(DecodeError, match="nesting deeper than 32"):
        unpack(b"\x91" * (MAX_DEPTH + 1) + b"\xc0")
    # Past msgpack's own stack limit too: still only DecodeError.
    with pytest.raises(DecodeError):
        unpack(b"\x91" * 5000 + b"\xc0")
    # Maps count the same as arrays.
    with pytest.raises(DecodeError, match="nesting"):
        unpack(b"\x81\xa1k" * (MAX_DEPTH + 1) + b"\xc0")


def test_unpack_depth_32_exact_values() -> None:
    assert unpack(b"\x91" * MAX_DEPTH + b"\x01") == nested_lists(MAX_DEPTH)
    assert unpack(pack(nested_maps(MAX_DEPTH))) == nested_maps(MAX_DEPTH)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xd4\x05\x00", id="fixext1"),
        pytest.param(b"\xd8\x05" + b"\x00" * 16, id="fixext16"),
        pytest.param(b"\xc7\x01\x05\x00", id="ext8"),
        pytest.param(b"\xc7\x00\x05", id="ext8-empty-payload"),
        pytest.param(b"\xc8\x00\x00\x05", id="ext16-empty-payload"),
        pytest.param(b"\xc9\x00\x00\x00\x00\x05", id="ext32-empty-payload"),
        pytest.param(b"\x81\xa1k\xd4\x05\x00", id="ext-inside-map"),
    ],
)
def test_unpack_refuses_extension_types(data: bytes) -> None:
    with pytest.raises(DecodeError):
        unpack(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(msgpack.packb(msgpack.Timestamp(1)), id="timestamp32"),
        pytest.param(msgpack.packb(msgpack.Timestamp(1, 5)), id="timestamp64"),
        pytest.param(msgpack.packb(msgpack.Timestamp(2**40, 5)), id="timestamp96"),
        pytest.param(msgpack.packb(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), datetime=True), id="datetime"),
        pytest.param(b"\xc7\x00\xff", id="timestamp-empty-payload"),
    ],
)
def test_unpack_refuses_timestamps(data: bytes) -> None:
    with pytest.raises(DecodeError):
        unpack(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xa2\xff\xfe", id="invalid-utf8"),
        pytest.param(b"\xa3\xed\xa0\x80", id="encoded-surrogate"),
        pytest.param(b"\xa2\xc3\x28", id="bad-continuation"),
        pytest.param(b"\x81\xa2\xff\xfe\x01", id="invalid-utf8-key"),
    ],
)
def test_unpack_refuses_non_utf8_strings(data: bytes) -> None:
    with pytest.raises(DecodeError):
        unpack(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x81\x01\x01", id="int-key"),
        pytest.param(b"\x81\xc0\x01", id="nil-key"),
        pytest.param(b"\x81\xc3\x01", id="bool-key"),
        pytest.param(b"\x81\xcb" + b"\x00" * 8 + b"\x01", id="float-key"),
        pytest.param(b"\x81\x90\x01", id="array-key"),
        pytest.param(b"\x81\x80\x01", id="map-key"),
        pytest.param(b"\x81\xc4\x01k\x01", id="bin-key"),
        pytest.param(b"\x81\xa1k\x81\xc4\x01k\x01", id="nested-bin-key"),
    ],
)
def test_unpack_refuses_non_str_keys(data: bytes) -> None:
    with pytest.raises(DecodeError):
        unpack(data)


def test_unpack_refuses_duplicate_keys() -> None:
    with pytest.raises(DecodeError, match="duplicate"):
        unpack(b"\x82\xa1a\x01\xa1a\x02")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\xa5abc", id="short-str"),
        pytest.param(b"\x92\x01", id="short-array"),
        pytest.param(b"\x82\xa1a\x01", id="short-map"),
        pytest.param(b"\xcd\x01", id="short-uint16"),
        pytest.param(b"\xcb\x00\x00", id="short-float"),
        pytest.param(b"\xc4", id="bin-without-length"),
    ],
)
def test_unpack_refuses_truncated_input(data: bytes) -> None:
    with pytest.raises(DecodeError):
        unpack(data)


def test_unpack_refuses_trailing_bytes() -> None:
    with pytest.raises(DecodeError, match="extra"):
        unpack(pack({"a": 1}) + b"\xc0")


def test_unpack_refuses_reserved_byte() -> None:
    for data in (b"\xc1", b"\x91\xc1", b"\x81\xa1k\xc1"):
        with pytest.raises(DecodeError):
            unpack(data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\xdb\xff\xff\xff\xff", id="str32"),
        pytest.param(b"\xc6\xff\xff\xff\xff", id="bin32"),
        pytest.param(b"\xdd\xff\xff\xff\xff", id="array32"),
        pytest.param(b"\xdf\xff\xff\xff\xff", id="map32"),
        pytest.param(b"\xc9\xff\xff\xff\xff\x05", id="ext32"),
        pytest.param(b"\x91\xdd\x7f\xff\xff\xff", id="nested-array32"),
    ],
)
def test_unpack_refuses_huge_declared_lengths_without_allocating(data: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            unpack(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


@pytest.mark.parametrize("data", ["text", 12, None, [1]], ids=repr)
def test_unpack_refuses_non_bytes_with_decode_error(data: Any) -> None:
    with pytest.raises(DecodeError):
        unpack(data)


def test_unpack_accepts_bytearray_and_full_int_range() -> None:
    assert unpack(bytearray(pack([INT_MIN, INT_MAX]))) == [INT_MIN, INT_MAX]


def test_unpack_map_requires_a_map_at_top_level() -> None:
    assert unpack_map(pack({"a": 1})) == {"a": 1}
    for value in ([1], 1, None, "x"):
        with pytest.raises(DecodeError, match="expected a map"):
            unpack_map(pack(value))


def test_errors_are_one_line() -> None:
    with pytest.raises(DecodeError) as caught:
        unpack(b"\x81\xa3a\nb" + b"\x91" * 40 + b"\xc0")
    assert "\n" not in str(caught.value)
