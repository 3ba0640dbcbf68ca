"""Large values out of band, so no frame depends on the size of a run's state.

A frame whose body would pack to more than `FRAME_BUDGET` bytes is sent with
its large parts cut out: each part over `INLINE_BYTES` is replaced by None
and described by a content reference listed in the frame's `refs` (its path
from the frame's root, its sha256, size and encoding). The references are
out of band on purpose: a user's value that happens to look like a
reference is never mistaken for one. The receiver gets the content in
chunks of at most `CHUNK_BYTES`, checks the digest, decodes it and puts it
back at its path:

- worker to host, the worker sends `content` frames (digest, offset, total,
  data) ahead of the request that refers to them (`ContentUpload` collects
  them on the supervisor's side);
- host to worker, the worker pulls each reference with the `content.read`
  operation, answered by its supervisor from the blob table or from values
  it cut out of an answer itself;
- client to host, the bundled client sends `content.upload` requests ahead
  of the request that refers to them (`protocol/uploads.py` collects them
  per connection); host to client, `content.read` returns a stored value in
  chunks.

Every size here derives from `FRAME_BUDGET`: a chunk is the budget less
`ENVELOPE_ROOM`, so a frame that carries a chunk (a `content` frame, a
`content.read` answer, a `content.upload` request) always fits and is never
cut itself (`whole_frame`); a cut frame fits the budget too (`cut`).

Encodings: `json` (a stored blob: canonical JSON), `raw` (bytes, e.g. a
workflow's source) and `msgpack` (a value cut out of a frame).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import DecodeError
from piwf_actors.wire.codec import pack, unpack
from piwf_actors.wire.frames import frame_of_body

#: A value packing to more than this travels as content when its frame is cut.
INLINE_BYTES = 64 * 1024
#: Frames whose body packs to more than this are cut: between host and worker, and a bundled client's
#: requests (the host's `max_frame_bytes`, 4 MiB by default, leaves room above it).
FRAME_BUDGET = 1024 * 1024
#: What a frame carrying a chunk holds besides the chunk: its envelope (kind, digest, offsets, a message
#: id; a client's request and idempotency ids of at most 200 characters each) packs to well under 2 KiB.
#: The rest is margin.
ENVELOPE_ROOM = 16 * 1024
#: One chunk of content on the wire, in every direction: with its envelope it fits `FRAME_BUDGET`.
CHUNK_BYTES = FRAME_BUDGET - ENVELOPE_ROOM
#: The largest single value that may travel as content.
MAX_CONTENT_BYTES = 256 * 1024 * 1024

ENCODINGS = ("json", "raw", "msgpack")

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class ContentRef:
    """Where a cut-out value belongs (`path` from the frame's root) and how to get it back."""

    path: Path
    digest: str
    size: int
    encoding: str

    def to_wire(self) -> dict[str, Any]:
        return {"path": list(self.path), "digest": self.digest, "bytes": self.size, "encoding": self.encoding}

    def under(self, *prefix: str | int) -> ContentRef:
        return ContentRef((*prefix, *self.path), self.digest, self.size, self.encoding)

    @classmethod
    def from_wire(cls, data: Any) -> ContentRef:
        try:
            path, digest, size, encoding = data["path"], data["digest"], data["bytes"], data["encoding"]
        except (TypeError, KeyError):
            raise DecodeError("a content reference needs path, digest, bytes and encoding") from None
        if (not isinstance(path, list) or not all(isinstance(p, (str, int)) and not isinstance(p, bool)
                                                  for p in path)
                or not isinstance(digest, str) or len(digest) != 64
                or isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_CONTENT_BYTES
                or encoding not in ENCODINGS):
            raise DecodeError("malformed content reference")
        return cls(tuple(path), digest, size, encoding)


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode(value: Any) -> tuple[bytes, str]:
    """The bytes a value travels as: bytes stay raw, anything else is msgpack."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), "raw"
    return pack(value), "msgpack"


def decode(data: bytes, encoding: str) -> Any:
    """The value back from its content bytes (DecodeError if they do not decode)."""
    if encoding == "raw":
        return bytes(data)
    if encoding == "json":
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"content is not JSON: {exc}") from None
        except RecursionError:  # the reader recurses per level: a peer's deep nesting must not escape
            raise DecodeError("content is JSON nested too deep to read") from None
    if encoding == "msgpack":
        return unpack(data, max_bytes=MAX_CONTENT_BYTES)
    raise DecodeError(f"unknown content encoding {encoding!r}")


def whole_frame(frame: dict[str, Any]) -> bytes:
    """The bytes of a frame that carries a chunk, which is never cut: a chunk of at most `CHUNK_BYTES`
    and its envelope fit `FRAME_BUDGET`. EncodeError if this one does not (a bug, not a large value)."""
    return frame_of_body(pack(frame), FRAME_BUDGET)


def cut(root: dict[str, Any], body_size: int, *, under: Path = (), budget: int = FRAME_BUDGET,
        inline: int = INLINE_BYTES) -> tuple[dict[str, Any], list[tuple[ContentRef, bytes]]]:
    """`root` with its large parts replaced by None, and the content cut out.

    `body_size` is what `root` packs to (the caller packed it already); under
    the budget nothing is cut. Only values below the path `under` are cut
    (the envelope around them stays). Each cut value packs to more than
    `inline` bytes; a container is cut whole when its parts, cut, still
    exceed `inline`; and when the value at `under` has so many parts that,
    each cut, they still exceed the budget, it is cut whole. So the cut
    frame packs to at most `budget` plus the envelope around `under`, and
    its references (a few hundred bytes each, one per part over `inline`).
    Runs only on the slow path: it packs sub-values again.
    """
    if body_size <= budget:
        return root, []
    out: list[tuple[ContentRef, bytes]] = []
    new_root = _copy_path(root, under)
    target = _get(new_root, under)
    if isinstance(target, dict):
        _set(new_root, under, {k: _shrink(v, (*under, k), inline, out) for k, v in target.items()})
    elif isinstance(target, list):
        _set(new_root, under, [_shrink(v, (*under, i), inline, out) for i, v in enumerate(target)])
    else:
        _set(new_root, under, _shrink(target, under, inline, out))
    if under and isinstance(target, (dict, list)) and len(pack(_get(new_root, under))) > budget - ENVELOPE_ROOM:
        out.clear()  # many parts, each small enough: the value at `under` goes as one piece of content
        _cut_out(target, under, out)
        _set(new_root, under, None)
    return new_root, out


def _shrink(value: Any, path: Path, inline: int, out: list[tuple[ContentRef, bytes]]) -> Any:
    if isinstance(value, (bytes, bytearray, str)):
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) and len(value) * 4 > inline \
            else len(value)
        return value if size <= inline else _cut_out(value, path, out)
    if not isinstance(value, (dict, list)) or len(pack(value)) <= inline:
        return value
    mark = len(out)
    if isinstance(value, dict):
        smaller: Any = {k: _shrink(v, (*path, k), inline, out) for k, v in value.items()}
    else:
        smaller = [_shrink(v, (*path, i), inline, out) for i, v in enumerate(value)]
    if len(pack(smaller)) <= inline:
        return smaller
    del out[mark:]  # the whole container goes as one piece of content
    return _cut_out(value, path, out)


def _cut_out(value: Any, path: Path, out: list[tuple[ContentRef, bytes]]) -> None:
    data, encoding = encode(value)
    out.append((ContentRef(path, digest_of(data), len(data), encoding), data))
    return None


def _copy_path(root: dict[str, Any], path: Path) -> dict[str, Any]:
    """A copy of `root` in which the containers along `path` are copies (the rest is shared)."""
    new_root = dict(root)
    node: Any = new_root
    for key in path[:-1]:
        child = node[key]
        node[key] = dict(child) if isinstance(child, dict) else list(child)
        node = node[key]
    return new_root


def _get(root: Any, path: Path) -> Any:
    for key in path:
        root = root[key]
    return root


def _set(root: Any, path: Path, value: Any) -> None:
    if not path:
        raise ValueError("cannot replace the root")
    for key in path[:-1]:
        root = root[key]
    root[path[-1]] = value


def put_back(root: dict[str, Any], ref: ContentRef, value: Any) -> None:
    """Put a received value at its reference's path (DecodeError if the path does not exist)."""
    try:
        _set(root, ref.path, value)
    except (KeyError, IndexError, TypeError, ValueError):
        raise DecodeError(f"content reference to a missing place {ref.path!r}") from None


def content_frames(contents: list[tuple[ContentRef, bytes]]) -> list[dict[str, Any]]:
    """The `content` frames for cut-out values, each distinct value once."""
    frames: list[dict[str, Any]] = []
    sent: set[str] = set()
    for ref, data in contents:
        if ref.digest not in sent:
            sent.add(ref.digest)
            frames.extend(chunks(ref, data))
    return frames


def chunks(ref: ContentRef, data: bytes) -> list[dict[str, Any]]:
    """The `content` frames carrying `data` (at least one, even when empty); send each as a `whole_frame`."""
    frames = []
    for offset in range(0, max(len(data), 1), CHUNK_BYTES):
        frames.append({"kind": "content", "digest": ref.digest, "offset": offset, "total": len(data),
                       "data": data[offset:offset + CHUNK_BYTES]})
    return frames


class ContentUpload:
    """Content frames received ahead of the request that refers to them (the supervisor's side).

    Each digest's chunks must arrive in order; `limit` bounds what one
    launch may hold at once. Values are taken (and forgotten) when the
    request that refers to them is resolved.
    """

    def __init__(self, limit: int = MAX_CONTENT_BYTES) -> None:
        self._limit = limit
        self._held = 0
        self._parts: dict[str, tuple[int, bytearray]] = {}

    @property
    def held(self) -> int:
        """Bytes received and not yet taken by a request."""
        return self._held

    def add(self, frame: dict[str, Any]) -> int:
        """Take one chunk; returns how much of its value has arrived (DecodeError if it does not fit)."""
        digest, offset, total, data = frame.get("digest"), frame.get("offset"), frame.get("total"), frame.get("data")
        if (not isinstance(digest, str) or len(digest) != 64 or not isinstance(data, bytes)
                or isinstance(offset, bool) or not isinstance(offset, int)
                or isinstance(total, bool) or not isinstance(total, int) or total < 0):
            raise DecodeError("malformed content frame")
        if total > min(self._limit, MAX_CONTENT_BYTES):
            raise DecodeError(f"content of {total} bytes is beyond the limit of {min(self._limit, MAX_CONTENT_BYTES)} "
                              "bytes")
        declared, buffer = self._parts.get(digest, (total, bytearray()))
        if offset == 0 and buffer:
            buffer = bytearray()  # a resend starts the value again
            self._held -= len(self._parts[digest][1])
            declared = total
        if total != declared or offset != len(buffer) or offset + len(data) > total:
            raise DecodeError(f"content {digest[:12]}…: chunk at {offset} does not follow {len(buffer)} of {total}")
        if self._held + len(data) > self._limit:
            raise DecodeError(f"content beyond the limit of {self._limit} bytes held at once")
        buffer += data
        self._held += len(data)
        self._parts[digest] = (total, buffer)
        return len(buffer)

    def resolve(self, frame: dict[str, Any], within: Path = ()) -> dict[str, Any]:
        """Put every referenced value of `frame` back in place; DecodeError if one is missing or wrong,
        or if a reference points outside `within` (a path prefix: the payload, which `cut` may also
        replace whole)."""
        refs = [ContentRef.from_wire(item) for item in frame.get("refs") or []]
        try:  # accepted or refused, the request takes the values it names
            for ref in refs:
                if ref.path[:len(within)] != within:
                    raise DecodeError(f"content reference to {list(ref.path)!r} is outside "
                                      f"{'.'.join(map(str, within)) or 'the frame'}")
            _refuse_nested_places(refs)
            for ref in refs:  # equal values share one digest: each is decoded once per place
                total, buffer = self._parts.get(ref.digest, (None, bytearray()))
                data = bytes(buffer)
                if total is None or len(data) != ref.size or digest_of(data) != ref.digest:
                    raise DecodeError(f"content {ref.digest[:12]}… for {ref.path!r} is missing or incomplete")
                put_back(frame, ref, decode(data, ref.encoding))
        finally:
            for ref in refs:
                _total, buffer = self._parts.pop(ref.digest, (None, bytearray()))
                self._held -= len(buffer)
        frame.pop("refs", None)
        return frame

    def clear(self) -> None:
        self._parts.clear()
        self._held = 0


def _refuse_nested_places(refs: list[ContentRef]) -> None:
    """`cut` names distinct places, none inside another; a value put into a place that a later one
    replaces (or under a place filled later) would depend on the order of the references."""
    places: set[Path] = set()
    for ref in refs:
        if ref.path in places:
            raise DecodeError(f"two content references to {list(ref.path)!r}")
        places.add(ref.path)
    for path in places:
        for end in range(1, len(path)):
            if path[:end] in places:
                raise DecodeError(f"content references to {list(path[:end])!r} and to {list(path)!r} inside it")
