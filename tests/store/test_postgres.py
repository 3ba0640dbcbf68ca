"""What only PostgreSQL does: opening (or refusing) a database, the schema's version, the read-only
readers, the database's clock for the time fence, conflicts between hosts retried, error classes by
SQLSTATE, and the placeholder translation. (Every store test also runs on PostgreSQL through the
`database` fixture; these are the engine's own rules.)"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg
import pytest
from test_store_regressions import TOKEN, Store

from piwf_actors import errors
from piwf_actors.actors.writer import start_writer
from piwf_actors.errors import StoreRefused
from piwf_actors.store import state_report
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.engines import pg_schema
from piwf_actors.store.engines.pg_connection import translate
from piwf_actors.store.engines.postgresql import POSTGRESQL, PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand


def _lease(**extra: Any) -> dict[str, Any]:
    return {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(), "process_start_identity": "1",
            "lease_s": 60, **extra}


def test_placeholders_are_translated_outside_quotes_only() -> None:
    sql, changing = translate("SELECT '?%', \"a?\", ? FROM t WHERE x LIKE 'b%' AND y % 2 = ?")
    assert sql == "SELECT '?%%', \"a?\", %s FROM t WHERE x LIKE 'b%%' AND y %% 2 = %s"
    assert not changing
    assert translate("WITH d AS (SELECT 1) DELETE FROM t")[1]
    assert not translate("WITH d AS (SELECT 1) SELECT * FROM d")[1]


def test_a_new_database_is_created_at_the_latest_version_and_reopens(pg_database: PostgresDatabase) -> None:
    db = open_store(pg_database)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert pg_schema.read_version(db.connection()) == ("piwf", LATEST_VERSION)
        assert pg_schema.trigger_names(db.connection()) >= {"run_count_insert", "run_count_update",
                                                            "run_count_delete"}
    finally:
        db.close()
    open_store(pg_database).close()  # a second open migrates nothing and refuses nothing
    assert state_report.verify(pg_database, time.time())["ok"] is True


def test_a_foreign_or_newer_database_is_refused_untouched(pg_database: PostgresDatabase) -> None:
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    with pytest.raises(StoreRefused, match="not a piwf state database"):
        open_store(pg_database)
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        assert [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")] == \
            ["invoices"]
        conn.execute("DROP TABLE invoices")
    open_store(pg_database).close()
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        conn.execute("UPDATE piwf_schema SET version = %s", (LATEST_VERSION + 1,))
    with pytest.raises(StoreRefused, match="newer than this piwf"):
        open_store(pg_database)


def test_an_unreachable_database_is_refused_in_one_line(pg_cluster: Any) -> None:
    missing = PostgresDatabase(pg_cluster.url("no_such_database"))
    with pytest.raises(StoreRefused, match="cannot connect") as caught:
        open_store(missing)
    assert "\n" not in str(caught.value)


def test_readers_cannot_write_and_see_one_snapshot(pg_database: PostgresDatabase) -> None:
    store = Store(pg_database)
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    reader = StoreReader(pg_database)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            reader.conn.execute("DELETE FROM run")
        assert reader.one("SELECT count(*) FROM run") == (1,)
        with reader.snapshot():
            first = reader.one("SELECT count(*) FROM run")
            store.call("run.create", {"workflow": "w", "run_id": "r2", "input": {}})
            assert reader.one("SELECT count(*) FROM run") == first  # REPEATABLE READ
        assert reader.one("SELECT count(*) FROM run") == (2,)
    finally:
        reader.close()
        store.db.close()


def test_a_replayed_worker_message_gets_its_recorded_answer(pg_database: PostgresDatabase) -> None:
    """The recorded answer is msgpack bytes: BYTEA on PostgreSQL, read back byte for byte."""
    store = Store(pg_database)
    try:
        store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
        store.claim()
        generation, epoch = store.claims["r1"]
        message = {"run_id": "r1", "launch_id": epoch, "message_id": "m-once", "generation": generation,
                   "token_hash": TOKEN, "op": "ready", "payload": {"want_state": False}, "expected_revision": None}
        first = store.call("worker.message", message)
        again = store.call("worker.message", message)
        assert again == {**first, "replayed": True}
    finally:
        store.db.close()


def test_the_time_fence_and_lease_times_use_the_databases_clock(pg_database: PostgresDatabase) -> None:
    """A host whose clock is an hour behind still takes a lease that runs out by the database's clock,
    and its writes are fenced by that clock too."""
    open_store(pg_database).close()
    behind = start_writer(pg_database, clock=lambda: time.time() - 3600)
    try:
        taken = behind.call("lease.acquire", _lease(lease_s=30))
        assert abs(taken["expires_at"] - (time.time() + 30)) < 5
        writer = behind.with_epoch(taken["epoch"])
        assert writer.execute("run.create", {"workflow": "w"}).ok
    finally:
        behind.ref.stop()
    ahead = start_writer(pg_database, clock=lambda: time.time() + 3600)
    try:
        # An hour ahead by its own clock, but the lease above has not run out by the database's:
        # the second host must not take it.
        refused = ahead.execute("lease.acquire", _lease(host_id="h2", pid=os.getpid() + 1))
        assert not refused.ok and refused.error_code == "host_already_running", refused
    finally:
        ahead.ref.stop()


def test_a_conflict_with_another_hosts_transaction_is_retried(pg_database: PostgresDatabase) -> None:
    store = Store(pg_database)
    try:
        store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
        other = psycopg.connect(pg_database.url, autocommit=True)
        monitor = psycopg.connect(pg_database.url, autocommit=True)
        holding = threading.Event()
        blocked: list[bool] = []

        def waiting_on_other() -> bool:
            """Some session (the first host's batch) waits for a lock `other` holds."""
            pid = other.info.backend_pid
            return monitor.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                                   (pid,)).fetchone()[0] > 0

        def other_host() -> None:
            other.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            other.execute("UPDATE run SET revision = revision + 1 WHERE run_id = 'r1'")
            holding.set()
            # Commit once the first host's batch is waiting for this row's lock (or give up waiting,
            # and the test fails below).
            deadline = time.monotonic() + 30
            while not (seen := waiting_on_other()) and time.monotonic() < deadline:
                time.sleep(0.01)
            blocked.append(seen)
            other.execute("COMMIT")

        thread = threading.Thread(target=other_host)
        thread.start()
        assert holding.wait(10)
        outcome = apply_batch(store.db, [WriteCommand("run.pause", {"run_id": "r1"}, store.epoch)], 1000.0)
        thread.join(40)
        other.close()
        monitor.close()
        assert blocked == [True], "the first host's batch to wait for the row lock of the other host's transaction"
        (paused,) = outcome.results
        assert paused.ok, paused
        # The race happened and the isolation level settled it: the other host's commit made the
        # waiting batch fail serialization, and the batch ran again from the start (READ COMMITTED
        # would have let it go on past a change it never read).
        assert outcome.committed and outcome.conflict_retries >= 1, outcome
        assert store.db.execute_sql("SELECT revision, status FROM run WHERE run_id = 'r1'").fetchone() == \
            (3, "parked")
    finally:
        store.db.close()


