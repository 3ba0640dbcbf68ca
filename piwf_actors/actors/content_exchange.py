"""The host's end of content transfer for one launch (see `wire/content.py`).

Owned by a launch's `LaunchLink` (worker_link.py says which thread uses which side). It

- builds frames for the worker with their large values as references:
  stored values (the launch state's, the workflow source) point at the blob
  table, values cut out of an answer are kept here;
- answers the worker's `content.read` from those two places, and only for
  content this launch was pointed at, in frames that are never cut
  (`whole_frame`: a chunk and its envelope fit the frame budget);
- collects the `content` frames a worker sends ahead of a large request and
  puts their values back into it.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.wire import pack
from piwf_actors.wire.content import CHUNK_BYTES, FRAME_BUDGET, ContentRef, ContentUpload, cut, whole_frame
from piwf_actors.wire.frames import frame_of_body


class ContentExchange:
    def __init__(self, database: DatabaseLocation | None) -> None:
        self._database = database
        self._uploads = ContentUpload()
        self._cut_out: dict[str, bytes] = {}  # values cut out of this launch's own frames
        self._readable: set[str] = set()  # stored values this launch was pointed at
        self._store: StoreReader | None = None  # opened at the first read of a stored value

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        self._uploads.clear()
        self._cut_out.clear()

    # --- host to worker -------------------------------------------------------------------

    def point_at(self, frame: dict[str, Any], stored: list[dict[str, Any]], *prefix: str) -> dict[str, Any]:
        """`frame` with references to stored values ({path, digest, bytes, encoding}, paths below
        `prefix`) added to its `refs`; the worker may read those values from now on."""
        refs = [ContentRef((*prefix, *item["path"]), item["digest"], item["bytes"], item["encoding"])
                for item in stored]
        if not refs:
            return frame
        self._readable.update(ref.digest for ref in refs)
        return {**frame, "refs": [*frame.get("refs", []), *(ref.to_wire() for ref in refs)]}

    def encode(self, frame: dict[str, Any], under: tuple[str, ...]) -> bytes:
        """The bytes of a frame for the worker, with large values below `under` cut out (kept
        here for `content.read`) when the frame would be over the budget."""
        body = pack(frame)
        if len(body) > FRAME_BUDGET:
            frame, contents = cut(frame, len(body), under=under)
            # The receiver puts values back in this order: a value cut out here may hold the place of a
            # stored one (`point_at`), which must go into it afterwards, not into the None it replaced.
            frame["refs"] = [*(ref.to_wire() for ref, _ in contents), *frame.get("refs", [])]
            for ref, data in contents:
                self._cut_out[ref.digest] = data
            body = pack(frame)
        return frame_of_body(body)

    def read(self, message_id: Any, payload: dict[str, Any]) -> bytes:
        """The frame answering `content.read {digest, offset}`: one chunk, or a refusal. Never cut: an
        answer cut down to a reference would leave the worker with no data at all."""
        if not isinstance(message_id, str) or len(message_id) > 200:
            message_id = None  # a broken worker: it gets a refusal it cannot match, and stops
        return whole_frame({"kind": "response", "message_id": message_id, **self._chunk(payload)})

    def _chunk(self, payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict):
            payload = {}
        digest, offset = payload.get("digest"), payload.get("offset", 0)
        if (not isinstance(digest, str) or len(digest) != 64 or isinstance(offset, bool) or not isinstance(offset, int)
                or offset < 0):
            return {"outcome": "rejected", "error": "content.read needs a digest and an offset >= 0"}
        held = self._cut_out.get(digest)
        if held is not None:
            return {"outcome": "accepted", "value": {"digest": digest, "offset": offset, "total_bytes": len(held),
                                                     "data": held[offset:offset + CHUNK_BYTES]}}
        if digest not in self._readable or self._database is None:
            return {"outcome": "rejected", "error": f"content {digest[:12]}… is not part of this launch"}
        if self._store is None:
            self._store = StoreReader(self._database)
        chunk = queries.content_chunk(self._store, digest, offset, CHUNK_BYTES)
        if chunk is None:
            return {"outcome": "notFound", "error": f"content {digest[:12]}… is gone"}
        return {"outcome": "accepted", "value": chunk}

    # --- worker to host -------------------------------------------------------------------

    def receive(self, frame: dict[str, Any]) -> None:
        """A `content` frame ahead of a request (DecodeError if it does not fit)."""
        self._uploads.add(frame)

    def complete(self, frame: dict[str, Any]) -> dict[str, Any]:
        """A request with the values it refers to put back (DecodeError if one is missing, or is not
        below the request's payload)."""
        return self._uploads.resolve(frame, within=("payload",))
