"""Content references: cutting large values out of a frame and putting them back; every frame that
carries content fits the frame budget."""

from __future__ import annotations

import pytest

from piwf_actors.errors import DecodeError
from piwf_actors.protocol.envelope import MAX_ID_LEN, SCHEMA, response
from piwf_actors.wire import HEADER_BYTES, pack, unpack
from piwf_actors.wire.content import (
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
    whole_frame,
)


def _roundtrip(frame: dict) -> tuple[int, dict]:
    """(packed size of the cut frame, the frame as the receiver rebuilds it from the bytes sent)."""
    smaller, contents = cut(frame, len(pack(frame)), under=("payload",))
    upload = ContentUpload()
    for chunk in content_frames(contents):
        upload.add(unpack(pack(chunk), max_bytes=2 * CHUNK_BYTES))
    sent = unpack(pack(dict(smaller, refs=[ref.to_wire() for ref, _ in contents])))
    return len(pack(smaller)), upload.resolve(sent, within=("payload",))


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


# --- every frame that carries content fits the budget --------------------------------------------

LONGEST_ID = "i" * MAX_ID_LEN


def test_a_full_chunk_and_its_envelope_fit_the_frame_budget_in_every_direction() -> None:
    """A chunk is the frame budget less room for its envelope, so none of these frames is ever cut."""
    data = bytes(range(256)) * (3 * CHUNK_BYTES // 256)
    ref = ContentRef(("payload", "v"), digest_of(data), len(data), "raw")
    [first, *_rest] = chunks(ref, data)
    assert len(first["data"]) == CHUNK_BYTES
    # Worker to host: a `content` frame.
    assert len(whole_frame(first)) <= HEADER_BYTES + FRAME_BUDGET
    # Client to host: a `content.upload` request with the longest ids a client may use.
    upload = {"schema": SCHEMA, "type": "request", "request_id": LONGEST_ID, "client_id": LONGEST_ID,
              "idempotency_key": LONGEST_ID, "operation": "content.upload",
              "payload": {"digest": first["digest"], "offset": 2**40, "total": 2**40, "data": first["data"]}}
    assert len(pack(upload)) <= FRAME_BUDGET
    # Host to client: a `content.read` answer.
    answer = response(LONGEST_ID, "accepted", receipt={"digest": ref.digest, "offset": 2**40,
                                                        "total_bytes": 2**40, "data": first["data"]})
    assert len(pack(answer)) <= FRAME_BUDGET


def test_a_cut_frame_fits_the_budget_however_many_parts_its_payload_has() -> None:
    """Forty parts of 60 KiB are each under the inline size, but together over the budget: the payload
    then goes whole as one piece of content."""
    payload = {f"k{i}": "p" * (60 * 1024) for i in range(40)}
    frame = {"kind": "request", "message_id": "m1", "payload": payload}
    size, back = _roundtrip(frame)
    assert size <= FRAME_BUDGET
    assert back == frame
    listed = {f"item{i}": ["w" * 60_000] for i in range(40)}
    size, back = _roundtrip({"kind": "request", "payload": {"listed": listed, "n": 1}})
    assert size <= FRAME_BUDGET and back["payload"]["listed"] == listed


def test_content_is_put_back_only_within_the_given_part_of_a_frame() -> None:
    data, encoding = encode({"v": "v" * 100})
    upload = ContentUpload()
    outside = ContentRef(("operation",), digest_of(data), len(data), encoding)
    for chunk in chunks(outside, data):
        upload.add(chunk)
    with pytest.raises(DecodeError, match="outside payload"):
        upload.resolve({"operation": "x", "payload": {}, "refs": [outside.to_wire()]}, within=("payload",))
    assert upload.held == 0
    # The payload itself may come whole (`cut` sends it so when it has too many small parts). The refused
    # request took the value: it is sent again.
    whole = ContentRef(("payload",), digest_of(data), len(data), encoding)
    for chunk in chunks(whole, data):
        upload.add(chunk)
    frame = upload.resolve({"operation": "x", "payload": None, "refs": [whole.to_wire()]}, within=("payload",))
    assert frame == {"operation": "x", "payload": {"v": "v" * 100}}


def test_upload_refuses_a_value_declared_larger_than_its_limit_at_the_first_chunk() -> None:
    upload = ContentUpload(limit=4096)
    with pytest.raises(DecodeError, match="beyond the limit of 4096"):
        upload.add({"digest": "0" * 64, "offset": 0, "total": 5000, "data": b"x"})
    assert upload.held == 0


def test_references_to_one_place_or_to_a_place_inside_another_are_refused() -> None:
    """`cut` never names a place twice nor one inside another; put back in order, such references would
    fill a place that a later one replaces (or that does not exist yet)."""
    data, encoding = encode("v")
    upload = ContentUpload()
    for frame_refs in ([("payload", "a"), ("payload", "a")], [("payload", "a", "b"), ("payload", "a")]):
        for chunk in chunks(ContentRef(("payload",), digest_of(data), len(data), encoding), data):
            upload.add(chunk)
        refs = [ContentRef(path, digest_of(data), len(data), encoding).to_wire() for path in frame_refs]
        with pytest.raises(DecodeError, match="two content references to|inside it"):
            upload.resolve({"payload": {"a": {"b": 1}}, "refs": refs}, within=("payload",))
        assert upload.held == 0


def test_json_content_nested_too_deep_to_read_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="nested too deep"):
        decode(b"[" * 100_000 + b"]" * 100_000, "json")