def test_errors_are_classified_by_sqlstate_not_by_message() -> None:
    def error(cls: type[psycopg.Error]) -> psycopg.Error:
        return cls("any text, in any language")

    assert isinstance(POSTGRESQL.classify(error(psycopg.errors.SerializationFailure)), errors.TransactionConflict)
    assert isinstance(POSTGRESQL.classify(error(psycopg.errors.DeadlockDetected)), errors.TransactionConflict)
    assert isinstance(POSTGRESQL.classify(error(psycopg.errors.DiskFull)), errors.DiskFull)
    assert isinstance(POSTGRESQL.classify(error(psycopg.errors.ReadOnlySqlTransaction)), errors.ReadOnlyDatabase)
    assert "locked" in str(POSTGRESQL.classify(error(psycopg.errors.LockNotAvailable)))
    assert POSTGRESQL.classify(error(psycopg.errors.AdminShutdown)) is not None
    # The command's own failures are not storage failures: they refuse that command alone.
    assert POSTGRESQL.classify(error(psycopg.errors.UniqueViolation)) is None
    assert POSTGRESQL.classify(error(psycopg.errors.UndefinedColumn)) is None


def test_a_failed_statement_is_undone_alone_after_the_transaction_aborted(pg_database: PostgresDatabase) -> None:
    """PostgreSQL refuses a transaction's later statements once one failed: the batch is redone
    with savepoints and only the failing command is refused."""
    db = open_store(pg_database)
    try:
        epoch = apply_batch(db, [WriteCommand("lease.acquire", _lease())], time.time()).results[0].value["epoch"]
        db.execute_sql("CREATE TABLE boom_guard (x INTEGER)")
        db.execute_sql("""CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
                          BEGIN IF NEW.workflow = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$""")
        db.execute_sql("CREATE TRIGGER boom BEFORE INSERT ON run FOR EACH ROW EXECUTE FUNCTION boom()")
        outcome = apply_batch(db, [
            WriteCommand("run.create", {"workflow": "a", "run_id": "run_a"}, epoch),
            WriteCommand("run.create", {"workflow": "boom", "run_id": "run_boom"}, epoch),
            WriteCommand("run.create", {"workflow": "b", "run_id": "run_b"}, epoch),
        ], time.time())
        assert outcome.committed
        assert [r.ok for r in outcome.results] == [True, False, True]
        assert outcome.results[1].error_code == "command_failed"
        assert sorted(r[0] for r in db.execute_sql("SELECT run_id FROM run").fetchall()) == ["run_a", "run_b"]
        assert db.execute_sql("SELECT status, n FROM run_count WHERE n > 0").fetchall() == [("queued", 2)]
    finally:
        db.close()


def test_verify_notices_a_dropped_trigger(pg_database: PostgresDatabase) -> None:
    open_store(pg_database).close()
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER run_count_update ON run")
    report = state_report.verify(pg_database, time.time())
    assert not report["ok"]
    assert [v["code"] for v in report["violations"]] == ["run_count_trigger_missing"]


def test_state_status_of_postgres_renders_without_sqlite_fields(pg_database: PostgresDatabase) -> None:
    from rich.console import Console

    from piwf_actors.cli import render_state

    open_store(pg_database).close()
    console = Console(record=True, width=120, color_system=None)
    console.print(render_state.state_status(state_report.state_status(pg_database)))
    shown = console.export_text()
    assert "PostgreSQL" in shown and "None" not in shown and "pages" not in shown
    assert "***" not in shown and "postgres@" in shown  # the URL (it has no password to hide)
