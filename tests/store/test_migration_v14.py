"""Schema v14 (waits, mailboxes, children, priorities and limits): a version 13 database — no
`run_wait` or `run_message`, none of the new run columns, v2's queue index — gets exactly the
structure of a new one and keeps its runs (queued ones stay claimable, at priority 0), on both
engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from test_migration_v6 import _structure

from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION

NEW_COLUMNS = ("priority", "concurrency_key", "concurrency_max", "parent_node_id", "parent_wait_id", "child_index",
               "fanout_max", "copied_from", "held_by")
NEW_RUN_INDEXES = ("run_queue_order", "run_concurrency_key", "run_parent_wait", "run_parent_run", "run_held_by")


def _make_v13(execute: object) -> None:
    for index in NEW_RUN_INDEXES:
        execute(f"DROP INDEX {index}")  # type: ignore[operator]
    execute("DROP TABLE run_wait")  # type: ignore[operator]
    execute("DROP TABLE run_message")  # type: ignore[operator]
    for column in NEW_COLUMNS:
        execute(f"ALTER TABLE run DROP COLUMN {column}")  # type: ignore[operator]
    execute("CREATE INDEX run_status_queue_class_queued_at ON run (status, queue_class, queued_at)")  # type: ignore[operator]
    execute("INSERT INTO run (run_id, workflow, status, revision, progress, steps, pause_requested, "  # type: ignore[operator]
            "cancel_requested, created_at, updated_at, queue_class, queued_at) "
            "VALUES ('run_old', 'w', 'queued', 1, 0, 0, 0, 0, 1.0, 1.0, 2, 1.0)")


def test_a_version_13_sqlite_database_gets_the_new_tables_columns_and_indexes(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        _make_v13(conn.execute)
        conn.execute("PRAGMA user_version = 13")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)

    db = open_store(old)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert db.execute_sql("SELECT run_id, status, priority, concurrency_key FROM run").fetchall() == [
            ("run_old", "queued", 0, None)]
    finally:
        db.close()
    assert _structure(old) == _structure(fresh)


def test_a_version_13_postgresql_database_gets_the_new_tables_and_keeps_its_runs(
        pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            _make_v13(conn.execute)
            pg_schema.write_version(conn, 13)
    finally:
        db.close()

    db = open_store(pg_database)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert [tuple(r) for r in db.execute_sql("SELECT run_id, priority FROM run").fetchall()] == [("run_old", 0)]
        tables = {row[0] for row in db.execute_sql(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()}
        assert {"run_wait", "run_message"} <= tables
        indexes = {row[0] for row in db.execute_sql(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}
        assert set(NEW_RUN_INDEXES) <= indexes and "run_status_queue_class_queued_at" not in indexes
    finally:
        db.close()
