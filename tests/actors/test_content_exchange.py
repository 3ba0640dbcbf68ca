"""The host's end of content transfer for one launch (`actors/content_exchange.py`), without a worker.

The values the host cuts out of its own frames come back through `content.read`, a chunk at a time,
and the frame of such an answer is never cut itself.
"""

from __future__ import annotations

from piwf_actors.actors.content_exchange import ContentExchange
from piwf_actors.wire import HEADER_BYTES, unpack
from piwf_actors.wire.content import CHUNK_BYTES, FRAME_BUDGET, ContentRef, decode


def test_the_host_answers_a_workers_content_read_with_a_full_chunk_never_cut() -> None:
    """The defect this guards: a 1 MiB chunk plus its envelope was over the budget, so the answer was
    cut, its data sent as a reference, and the worker got no data at all."""
    exchange = ContentExchange(None)
    value = "é" * (3 * CHUNK_BYTES)
    sent = exchange.encode({"kind": "response", "message_id": "m1", "value": {"big": value}}, ("value",))
    assert len(sent) <= HEADER_BYTES + FRAME_BUDGET
    [ref] = [ContentRef.from_wire(item) for item in unpack(sent[HEADER_BYTES:])["refs"]]
    data = b""
    while len(data) < ref.size:
        frame = exchange.read("m2", {"digest": ref.digest, "offset": len(data)})
        assert len(frame) <= HEADER_BYTES + FRAME_BUDGET
        answer = unpack(frame[HEADER_BYTES:])
        assert answer["outcome"] == "accepted" and "refs" not in answer
        chunk = answer["value"]["data"]
        assert len(chunk) == min(CHUNK_BYTES, ref.size - len(data))
        data += chunk
    assert decode(data, ref.encoding) == value
    refused = unpack(exchange.read("m3", {"digest": "0" * 64})[HEADER_BYTES:])
    assert refused["outcome"] == "rejected" and "not part of this launch" in refused["error"]
