"""Content references: cutting large values out of a frame and putting them back."""

from __future__ import annotations

import pytest

from piwf_actors.errors import DecodeError
from piwf_actors.messages import pack, unpack
from piwf_actors.messages.content import (
    CHUNK_BYTES,
    FRAME_BUDGET,
    INLINE_BYTES,
    ContentRef,
    ContentUpload,
    chunks,
    content_frames,
    cut,
    decode,
    digest_of,
    encode,
)


def _roundtrip(frame: dict) -> tuple[int, dict]:
    """(packed size of the cut frame, the frame as the receiver rebuilds it from the bytes sent)."""
    smaller, contents = cut(frame, len(pack(frame)), under=("payload",))
    upload = ContentUpload()
    for chunk in content_frames(contents):
        upload.add(unpack(pack(chunk), max_bytes=2 * CHUNK_BYTES))
    sent = unpack(pack(dict(smaller, refs=[ref.to_wire() for ref, _ in contents])))
    return len(pack(smaller)), upload.resolve(sent)


def test_a_frame_within_the_budget_is_not_cut() -> None:
    frame = {"kind": "request", "payload": {"x": "y" * (FRAME_BUDGET // 2)}}
    assert cut(frame, len(pack(frame)), under=("payload",)) == (frame, [])


@pytest.mark.parametrize("payload", [
    {"text": "é" * 1_000_000, "n": 1},
    {"blob": b"\x00\xff" * 700_000},
    {"many": {str(i): "v" * 1000 for i in range(3000)}, "keep": [1, 2, 3]},
    {"nested": {"deep": {"list": ["w" * 70_000] * 30}}},
])
def test_cut_values_come_back_exactly_and_the_cut_frame_is_small(payload: dict) -> None:
    frame = {"kind": "request", "message_id": "m1", "payload": payload}
    size, back = _roundtrip(frame)
    assert back == frame
    assert size <= len(payload) * INLINE_BYTES + 1024
    assert frame["payload"] is payload  # the original was not changed


def test_upload_refuses_chunks_out_of_order_and_damaged_content() -> None:
    data, encoding = encode("q" * (CHUNK_BYTES + 10))
    ref = ContentRef(("payload", "v"), digest_of(data), len(data), encoding)
    first, second = chunks(ref, data)
    upload = ContentUpload()
    with pytest.raises(DecodeError):
        upload.add(second)
    upload.add(first)
    frame = {"kind": "request", "payload": {"v": None}, "refs": [ref.to_wire()]}
    with pytest.raises(DecodeError, match="missing or incomplete"):
        upload.resolve(dict(frame))
    bad = ContentRef(ref.path, "0" * 64, ref.size, encoding)
    upload = ContentUpload()
    for chunk in chunks(bad, data):
        upload.add(chunk)
    with pytest.raises(DecodeError):
        upload.resolve({"kind": "request", "payload": {"v": None}, "refs": [bad.to_wire()]})


def test_upload_has_a_limit() -> None:
    data, encoding = encode(b"z" * 5000)
    ref = ContentRef(("payload", "v"), digest_of(data), len(data), encoding)
    upload = ContentUpload(limit=4096)
    with pytest.raises(DecodeError, match="limit"):
        for chunk in chunks(ref, data):
            upload.add(chunk)


def test_references_are_checked() -> None:
    with pytest.raises(DecodeError):
        ContentRef.from_wire({"path": ["a"], "digest": "short", "bytes": 1, "encoding": "msgpack"})
    with pytest.raises(DecodeError):
        ContentRef.from_wire({"path": [True], "digest": "0" * 64, "bytes": 1, "encoding": "msgpack"})
    with pytest.raises(DecodeError):
        decode(b"not json", "json")
