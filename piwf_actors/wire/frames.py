"""Length-prefixed frames of the client protocol v1.

A frame is a 4-byte unsigned big-endian length N, then N bytes of msgpack
holding exactly one map, with 0 < N <= max_bytes (default MAX_FRAME_BYTES).
A bad frame means the byte stream can no longer be trusted, so every reader
here fails for good and the owner closes that one connection.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from piwf_actors.errors import DecodeError, EncodeError, FrameTooLarge
from piwf_actors.wire.codec import MAX_FRAME_BYTES, pack, unpack_map

__all__ = ["HEADER_BYTES", "FrameDecoder", "encode_frame", "frame_of_body", "recv_frame", "send_frame"]

_HEADER = struct.Struct(">I")
HEADER_BYTES = _HEADER.size


def _check_length(length: int, max_bytes: int) -> None:
    if length == 0:
        raise DecodeError("frame of length 0 refused")
    if length > max_bytes:
        raise FrameTooLarge(length, max_bytes)


def frame_of_body(body: bytes, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """Header plus an already packed body (EncodeError if the body is too large)."""
    if len(body) > max_bytes:
        raise EncodeError(f"frame body of {len(body)} bytes exceeds the limit of {max_bytes} bytes")
    return _HEADER.pack(len(body)) + body


def encode_frame(value: dict[str, Any], max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """Header plus msgpack body for one map.

    Raises EncodeError if `value` is not a dict, is not a wire value (see
    `codec.pack`) or packs to more than `max_bytes`.
    """
    if type(value) is not dict:
        raise EncodeError(f"a frame holds a map, not a {type(value).__name__}")
    body = pack(value)
    if len(body) > max_bytes:
        raise EncodeError(f"frame body of {len(body)} bytes exceeds the limit of {max_bytes} bytes")
    return _HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental frame reader for a non-blocking stream.

    Feed it whatever arrived; it returns the maps of the frames completed so
    far and keeps the rest. Not thread-safe: one decoder per connection,
    used by the one actor that owns the connection.
    """

    __slots__ = ("_body_length", "_buffer", "_failed", "max_bytes")

    def __init__(self, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        # Length of the frame being received, known once its header is in.
        self._body_length: int | None = None
        self._failed = False

    @property
    def pending_bytes(self) -> int:
        """Bytes received of the incomplete frame (its header included); 0 between frames."""
        return len(self._buffer) + (0 if self._body_length is None else HEADER_BYTES)

    @property
    def mid_frame(self) -> bool:
        """True while part of a frame (header or body) is buffered.

        The gateway starts its per-frame body deadline when this turns True
        and clears it when it turns False, so a slow peer cannot hold a
        half-sent frame forever.
        """
        return self._body_length is not None or bool(self._buffer)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Add received bytes; return the maps of every frame now complete.

        Raises DecodeError for a zero length, a malformed body or a body that
        is not a map, and FrameTooLarge as soon as a header announces more
        than `max_bytes` (before any of that body is waited for). After an
        error the decoder is spent: every later call raises DecodeError, and
        frames completed earlier in the failing call are dropped with it.
        """
        if self._failed:
            raise DecodeError("frame stream already failed")
        self._buffer += data
        try:
            return self._drain()
        except DecodeError:
            self._failed = True
            self._buffer = bytearray()
            self._body_length = None
            raise

    def _drain(self) -> list[dict[str, Any]]:
        buffer = self._buffer
        frames: list[dict[str, Any]] = []
        offset = 0
        # Walk an offset through the buffer and trim once at the end, so a
        # chunk holding many small frames is not copied once per frame.
        try:
            while True:
                if self._body_length is None:
                    if len(buffer) - offset < HEADER_BYTES:
                        break
                    (length,) = _HEADER.unpack_from(buffer, offset)
                    _check_length(length, self.max_bytes)
                    self._body_length = length
                    offset += HEADER_BYTES
                length = self._body_length
                if len(buffer) - offset < length:
                    break
                body = buffer[offset : offset + length]  # one copy, no view pinning the buffer
                offset += length
                self._body_length = None
                frames.append(unpack_map(body, max_bytes=self.max_bytes))
        finally:
            del buffer[:offset]
        return frames


def send_frame(sock: socket.socket, value: dict[str, Any], max_bytes: int = MAX_FRAME_BYTES) -> None:
    """Encode `value` and send the whole frame (blocking `sendall`).

    Raises EncodeError before anything is sent; OSError from the socket
    (including socket.timeout) propagates.
    """
    sock.sendall(encode_frame(value, max_bytes))


def _recv_exactly(sock: socket.socket, size: int, what: str) -> bytearray | None:
    """Read `size` bytes; None if EOF arrives before the first byte."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        count = sock.recv_into(view[received:])
        if count == 0:
            if received == 0:
                return None
            raise DecodeError(f"connection closed after {received} of {size} bytes of a frame {what}")
        received += count
    return buffer


def recv_frame(sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> dict[str, Any] | None:
    """Read one frame from a connected blocking socket; return its map.

    Returns None on a clean EOF between frames. Raises DecodeError on EOF
    inside a frame or a bad frame (FrameTooLarge from the header, before the
    body is read). socket.timeout propagates: if it fires before the first
    byte of the frame nothing was consumed and the call may be retried,
    otherwise the stream is mid-frame and the socket must be closed.
    """
    header = _recv_exactly(sock, HEADER_BYTES, "header")
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    _check_length(length, max_bytes)
    body = _recv_exactly(sock, length, "body")
    if body is None:
        raise DecodeError(f"connection closed after a frame header announcing {length} bytes")
    return unpack_map(body, max_bytes=max_bytes)
