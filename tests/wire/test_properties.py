"""Property tests: hostile bytes only ever raise DecodeError; valid values round-trip."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piwf_actors.errors import DecodeError
from piwf_actors.wire import (
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    FrameDecoder,
    encode_frame,
    pack,
    unpack,
    unpack_map,
)

# deadline=None: the first examples pay for imports and strategy building.
# database=None: keep the shared checkout free of example databases.
PROPERTY = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)


# Nesting is at most 1 + 9 = 10 deep here; deep_values reaches the limit.
wire_values = st.recursive(scalars, containers, max_leaves=25)


@st.composite
def deep_values(draw: st.DrawFn) -> Any:
    """A wire value wrapped in enough lists/maps to reach exactly depth `MAX_DEPTH` or less."""
    value: Any = draw(scalars)
    for _ in range(draw(st.integers(0, MAX_DEPTH))):
        value = [value] if draw(st.booleans()) else {draw(st.text(max_size=3)): value}
    return value


@st.composite
def damaged_msgpack(draw: st.DrawFn) -> bytes:
    """Valid msgpack with a few bytes overwritten, inserted, or cut off."""
    data = bytearray(pack(draw(wire_values)))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["set", "insert", "truncate"]))
        byte = draw(st.integers(0, 255))
        if action == "set" and position < len(data):
            data[position] = byte
        elif action == "insert":
            data.insert(position, byte)
        else:
            del data[position:]
    return bytes(data)


hostile_bytes = st.binary(max_size=200) | damaged_msgpack()


@PROPERTY
@given(wire_values)
def test_pack_unpack_roundtrip(value: Any) -> None:
    assert unpack(pack(value)) == value


@PROPERTY
@given(deep_values())
def test_deep_values_roundtrip(value: Any) -> None:
    assert unpack(pack(value)) == value


@PROPERTY
@given(hostile_bytes)
def test_unpack_raises_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        unpack(data)


@PROPERTY
@given(hostile_bytes, st.integers(1, 64))
def test_unpack_map_with_small_limits_raises_only_decode_error(data: bytes, max_bytes: int) -> None:
    with contextlib.suppress(DecodeError):
        unpack_map(data, max_bytes=max_bytes)


@PROPERTY
@given(st.lists(hostile_bytes, max_size=6), st.integers(1, 300))
def test_frame_decoder_raises_only_decode_error(chunks: list[bytes], max_bytes: int) -> None:
    decoder = FrameDecoder(max_bytes=max_bytes)
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                assert type(frame) is dict
    except DecodeError:
        pass


@PROPERTY
@given(hostile_bytes)
def test_frame_decoder_on_framed_garbage(body: bytes) -> None:
    # A plausible header around a hostile body gets past the length checks.
    decoder = FrameDecoder()
    with contextlib.suppress(DecodeError):
        decoder.feed(struct.pack(">I", len(body)) + body)


@settings(PROPERTY, max_examples=150)  # each example builds and splits a whole stream
@given(st.lists(st.dictionaries(st.text(max_size=8), wire_values, max_size=4), max_size=5), st.data())
def test_frame_decoder_reassembles_any_split(values: list[dict[str, Any]], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(value) for value in values)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    frames: list[dict[str, Any]] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        frames += decoder.feed(stream[start:cut])
        start = cut
    assert frames == values
    assert not decoder.mid_frame
