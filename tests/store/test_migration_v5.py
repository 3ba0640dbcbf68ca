"""Schema v5 (run_count and its triggers, the indexes of `schema.V5_INDEXES`): a database made by
an older version ends up with exactly the schema of a new one, and keeps its rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.schema import RUN_COUNT_TRIGGERS, V5_INDEXES


def _schema(path: Path) -> set[tuple[str, str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        return set(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"))
    finally:
        conn.close()


def test_a_version_4_database_gets_the_schema_of_a_new_one(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:  # what schema v4 had: no counters, no triggers, none of the v5 indexes
        for name in RUN_COUNT_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE run_count")
        for _model, index in V5_INDEXES:
            conn.execute(f'DROP INDEX "{index._name}"')
        conn.execute("PRAGMA user_version = 4")
        conn.execute("INSERT INTO run (run_id, workflow, status, park_reason, revision, progress, steps, "
                     "pause_requested, cancel_requested, created_at, updated_at) "
                     "VALUES ('run_1', 'w', 'parked', 'paused', 1, 0, 0, 0, 0, 1.0, 1.0)")
    finally:
        conn.close()
    assert _schema(old) != _schema(fresh)

    db = open_store(old)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert db.execute_sql("SELECT status, n FROM run_count").fetchall() == [("parked", 1)]
    finally:
        db.close()
    assert _schema(old) == _schema(fresh)
