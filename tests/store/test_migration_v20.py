"""Schema v20 (flow control by rate: workflows/rate_limits.py): a version 19 database gains the run's
rate columns, the `rate_start` and `flow_timer` tables and their indexes, keeps its runs, and a rate
limit holds and releases runs on it as on a new one, on both engines."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from actors.writer_store import WriterStore
from test_migration_v6 import _structure
from test_rates import claim, limited, row

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.runstate import QUEUE_HELD

#: The version this migration reaches (renumbered at a merge: change it here only).
VERSION = 20
#: What version 19 lacked: the run's rate columns (and their index), the two tables.
DOWNGRADE = ("DROP TABLE rate_start", "DROP TABLE flow_timer", "DROP INDEX run_rate_key",
             "ALTER TABLE run DROP COLUMN rate_key", "ALTER TABLE run DROP COLUMN rate_max",
             "ALTER TABLE run DROP COLUMN rate_per_s")
#: A run version 19 wrote (the migration keeps it; it has no rate key).
OLD_RUN = "old"


def _old_run(database: DatabaseLocation, state_dir: Path) -> None:
    store = WriterStore(state_dir, database=database)
    try:
        store.writer.call("run.create", {"workflow": "send", "run_id": OLD_RUN, "input": {}})
        (epoch,) = store.reader.one("SELECT epoch FROM host_state WHERE id = 1")
        store.writer.call("lease.release", {"epoch": epoch, "host_id": "h", "token_hash": "t" * 64,  # for the next
                                            "pid": os.getpid(), "process_start_identity": "1"})  # store's lease
    finally:
        store.close()


def _rate_limit_works(database: DatabaseLocation, state_dir: Path) -> None:
    db = open_store(database)
    try:
        assert schema_version(db) == LATEST_VERSION >= VERSION
    finally:
        db.close()
    store = WriterStore(state_dir, database=database)
    try:
        for n in range(3):
            store.writer.call("run.create", limited(f"m{n}", maximum=2))
        assert claim(store) == [OLD_RUN, "m0", "m1"]  # the old run, kept, and two of the limited ones
        assert (row(store, "m2")["queue_class"], row(store, "m2")["held_by"]) == (QUEUE_HELD, "rate_key:mail-api")
        store.time += 61
        assert store.writer.call("waits.wake", {})["timers"] == {"rate_key:mail-api": 1}
        assert claim(store) == ["m2"]
    finally:
        store.close()


def test_a_version_19_sqlite_database_gains_the_rate_tables(state_dir: Path) -> None:
    fresh, old = state_dir / "fresh.db", state_dir / "state.db"
    open_store(fresh).close()
    _old_run(old, state_dir)
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        for statement in DOWNGRADE:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {VERSION - 1}")
    finally:
        conn.close()
    assert _structure(old) != _structure(fresh)
    _rate_limit_works(old, state_dir)
    assert _structure(old) == _structure(fresh)


def test_a_version_19_postgresql_database_gains_the_rate_tables(pg_database: PostgresDatabase,
                                                                 state_dir: Path) -> None:
    _old_run(pg_database, state_dir)
    db = open_store(pg_database)
    try:
        with db.atomic():
            conn = db.connection()
            for statement in DOWNGRADE:
                conn.execute(statement.replace("DROP INDEX run_rate_key", "DROP INDEX IF EXISTS run_rate_key"))
            pg_schema.write_version(conn, VERSION - 1)
    finally:
        db.close()
    _rate_limit_works(pg_database, state_dir)
