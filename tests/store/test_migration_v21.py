"""Schema v21 (events): a version 20 database gains `event`, `event_delivery`, `event_take`,
`event_subscription`, `event_batch` and the index of pending event waits, keeps its rows, and takes
events on both engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from test_migration_v6 import _structure
from test_store_regressions import Store

from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION

TABLES = ("event", "event_delivery", "event_take", "event_subscription", "event_batch")


def _use_events(location: Any) -> None:
    db = open_store(location)
    try:
        assert schema_version(db) == LATEST_VERSION >= 21
    finally:
        db.close()
    store = Store(location)
    try:
        args = {"client_id": "c", "idempotency_key": "k1", "payload": {}, "name": "order.created",
                "data": {"n": 1}, "key": "o1"}
        first = store.call("event.emit", args)["receipt"]
        again = store.call("event.emit", {**args, "idempotency_key": "k2"})["receipt"]
        assert again["event_id"] == first["event_id"] and again["adopted_event"]
    finally:
        store.db.close()


def test_a_version_20_sqlite_database_gains_the_event_tables(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        conn.execute("DROP INDEX run_wait_event_pending")
        for table in TABLES:
            conn.execute(f"DROP TABLE {table}")
        conn.execute("INSERT INTO blob (sha256, data, size, created_at) VALUES ('x', X'00', 1, 1.0)")
        conn.execute("PRAGMA user_version = 20")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)
    _use_events(old)
    assert _structure(old) == _structure(fresh)
    conn = sqlite3.connect(old)
    try:
        assert conn.execute("SELECT sha256 FROM blob").fetchall() == [("x",)]
    finally:
        conn.close()


def test_a_version_20_postgresql_database_gains_the_event_tables(pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            conn.execute('DROP INDEX "run_wait_event_pending"')
            for table in TABLES:
                conn.execute(f'DROP TABLE "{table}"')
            pg_schema.write_version(conn, 20)
    finally:
        db.close()
    _use_events(pg_database)
