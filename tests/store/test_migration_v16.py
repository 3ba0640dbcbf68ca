"""Schema v16 (run graphs): a version 15 database — no `run.graph_sha256`, no index on it — gets exactly the
structure of a new one and keeps its runs, which have no graph (`run.graph` says so: drawn from the nodes
they reached), on both engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from test_migration_v6 import _structure

from piwf_actors.protocol.catalog.runs import graph_receipt
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.reader import StoreReader


def _make_v15(execute: object) -> None:
    execute("DROP INDEX run_graph_sha256_prefix")  # type: ignore[operator]
    execute("ALTER TABLE run DROP COLUMN graph_sha256")  # type: ignore[operator]
    execute("INSERT INTO run (run_id, workflow, status, revision, progress, steps, "  # type: ignore[operator]
            "pause_requested, cancel_requested, created_at, updated_at, queue_class, queued_at) "
            "VALUES ('run_old', 'w', 'done', 1, 0, 0, 0, 0, 1.0, 1.0, 2, 1.0)")


def test_a_version_15_sqlite_database_gets_the_graph_column_and_its_index(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        _make_v15(conn.execute)
        conn.execute("PRAGMA user_version = 15")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)

    db = open_store(old)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert db.execute_sql("SELECT run_id, graph_sha256 FROM run").fetchall() == [("run_old", None)]
    finally:
        db.close()
    assert _structure(old) == _structure(fresh)
    reader = StoreReader(old)
    try:
        assert graph_receipt(reader, "run_old") == {"run_id": "run_old", "graph_sha256": None, "graph_bytes": 0}
        assert graph_receipt(reader, "run_gone") is None
    finally:
        reader.close()


def test_a_version_15_postgresql_database_gets_the_graph_column_and_keeps_its_runs(
        pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            _make_v15(conn.execute)
            pg_schema.write_version(conn, 15)
    finally:
        db.close()

    db = open_store(pg_database)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert [tuple(r) for r in db.execute_sql("SELECT run_id, graph_sha256 FROM run").fetchall()] == [
            ("run_old", None)]
        indexes = {row[0] for row in db.execute_sql(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}
        assert "run_graph_sha256_prefix" in indexes
    finally:
        db.close()
    reader = StoreReader(pg_database)
    try:
        assert graph_receipt(reader, "run_old") == {"run_id": "run_old", "graph_sha256": None, "graph_bytes": 0}
    finally:
        reader.close()
