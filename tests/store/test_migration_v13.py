"""Schema v13 (launch ids): the per-launch id that fences worker messages was stored as `runner_epoch`
(`claim_runner_epoch` on resources); a version 12 database gets the names of a new one and keeps
every row, key and index, on both engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from test_migration_v6 import _structure

from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION

RENAMED = (("run_claim", "launch_id", "runner_epoch"), ("run_worker", "launch_id", "runner_epoch"),
           ("worker_message", "launch_id", "runner_epoch"), ("resource", "claim_launch_id", "claim_runner_epoch"))


def _worker_message(execute: object) -> None:
    execute("INSERT INTO worker_message (runner_epoch, message_id, run_id, generation, kind, fingerprint, response, "  # type: ignore[operator]
            "created_at) VALUES ('launch-1', 'm1', 'run_1', 1, 'ready', 'f', 'r', 1.0)")


def test_a_version_12_sqlite_database_gets_the_new_names_and_keeps_its_rows(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        for table, new, previous in RENAMED:
            conn.execute(f"ALTER TABLE {table} RENAME COLUMN {new} TO {previous}")
        _worker_message(conn.execute)
        conn.execute("PRAGMA user_version = 12")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)

    db = open_store(old)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert db.execute_sql("SELECT launch_id, message_id FROM worker_message").fetchall() == [("launch-1", "m1")]
    finally:
        db.close()
    assert _structure(old) == _structure(fresh)


def test_a_version_12_postgresql_database_gets_the_new_names_and_keeps_its_rows(pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            for table, new, previous in RENAMED:
                conn.execute(f"ALTER TABLE {table} RENAME COLUMN {new} TO {previous}")
            _worker_message(conn.execute)
            pg_schema.write_version(conn, 12)
    finally:
        db.close()

    db = open_store(pg_database)
    try:
        assert schema_version(db) == LATEST_VERSION
        rows = db.execute_sql("SELECT launch_id, message_id FROM worker_message").fetchall()
        assert [tuple(row) for row in rows] == [("launch-1", "m1")]
        columns = {row[0] for row in db.execute_sql(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()").fetchall()}
        assert "runner_epoch" not in columns and "claim_runner_epoch" not in columns
        assert {"launch_id", "claim_launch_id"} <= columns
    finally:
        db.close()
