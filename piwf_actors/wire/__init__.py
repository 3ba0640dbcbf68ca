"""Wire messages: strict msgpack codec, length-prefixed frames.

Layers, each usable alone: `codec` (wire values <-> bytes), `frames`
(one map per length-prefixed frame on a stream); `content` (large values
as content references read in chunks). Bad input surfaces only as `DecodeError`
(`FrameTooLarge` for oversize); values that cannot be sent as `EncodeError`.
"""

from piwf_actors.wire.codec import (
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    MAX_FRAME_BYTES,
    pack,
    unpack,
    unpack_map,
    wire_type_name,
)
from piwf_actors.wire.frames import HEADER_BYTES, FrameDecoder, encode_frame, recv_frame, send_frame

__all__ = [
    "HEADER_BYTES",
    "INT_MAX",
    "INT_MIN",
    "MAX_DEPTH",
    "MAX_FRAME_BYTES",
    "FrameDecoder",
    "encode_frame",
    "pack",
    "recv_frame",
    "send_frame",
    "unpack",
    "unpack_map",
    "wire_type_name",
]
