"""Stored JSON values: inline when small, in the blob table when large.

A node's output, a run's input and output are written once per node on the
writer's hot path. Most are small (`{"n": 1}`): stored inline in the row as
canonical JSON (`*_json` columns) they cost no hashing, no second insert and
no 64-character key stored twice. A value over INLINE_VALUE_BYTES goes to the
content-addressed blob table (`*_sha256` columns), where it is stored once
and can be read in chunks (`content.read`). At most one of the pair is set.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.store.blobs import get_blob, put_blob
from piwf_actors.store.engines.base import Connection

#: Canonical JSON up to this many characters is kept inline.
INLINE_VALUE_BYTES = 1024


def put_value(conn: Connection, value: Any, now: float) -> tuple[str | None, str | None]:
    """(inline JSON, blob key) of `value`: one of them is None."""
    text = canonical_json(value)
    if len(text) <= INLINE_VALUE_BYTES:
        return text, None
    return None, put_blob(conn, text.encode(), now)


def get_value(conn: Connection, inline: str | None, sha256: str | None) -> Any:
    """The value `put_value` stored as (inline JSON, blob key); None when neither is set."""
    if inline is not None:
        return loads(inline)
    data = get_blob(conn, sha256)
    return None if data is None else loads(data.decode())
