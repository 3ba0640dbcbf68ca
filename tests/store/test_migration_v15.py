"""Schema v15 (notifications for people): a version 14 database gets `session_message.audience` and
the index of the messages that name one, keeps every message (without an audience), and ends with the
structure of a new database, on both engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from test_migration_v6 import _structure

from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION

_TO_V14 = ("DROP INDEX session_message_addressed", "ALTER TABLE session_message DROP COLUMN audience",
           "INSERT INTO session_message (message_id, session_id, run_id, kind, body, created_at) "
           "VALUES ('msg_1', 's', 'run_1', 'notify', '{\"message\":\"hi\",\"node_id\":\"n\"}', 1.0)")


def test_a_version_14_sqlite_database_gets_the_audience_of_notifications(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        for statement in _TO_V14:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 14")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)

    db = open_store(old)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert db.execute_sql("SELECT message_id, audience FROM session_message").fetchall() == [("msg_1", None)]
        plan = db.execute_sql("EXPLAIN QUERY PLAN SELECT message_id FROM session_message "
                              "WHERE audience IS NOT NULL AND created_at >= 0").fetchall()
        assert "session_message_addressed" in str(plan)
    finally:
        db.close()
    assert _structure(old) == _structure(fresh)


def test_a_version_14_postgresql_database_gets_the_audience_of_notifications(pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            for statement in _TO_V14:
                conn.execute(statement)
            pg_schema.write_version(conn, 14)
    finally:
        db.close()

    db = open_store(pg_database)
    try:
        assert schema_version(db) == LATEST_VERSION
        rows = db.execute_sql("SELECT message_id, audience FROM session_message").fetchall()
        assert [tuple(row) for row in rows] == [("msg_1", None)]
        indexes = {row[0] for row in db.execute_sql(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}
        assert "session_message_addressed" in indexes
    finally:
        db.close()
