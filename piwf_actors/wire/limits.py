"""The socket's limits (frame size, connections, in-flight requests, deadlines, send queue, uploads):
plain data read by the host's configuration and enforced by `protocol.socket_loop` (and the gateway's
`protocol.uploads`), so the configuration does not import the socket loop."""

from __future__ import annotations

from dataclasses import dataclass

from piwf_actors.wire.codec import MAX_FRAME_BYTES
from piwf_actors.wire.content import MAX_CONTENT_BYTES


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_bytes: int = MAX_FRAME_BYTES
    max_connections: int = 64
    max_inflight: int = 32
    frame_deadline_s: float = 10.0
    max_outbox_bytes: int = 8 * 1024 * 1024
    retry_after_s: float = 1.0
    #: What one connection may hold of values sent with `content.upload` that no request used yet.
    max_upload_bytes: int = MAX_CONTENT_BYTES
