"""Schema v19 (the web console's sessions): a version 18 database gains `http_session`, keeps its rows
(tokens included), and the session commands work on it, on both engines: a session opens for a live
token only, is found while it and its token live, and ends on sign-out or on the token's revoke."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_migration_v6 import _structure
from test_store_regressions import Store

from piwf_actors.errors import Rejected
from piwf_actors.store import http_queries
from piwf_actors.store.commands.http_sessions import SESSION_LIFETIME_S
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.reader import StoreReader

#: The version this migration reaches (the lead may renumber it at a merge: change it here only).
VERSION = 19
TOKEN, OTHER = "ab" * 32, "cd" * 32
SESSION, SECOND = "01" * 32, "02" * 32


def _call(store: Store, operation: str, key: str, **payload: Any) -> Any:
    return store.call(operation, {"client_id": "c", "idempotency_key": key, "payload": {}, **payload})


def _use_sessions(location: Any) -> None:
    """The migrated database kept its token and opens, finds and ends sessions as a new one does."""
    db = open_store(location)
    try:
        assert schema_version(db) == LATEST_VERSION >= VERSION
    finally:
        db.close()
    store = Store(location)
    reader = StoreReader(location)
    try:
        assert http_queries.live_token(reader, TOKEN) == {"name": "ci", "role": "operator"}  # kept by the migration
        with pytest.raises(Rejected):
            _call(store, "http_session.open", "s0", session_sha256=SESSION, token_sha256=OTHER)  # no such token
        opened = _call(store, "http_session.open", "s1", session_sha256=SESSION, token_sha256=TOKEN)
        assert opened["receipt"]["name"] == "ci" and opened["receipt"]["role"] == "operator"
        assert _call(store, "http_session.open", "s1", session_sha256=SESSION, token_sha256=TOKEN
                     )["outcome"] == "adopted"  # the same sign-in again
        _call(store, "http_session.open", "s2", session_sha256=SECOND, token_sha256=TOKEN)
        expires = opened["receipt"]["expires_at"]
        found = http_queries.live_session(reader, SESSION, expires - 1)
        assert found == {"name": "ci", "role": "operator", "token_sha256": TOKEN}
        assert http_queries.live_session(reader, SESSION, expires) is None  # its absolute end
        assert expires - SESSION_LIFETIME_S <= http_queries.sessions(reader)[0]["created_at"]
        assert _call(store, "http_session.close", "c1", session_sha256=SESSION)["receipt"] == {"closed": True}
        assert http_queries.live_session(reader, SESSION, expires - 1) is None
        assert _call(store, "http_session.close", "c2", session_sha256=SESSION)["receipt"] == {"closed": False}
        assert http_queries.live_session(reader, SECOND, expires - 1) is not None
        _call(store, "http_token.revoke", "r1", name="ci")
        assert http_queries.live_session(reader, SECOND, expires - 1) is None
        assert http_queries.sessions(reader) == []  # the revoke deleted the token's sessions
    finally:
        reader.close()
        store.db.close()


#: A token row as version 18 wrote it (the migration keeps it).
ADD_TOKEN = ("INSERT INTO http_token (name, token_sha256, role, created_at, revoked_at) "
             f"VALUES ('ci', '{TOKEN}', 'operator', 1.0, NULL)")


def test_a_version_18_sqlite_database_gains_the_session_table(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        conn.execute(ADD_TOKEN)
        conn.execute("DROP TABLE http_session")
        conn.execute(f"PRAGMA user_version = {VERSION - 1}")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)
    _use_sessions(old)
    assert _structure(old) == _structure(fresh)


def test_a_version_18_postgresql_database_gains_the_session_table(pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            conn.execute(ADD_TOKEN)
            conn.execute('DROP TABLE "http_session"')
            pg_schema.write_version(conn, VERSION - 1)
    finally:
        db.close()
    _use_sessions(pg_database)
