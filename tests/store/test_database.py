from __future__ import annotations

import os
import sqlite3
import stat

import pytest

from piwf_actors.errors import StoreRefused
from piwf_actors.paths import StatePaths, default_state_dir, ensure_private_dir
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines.sqlite_file import APPLICATION_ID
from piwf_actors.store.migrations import LATEST_VERSION


def test_new_database_is_created_private_and_versioned(state_dir):
    db = open_store(state_dir / "state.db")
    try:
        conn = db.connection()
        assert schema_version(db) == LATEST_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert "run" in db.get_tables() and "host_state" in db.get_tables()
    finally:
        db.close()
    assert stat.S_IMODE(os.stat(state_dir / "state.db").st_mode) == 0o600


def test_reopen_keeps_data(state_dir):
    db = open_store(state_dir / "state.db")
    db.execute_sql("UPDATE host_state SET epoch = 41")
    db.close()
    db = open_store(state_dir / "state.db")
    assert db.execute_sql("SELECT epoch FROM host_state").fetchone()[0] == 41
    db.close()


def test_zero_byte_file_is_refused(state_dir):
    (state_dir / "state.db").write_bytes(b"")
    with pytest.raises(StoreRefused, match="empty"):
        open_store(state_dir / "state.db")
    assert (state_dir / "state.db").stat().st_size == 0  # nothing was created over it


def test_garbage_header_is_refused(state_dir):
    (state_dir / "state.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreRefused, match="not a SQLite database"):
        open_store(state_dir / "state.db")


def test_foreign_sqlite_database_is_refused(state_dir):
    conn = sqlite3.connect(state_dir / "state.db")
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreRefused, match="not a piwf state database"):
        open_store(state_dir / "state.db")


def test_newer_schema_is_refused(state_dir):
    open_store(state_dir / "state.db").close()
    conn = sqlite3.connect(state_dir / "state.db")
    conn.execute(f"PRAGMA user_version = {LATEST_VERSION + 5}")
    conn.close()
    with pytest.raises(StoreRefused, match="newer"):
        open_store(state_dir / "state.db")


def test_corrupted_page_is_refused(state_dir):
    path = state_dir / "state.db"
    db = open_store(path)
    db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    assert len(data) >= 4 * page_size
    # Scribble over the b-tree pages after the header page: quick_check must notice.
    for page in range(2, len(data) // page_size):
        start = page * page_size
        data[start:start + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    with pytest.raises(StoreRefused):
        open_store(path)


def test_missing_database_with_leftover_wal_is_refused(state_dir):
    (state_dir / "state.db-wal").write_bytes(b"x" * 100)
    with pytest.raises(StoreRefused, match="write-ahead log"):
        open_store(state_dir / "state.db")


def test_state_dir_defaults(monkeypatch, tmp_path):
    assert default_state_dir({"PIWF_STATE_DIR": "/x/y"}).as_posix() == "/x/y"
    assert default_state_dir({"XDG_STATE_HOME": "/s"}).as_posix() == "/s/piwf"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_state_dir({}) == tmp_path / ".local" / "state" / "piwf"
    monkeypatch.setenv("PIWF_STATE_DIR", str(tmp_path / "st"))
    assert StatePaths.resolve(None).root == tmp_path / "st"


def test_state_dir_is_made_private(tmp_path):
    target = tmp_path / "a" / "b"
    ensure_private_dir(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700
    os.chmod(target, 0o755)
    ensure_private_dir(target)
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o700


def test_state_dir_symlink_is_refused(tmp_path):
    from piwf_actors.errors import UnsafePath

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePath):
        ensure_private_dir(tmp_path / "link")


def test_a_version_1_database_is_migrated_to_queue_order_columns(state_dir):
    """v2 adds run.queue_class / queued_at / start_failures and two indexes; queued runs of v1 are
    classed by their progress (a run that made steps was woken or requeued)."""
    path = state_dir / "state.db"
    open_store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:  # turn the fresh file back into what schema v1 created
        for index in ("run_queue_order", "run_concurrency_key", "run_parent_wait", "run_held_by",  # v14's
                      "run_rate_key"):  # v20's
            conn.execute(f"DROP INDEX {index}")
        conn.execute("DROP INDEX host_command_created_at")
        for column in ("queue_class", "queued_at", "start_failures"):
            conn.execute(f"ALTER TABLE run DROP COLUMN {column}")
        conn.execute("PRAGMA user_version = 1")
        for run_id, steps, updated in (("fresh", 0, 10.0), ("woken", 2, 20.0)):
            conn.execute("INSERT INTO run (run_id, workflow, status, revision, progress, steps, pause_requested, "
                         "cancel_requested, created_at, updated_at) VALUES (?, 'w', 'queued', 1, 0, ?, 0, 0, 1.0, ?)",
                         (run_id, steps, updated))
    finally:
        conn.close()
    db = open_store(path)
    try:
        assert schema_version(db) == LATEST_VERSION
        rows = db.execute_sql("SELECT run_id, queue_class, queued_at, start_failures FROM run ORDER BY run_id").fetchall()
        assert rows == [("fresh", 2, 10.0, 0), ("woken", 1, 20.0, 0)]
        indexes = {row[1] for row in db.execute_sql("PRAGMA index_list(run)").fetchall()}
        # v2's queue index served the claim until v14 replaced it with one that orders by priority too.
        assert "run_queue_order" in indexes and "run_status_queue_class_queued_at" not in indexes
    finally:
        db.close()


def test_a_version_2_database_gets_the_channel_tables(state_dir):
    """v3 recreates channel_effect and channel_cursor in their real shape (v1 declared them; nothing wrote
    them) and adds channel_adapter; v12 replaces channel_cursor with channel_stream."""
    path = state_dir / "state.db"
    open_store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:  # what schema v1/v2 had
        for table in ("channel_effect", "channel_cursor", "channel_adapter"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("CREATE TABLE channel_effect (channel TEXT, effect_key TEXT, request_id TEXT, status TEXT, "
                     "external_id TEXT, revision INTEGER, created_at REAL, updated_at REAL, "
                     "PRIMARY KEY (channel, effect_key))")
        conn.execute("CREATE TABLE channel_cursor (channel TEXT PRIMARY KEY, cursor TEXT, revision INTEGER, "
                     "updated_at REAL)")
        conn.execute("PRAGMA user_version = 2")
    finally:
        conn.close()
    db = open_store(path)
    try:
        assert schema_version(db) == LATEST_VERSION
        columns = {row[1] for row in db.execute_sql("PRAGMA table_info(channel_effect)").fetchall()}
        assert {"effect_id", "profile", "purpose", "attempt", "status", "adapter_epoch"} <= columns
        # v12 keeps the update cursor per bot (channel_stream) and drops the per-profile one.
        assert "stream" in {row[1] for row in db.execute_sql("PRAGMA table_info(channel_stream)").fetchall()}
        assert not db.execute_sql("SELECT name FROM sqlite_master WHERE name = 'channel_cursor'").fetchall()
        assert db.execute_sql("SELECT count(*) FROM channel_adapter").fetchone()[0] == 0
    finally:
        db.close()
