"""frames: encode_frame, the incremental FrameDecoder and blocking socket helpers."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from piwf_actors.errors import DecodeError, EncodeError, FrameTooLarge
from piwf_actors.wire import (
    HEADER_BYTES,
    MAX_FRAME_BYTES,
    FrameDecoder,
    encode_frame,
    pack,
    recv_frame,
    send_frame,
)

HELLO = {"schema": "piwf.client.v1", "type": "hello", "connection_id": "c1", "version": "0.1", "host_epoch": 3}


def header(length: int) -> bytes:
    return struct.pack(">I", length)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    # A wrong implementation must fail the test, not hang it.
    left.settimeout(5)
    right.settimeout(5)
    try:
        yield left, right
    finally:
        left.close()
        right.close()


# --- encode_frame -------------------------------------------------------------


def test_encode_frame_layout() -> None:
    frame = encode_frame({"a": 1})
    body = pack({"a": 1})
    assert frame == header(len(body)) + body


def test_encode_frame_size_boundary() -> None:
    value = {"k": b"x" * 95}  # packs to exactly 100 bytes
    assert len(encode_frame(value, max_bytes=100)) == HEADER_BYTES + 100
    with pytest.raises(EncodeError, match="exceeds the limit of 99"):
        encode_frame(value, max_bytes=99)


def test_encode_frame_default_limit() -> None:
    assert len(encode_frame({"k": b"x" * (MAX_FRAME_BYTES - 8)})) == HEADER_BYTES + MAX_FRAME_BYTES
    with pytest.raises(EncodeError):
        encode_frame({"k": b"x" * (MAX_FRAME_BYTES - 7)})


@pytest.mark.parametrize("value", [[1], "x", None, 3])
def test_encode_frame_needs_a_map(value: Any) -> None:
    with pytest.raises(EncodeError, match="holds a map"):
        encode_frame(value)


def test_encode_frame_passes_on_pack_errors() -> None:
    with pytest.raises(EncodeError, match="unsupported type"):
        encode_frame({"a": object()})


# --- FrameDecoder ---------------------------------------------------------------


def test_decoder_byte_by_byte() -> None:
    stream = encode_frame(HELLO) + encode_frame({"b": [1, 2]})
    decoder = FrameDecoder()
    frames: list[dict[str, Any]] = []
    states = []
    for index in range(len(stream)):
        frames += decoder.feed(stream[index : index + 1])
        states.append(decoder.mid_frame)
    assert frames == [HELLO, {"b": [1, 2]}]
    assert decoder.pending_bytes == 0
    assert not decoder.mid_frame
    assert states[0] is True  # one header byte in: the deadline should start
    assert states[-1] is False


def test_decoder_several_frames_in_one_feed() -> None:
    values = [{"n": n, "pad": "x" * n} for n in range(50)]
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(encode_frame(value) for value in values)) == values
    assert decoder.pending_bytes == 0


def test_decoder_keeps_the_partial_tail() -> None:
    first, second = encode_frame({"a": 1}), encode_frame({"b": 2})
    decoder = FrameDecoder()
    assert decoder.feed(first + second[:3]) == [{"a": 1}]
    assert decoder.pending_bytes == 3
    assert decoder.mid_frame
    assert decoder.feed(second[3:]) == [{"b": 2}]
    assert not decoder.mid_frame


def test_decoder_empty_feed() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert not decoder.mid_frame


def test_decoder_size_boundary() -> None:
    decoder = FrameDecoder(max_bytes=100)
    assert decoder.feed(encode_frame({"k": b"x" * 95})) == [{"k": b"x" * 95}]
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_bytes=99).feed(encode_frame({"k": b"x" * 95}))


def test_decoder_refuses_oversize_from_the_header_alone() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge) as caught:
        decoder.feed(header(MAX_FRAME_BYTES + 1))
    assert caught.value.size == MAX_FRAME_BYTES + 1
    assert caught.value.limit == MAX_FRAME_BYTES
    assert decoder.pending_bytes == 0


def test_decoder_accepts_a_header_at_the_limit_and_waits() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(header(MAX_FRAME_BYTES)) == []
    assert decoder.mid_frame
    assert decoder.pending_bytes == HEADER_BYTES
    assert decoder.feed(b"\xc0" * 10) == []
    assert decoder.pending_bytes == HEADER_BYTES + 10


def test_decoder_refuses_zero_length() -> None:
    with pytest.raises(DecodeError, match="length 0"):
        FrameDecoder().feed(header(0))


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(pack([1, 2]), id="array"),
        pytest.param(pack("text"), id="str"),
        pytest.param(b"\xc1", id="reserved"),
        pytest.param(pack({"a": 1}) + b"\x00", id="trailing"),
        pytest.param(b"\x82\xa1a\x01", id="truncated-map"),
        pytest.param(b"\x81\xa1k\xd4\x05\x00", id="ext"),
    ],
)
def test_decoder_refuses_bad_bodies(body: bytes) -> None:
    with pytest.raises(DecodeError):
        FrameDecoder().feed(header(len(body)) + body)


def test_decoder_is_spent_after_an_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(DecodeError):
        decoder.feed(header(0))
    with pytest.raises(DecodeError, match="already failed"):
        decoder.feed(encode_frame({"a": 1}))
    assert decoder.pending_bytes == 0


# --- send_frame / recv_frame ---------------------------------------------------------


def test_send_and_recv_over_a_socketpair(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    send_frame(left, HELLO)
    send_frame(left, {"b": b"\x00" * 100_000})
    assert recv_frame(right) == HELLO
    assert recv_frame(right) == {"b": b"\x00" * 100_000}


def test_recv_large_frame_from_a_writer_thread(pair: tuple[socket.socket, socket.socket]) -> None:
    # Bigger than the socket buffers: recv_frame must loop over partial reads.
    left, right = pair
    value = {"blob": b"y" * (MAX_FRAME_BYTES - 100)}
    writer = threading.Thread(target=send_frame, args=(left, value))
    writer.start()
    try:
        assert recv_frame(right) == value
    finally:
        writer.join(timeout=10)


def test_recv_clean_eof_between_frames(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    send_frame(left, {"a": 1})
    left.shutdown(socket.SHUT_WR)
    assert recv_frame(right) == {"a": 1}
    assert recv_frame(right) is None


@pytest.mark.parametrize("cut", [1, 3, HEADER_BYTES, HEADER_BYTES + 2])
def test_recv_eof_mid_frame(pair: tuple[socket.socket, socket.socket], cut: int) -> None:
    left, right = pair
    left.sendall(encode_frame({"abc": "defgh"})[:cut])
    left.shutdown(socket.SHUT_WR)
    with pytest.raises(DecodeError, match="connection closed"):
        recv_frame(right)


def test_recv_refuses_oversize_before_reading_the_body(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    left.sendall(header(101))  # and no body; the peer stays connected
    with pytest.raises(FrameTooLarge):
        recv_frame(right, max_bytes=100)


def test_recv_refuses_zero_length_and_bad_bodies(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    left.sendall(header(0))
    with pytest.raises(DecodeError, match="length 0"):
        recv_frame(right)
    body = pack([1])
    left.sendall(header(len(body)) + body)
    with pytest.raises(DecodeError, match="expected a map"):
        recv_frame(right)


def test_recv_honours_the_socket_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    right.settimeout(0.05)
    with pytest.raises(socket.timeout):
        recv_frame(right)
    # Nothing was consumed, so the connection is still usable.
    right.settimeout(5)
    send_frame(left, {"a": 1})
    assert recv_frame(right) == {"a": 1}


def test_send_frame_refuses_before_sending(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    with pytest.raises(EncodeError):
        send_frame(left, {"k": b"x" * 200}, max_bytes=100)
    right.setblocking(False)
    with pytest.raises(BlockingIOError):
        right.recv(1)
