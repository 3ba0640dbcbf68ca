"""Schema v6 (leaner rows): a version 5 database gets the structure of a new one and keeps its data —
the claim generations move from run_generation into run.generation, the digest-prefix indexes
become partial, and values stored as blobs before stay readable."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.schema import V5_INDEXES


def _structure(path: Path) -> dict[str, Any]:
    """Tables (columns with types, WITHOUT ROWID or not), indexes (their SQL) and triggers; column
    order is left out (a migration adds columns at the end, a new file has them in model order)."""
    conn = sqlite3.connect(path)
    try:
        found: dict[str, Any] = {}
        for kind, name, sql in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"):
            if kind == "table":
                columns = sorted((row[1], row[2], row[3], row[5]) for row in conn.execute(f'PRAGMA table_info("{name}")'))
                found[name] = ("table", columns, "WITHOUT ROWID" in (sql or "").upper())
            else:
                found[name] = (kind, sql)
        return found
    finally:
        conn.close()


def _make_version_5(path: Path) -> None:
    """Turn a new database into what schema v5 had, with some rows in it."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for table, column in (("run", "input_json"), ("run", "output_json"), ("node_attempt", "output_json"),
                              ("run", "generation")):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute("CREATE TABLE run_generation (run_id TEXT NOT NULL PRIMARY KEY, generation INTEGER NOT NULL)")
        for _model, index in V5_INDEXES:
            if index._where is not None:
                name = index._name
                statement = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]
                conn.execute(f'DROP INDEX "{name}"')
                conn.execute(statement[:statement.upper().rindex(" WHERE ")])  # the v5 index had no WHERE
        conn.execute("INSERT INTO blob (sha256, size, data, created_at) VALUES ('ab' || substr(hex(zeroblob(31)), 1, 62), "
                     "7, '{\"a\":1}', 1.0)")
        sha = conn.execute("SELECT sha256 FROM blob").fetchone()[0]
        conn.execute("INSERT INTO run (run_id, workflow, status, revision, progress, steps, pause_requested, "
                     "cancel_requested, created_at, updated_at, input_sha256, finished_at) "
                     "VALUES ('run_1', 'w', 'done', 3, 2, 1, 0, 0, 1.0, 2.0, ?, 2.0)", (sha,))
        conn.execute("INSERT INTO run_generation (run_id, generation) VALUES ('run_1', 3)")
        conn.execute("INSERT INTO node_attempt (attempt_id, run_id, node_id, attempt_no, step, status, output_sha256, "
                     "generation, started_at, finished_at) VALUES ('att_1', 'run_1', 'a', 1, 0, 'succeeded', ?, 3, 1.0, 2.0)",
                     (sha,))
        conn.execute("INSERT INTO host_command (client_id, idempotency_key, request_id, operation, run_id, fingerprint, "
                     "outcome, revision, receipt, host_epoch, created_at) "
                     "VALUES ('cli', 'k1', 'r1', 'run.start', 'run_1', 'f', 'accepted', 1, '{}', 1, 1.0)")
        conn.execute("PRAGMA user_version = 5")
    finally:
        conn.close()


def test_a_version_5_database_gets_the_structure_of_a_new_one_and_keeps_its_rows(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "old.db"
    open_store(fresh).close()
    open_store(old).close()
    _make_version_5(old)
    assert _structure(old) != _structure(fresh)

    db = open_store(old)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert db.execute_sql("SELECT generation, input_json FROM run WHERE run_id = 'run_1'").fetchone() == (3, None)
        assert db.execute_sql("SELECT output_sha256 IS NOT NULL, output_json FROM node_attempt").fetchone() == (1, None)
        assert db.execute_sql("SELECT client_id, idempotency_key, request_id, receipt FROM host_command").fetchall() == [
            ("cli", "k1", "r1", "{}")]
    finally:
        db.close()
    assert _structure(old) == _structure(fresh)
