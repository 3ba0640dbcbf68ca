"""Schema v18 (the HTTP door's tokens): a version 17 database gains `http_token`, keeps its rows, and
the token commands work on it, on both engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_migration_v6 import _structure
from test_store_regressions import Store

from piwf_actors.errors import Conflict, NotFound
from piwf_actors.store import http_queries
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.reader import StoreReader

DIGEST = "ab" * 32


def _use_tokens(location: Any) -> None:
    """The migrated database takes, finds, refuses and revokes tokens as a new one does."""
    db = open_store(location)
    try:
        assert schema_version(db) == LATEST_VERSION >= 18
    finally:
        db.close()
    store = Store(location)
    try:
        args = {"client_id": "c", "idempotency_key": "k1", "payload": {}, "name": "ci", "role": "operator",
                "token_sha256": DIGEST}
        assert store.call("http_token.add", args)["receipt"]["name"] == "ci"
        assert store.call("http_token.add", args)["outcome"] == "adopted"  # the same request again
        with pytest.raises(Conflict):
            store.call("http_token.add", {**args, "idempotency_key": "k2", "token_sha256": "cd" * 32})
        reader = StoreReader(location)
        try:
            assert http_queries.live_token(reader, DIGEST) == {"name": "ci", "role": "operator"}
            store.call("http_token.revoke", {"client_id": "c", "idempotency_key": "k3", "payload": {}, "name": "ci"})
            assert http_queries.live_token(reader, DIGEST) is None
            assert [t["name"] for t in http_queries.tokens(reader)] == ["ci"]
        finally:
            reader.close()
        with pytest.raises(NotFound):
            store.call("http_token.revoke", {"client_id": "c", "idempotency_key": "k4", "payload": {}, "name": "ci"})
    finally:
        store.db.close()


def test_a_version_17_sqlite_database_gains_the_token_table(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        conn.execute("DROP TABLE http_token")
        conn.execute("INSERT INTO blob (sha256, data, size, created_at) VALUES ('x', X'00', 1, 1.0)")
        conn.execute("PRAGMA user_version = 17")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)
    _use_tokens(old)
    assert _structure(old) == _structure(fresh)
    conn = sqlite3.connect(old)
    try:
        assert conn.execute("SELECT sha256 FROM blob").fetchall() == [("x",)]
    finally:
        conn.close()


def test_a_version_17_postgresql_database_gains_the_token_table(pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            conn.execute('DROP TABLE "http_token"')
            pg_schema.write_version(conn, 17)
    finally:
        db.close()
    _use_tokens(pg_database)
