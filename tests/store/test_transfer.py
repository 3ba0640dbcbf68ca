"""`piwf state migrate --to URL`: a SQLite state copied into an empty PostgreSQL database reads the same,
the copy is verified, a non-empty target or a running host is refused, and a failed copy leaves the
target empty."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_state_commands import BEFORE, T_NEW, T_OLD, Store, _interactive_request
from testsupport import hosts_on_postgres

from piwf_actors.actors.hostlock import HostLock
from piwf_actors.cli.main import main
from piwf_actors.errors import Rejected
from piwf_actors.store import prune_plan, queries, state_report
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.engines.transfer import migrate_to_postgres
from piwf_actors.store.reader import StoreReader


def _sqlite_state(state_dir: Path) -> Path:
    path = state_dir / "state.db"
    s = Store(path, open_store(path, StoreOptions(synchronous="OFF")))
    try:
        s.epoch = s.call("lease.acquire", {"host_id": "h1", "token_hash": "t" * 64, "pid": os.getpid(),
                                           "process_start_identity": "1.0", "lease_s": 10}, T_OLD)["epoch"]
        s.finish("run_done", T_OLD, {"pad": "x" * 2000}, {"report": "y" * 5000})
        _interactive_request(s, "run_done", "req_1", T_OLD)
        s.finish("run_failed", T_OLD + 1, {"x": 1}, fail=True)
        s.call("run.create", {"workflow": "w", "run_id": "run_queued", "input": {"q": 1}}, T_OLD + 2)
        s.call("run.pause", {"run_id": "run_queued", "client_id": "c", "idempotency_key": "k1"}, T_OLD + 3)
    finally:
        s.db.close()
    return path


def _views(location: Any) -> dict[str, Any]:
    reader = StoreReader(location)
    try:
        runs = [row["run_id"] for row in queries.run_list(reader)]
        return {"list": queries.run_list(reader),
                "views": {run_id: queries.run_view(reader, run_id) for run_id in runs},
                "events": {run_id: queries.run_events(reader, run_id) for run_id in runs},
                "counts": queries.run_counts(reader), "lease": queries.lease_row(reader, T_NEW),
                "interactions": queries.pending_interactions(reader)}
    finally:
        reader.close()


def test_a_copied_state_reads_the_same_and_is_verified(state_dir: Path, pg_database: PostgresDatabase) -> None:
    source = _sqlite_state(state_dir)
    result = migrate_to_postgres(source, pg_database)
    assert result["verified"] is True
    assert result["tables"]["run"] == 3 and result["tables"]["blob"] >= 2
    assert result["tables"] == state_report.state_status(source)["tables"]
    assert _views(pg_database) == _views(source)
    # The copy is a working state: its run counters are the source's, and its triggers follow new runs.
    store = Store(pg_database, open_store(pg_database))
    try:
        store.epoch = store.call("lease.acquire", {"host_id": "h2", "token_hash": "u" * 64, "pid": os.getpid(),
                                                   "process_start_identity": "2.0", "lease_s": 10}, T_NEW)["epoch"]
        assert store.epoch == 2  # the copied lease row's epoch goes on
        store.call("run.create", {"workflow": "w", "run_id": "run_new", "input": {}}, T_NEW)
        assert dict(store.sql("SELECT status, n FROM run_count WHERE n > 0")) == \
            {"parked": 1, "done": 1, "failed": 1, "queued": 1}
    finally:
        store.db.close()
    plan_sqlite = prune_plan.prune_plan(source, BEFORE + 10_000_000)
    assert prune_plan.prune_plan(pg_database, BEFORE + 10_000_000) == plan_sqlite


def test_a_non_empty_target_is_refused_and_left_alone(state_dir: Path, pg_database: PostgresDatabase) -> None:
    source = _sqlite_state(state_dir)
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE keep_me (id INTEGER)")
    with pytest.raises(Rejected, match="not empty"):
        migrate_to_postgres(source, pg_database)
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        assert [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")] == \
            ["keep_me"]


def test_a_failed_copy_leaves_the_target_empty(state_dir: Path, pg_database: PostgresDatabase,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    source = _sqlite_state(state_dir)
    from piwf_actors.store.engines import transfer

    real = transfer._copy_table

    def failing(src: Any, raw: Any, table: str, progress: Any) -> int:
        if table == "node_attempt":
            raise RuntimeError("the network went away")
        return real(src, raw, table, progress)

    monkeypatch.setattr(transfer, "_copy_table", failing)
    with pytest.raises(RuntimeError):
        migrate_to_postgres(source, pg_database)
    with psycopg.connect(pg_database.url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0


def test_the_cli_copies_prints_and_refuses_while_a_host_runs(state_dir: Path, pg_database: PostgresDatabase,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    _sqlite_state(state_dir)
    # The source is the state directory's own state.db; under $PIWF_TEST_DATABASE=postgresql a state
    # directory without a --database means that session's PostgreSQL database, so it is named.
    source = ["--database", f"sqlite://{state_dir}/state.db"] if hosts_on_postgres() else []
    lock = HostLock.acquire(state_dir / "host.lock", str(state_dir))
    try:
        assert main(["--state-dir", str(state_dir), *source, "state", "migrate", "--to", pg_database.url]) == 1
        assert "stop it first" in capsys.readouterr().err
    finally:
        lock.release()
    assert main(["--state-dir", str(state_dir), *source, "--json", "state", "migrate", "--to", pg_database.url]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["verified"] is True and printed["tables"]["run"] == 3
    # Offline reads of the copy: `piwf --database URL list` with no host running.
    assert main(["--state-dir", str(state_dir), "--database", pg_database.url, "--json", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert sorted(run["run_id"] for run in listed["runs"]) == ["run_done", "run_failed", "run_queued"]
    # A second copy into the now non-empty database is refused.
    assert main(["--state-dir", str(state_dir), *source, "state", "migrate", "--to", pg_database.url]) == 1
    assert "not empty" in capsys.readouterr().err
