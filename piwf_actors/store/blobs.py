"""Content-addressed blobs: large payloads stored once, keyed by sha256."""

from __future__ import annotations

import hashlib
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.engines.base import Connection


def put_blob(conn: Connection, data: bytes, now: float) -> str:
    """Store `data` (once) and return its sha256 hex key. Inside a write batch, content the batch
    stored already costs no statement (`BatchConnection.blob_stored`)."""
    key = hashlib.sha256(data).hexdigest()
    batch = conn if isinstance(conn, BatchConnection) else None
    if batch is not None and batch.blob_stored(key):
        return key
    conn.execute(
        "INSERT INTO blob (sha256, size, data, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (sha256) DO NOTHING",
        (key, len(data), data, now),
    )
    if batch is not None:
        batch.note_blob(key)
    return key


def put_json_blob(conn: Connection, value: Any, now: float) -> str:
    """Store `value` as canonical JSON (once) and return its key."""
    return put_blob(conn, canonical_json(value).encode(), now)


def get_blob(conn: Connection, key: str | None) -> bytes | None:
    if key is None:
        return None
    row = conn.execute("SELECT data FROM blob WHERE sha256 = ?", (key,)).fetchone()
    return None if row is None else bytes(row[0])
