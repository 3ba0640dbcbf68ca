"""Values a client sends ahead of the request that refers to them (docs/protocol.md, section 8).

A client frame is at most `max_frame_bytes`, but a run's input, a message or an answer may be any
size. The bundled client cuts a request that would pack to more than the content budget the way a
worker does (`wire/content.py`): each large value goes first, in chunks, as `content.upload`
requests, and the request lists the values in its envelope's `refs` (each: its path from the
request's root, starting with `payload`; its sha256, size and encoding). The gateway puts them back before
it parses the request, so the operation, its payload check and its idempotency fingerprint see the
request as if it had come in one frame; no user code is involved.

Bounded: one connection holds at most `Limits.max_upload_bytes` of values not yet used; a request
takes (and forgets) the values it refers to, accepted or refused; a connection's values go when it
closes. Everything
here runs in the gateway's thread.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import DecodeError
from piwf_actors.protocol.envelope import MAX_ID_LEN, BadRequest
from piwf_actors.wire.codec import MAX_DEPTH
from piwf_actors.wire.content import ContentUpload
from piwf_actors.wire.limits import Limits


class ClientUploads:
    """The uploads of every connection of one gateway."""

    def __init__(self, limit: int = Limits().max_upload_bytes) -> None:
        """`limit`: what one connection may hold of values no request has used yet."""
        self._limit = limit
        self._by_connection: dict[int, ContentUpload] = {}

    def add(self, conn_id: int, payload: dict[str, Any], request_id: str | None) -> int:
        """`content.upload {digest, offset, total, data}`: one chunk for this connection; returns how many
        bytes of the value have arrived. BadRequest (one line) if it does not fit."""
        upload = self._by_connection.get(conn_id)
        if upload is None:
            upload = self._by_connection[conn_id] = ContentUpload(self._limit)
        try:
            return upload.add(payload)
        except DecodeError as exc:
            raise BadRequest(f"content.upload: {exc.one_line()}", request_id) from None

    def resolve(self, conn_id: int, frame: dict[str, Any]) -> dict[str, Any]:
        """`frame` with the values its `refs` name put back below its payload, and `refs` gone; the frame
        itself when it has none. BadRequest (one line) when a value is missing, damaged, outside the
        payload, or would nest the request deeper than a frame may."""
        if "refs" not in frame:
            return frame
        raw_id = frame.get("request_id")
        request_id = raw_id if isinstance(raw_id, str) and 0 < len(raw_id) <= MAX_ID_LEN else None
        refs = frame.get("refs")
        if not isinstance(refs, list) or not isinstance(frame.get("payload"), dict):
            raise BadRequest("refs must be a list of content references into a payload map", request_id)
        upload = self._by_connection.get(conn_id) or ContentUpload(self._limit)
        try:
            resolved = upload.resolve(frame, within=("payload",))
        except DecodeError as exc:
            raise BadRequest(f"refs: {exc.one_line()} (send each value with content.upload first, on this "
                             "connection)", request_id) from None
        for item in refs:
            path = item["path"]
            if not _nests_within(_get(resolved, path), MAX_DEPTH - len(path)):
                raise BadRequest(f"refs: the value at {'.'.join(map(str, path))} nests deeper than "
                                 f"{MAX_DEPTH} in the request", request_id)
        return resolved

    def drop(self, conn_id: int) -> None:
        """The connection closed: its values go."""
        self._by_connection.pop(conn_id, None)


def _get(root: Any, path: list[Any]) -> Any:
    for key in path:
        root = root[key]
    return root


def _nests_within(value: Any, room: int) -> bool:
    """Whether `value`'s containers nest at most `room` deep (a scalar takes none)."""
    level: list[Any] = [value]
    while level:
        containers = [item for item in level if isinstance(item, (dict, list))]
        if not containers:
            return True
        room -= 1
        if room < 0:
            return False
        level = [child for item in containers for child in (item.values() if isinstance(item, dict) else item)]
    return True
