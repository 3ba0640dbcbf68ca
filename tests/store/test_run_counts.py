"""`run_count`: the runs-per-status counters host.status reads (schema v5), kept by triggers on `run`.

The counters must equal a real `GROUP BY status` of `run` at every moment, whoever changes a run:
they are compared inside one read transaction (one WAL snapshot) while real hosts start, claim,
finish, fail, park, cancel, restart and prune runs, across a host restart that interrupts a running
run, after migrating a version 4 database that already holds runs, and `state.verify` must notice
when they are broken.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from testsupport import read_snapshot, state_database, wait_for

from piwf_actors.store import state_report
from piwf_actors.store.database import open_store, schema_version
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.schema import RUN_COUNT_TRIGGERS, V5_INDEXES

FLOWS = '''
import os
import time

from piwf_actors.workflows import checkpoint, compute, define_workflow, edge


def _boom(ctx):
    raise RuntimeError("boom")


def _hold(ctx):
    # Keeps the run `running` until the test creates the release file (bounded: never hangs a worker).
    deadline = time.monotonic() + 60
    while not os.path.exists(ctx.input["release"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"released": os.path.exists(ctx.input["release"])}


quick = define_workflow(name="quick", start_at="a", nodes={
    "a": compute(run=lambda ctx: {"n": 1}), "b": compute(run=lambda ctx: {"n": 2}),
}, edges=[edge("a", "b")])
boom = define_workflow(name="boom", start_at="a", nodes={"a": compute(run=_boom)}, edges=[])
gate = define_workflow(name="gate", start_at="ask", nodes={
    "ask": checkpoint(prompt="go?"), "after": compute(run=lambda ctx: {"ok": True}),
}, edges=[edge("ask", "after")])
hold = define_workflow(name="hold", start_at="a", nodes={"a": compute(run=_hold)}, edges=[])
'''

FINAL = ("done", "failed", "cancelled")


def _snapshot_counts(state_dir: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(the counters, a real count) of the state of `state_dir` (either engine), read in one read
    transaction; statuses with 0 runs left out."""
    with read_snapshot(state_dir) as conn:
        # PostgreSQL keeps each status's count in shards (pg_schema.RUN_COUNT_SHARDS): their sum is the count.
        counters = {row["status"]: row["n"] for row in conn.execute(
            "SELECT status, sum(n) AS n FROM run_count GROUP BY status").fetchall() if row["n"]}
        real = {row["status"]: row["n"]
                for row in conn.execute("SELECT status, count(*) AS n FROM run GROUP BY status").fetchall()}
    return counters, real


def _assert_exact(state_dir: Path) -> dict[str, int]:
    counters, real = _snapshot_counts(state_dir)
    assert counters == real
    return real


def _host_counts(host) -> dict[str, int]:
    return {status: n for status, n in host.status()["runs"].items() if n}


def _settle(host, state_dir: Path, run_ids: list[str], statuses: tuple[str, ...], timeout: float = 60) -> None:
    """Poll until every run is in one of `statuses`, checking the counters at every poll."""
    def settled() -> bool:
        _assert_exact(state_dir)
        return all(host.get_run(run_id).status in statuses for run_id in run_ids)

    wait_for(settled, timeout, lambda: f"runs to reach {statuses}: "
             f"{[(r, host.get_run(r).status) for r in run_ids]}")


@pytest.fixture
def flows(state_dir: Path) -> str:
    path = state_dir / "flows.py"
    path.write_text(FLOWS)
    return str(path)


def test_counters_stay_exact_through_real_runs(hosts, state_dir, flows) -> None:
    host = hosts(state_dir, max_workers=2)
    assert _host_counts(host) == {}

    # start → claim → run → done / failed / parked, counted at every poll while they move.
    quick = [host.start_run(f"{flows}:quick", {"i": i}).run_id for i in range(12)]
    boom = host.start_run(f"{flows}:boom").run_id
    gates = [host.start_run(f"{flows}:gate", {"g": g}).run_id for g in range(2)]
    _settle(host, state_dir, quick + [boom], FINAL)
    _settle(host, state_dir, gates, ("parked",))
    assert _assert_exact(state_dir) == {"done": 12, "failed": 1, "parked": 2}
    assert _host_counts(host) == {"done": 12, "failed": 1, "parked": 2}

    # parked → cancelled; parked → answered → queued → done.
    host.cancel_run(gates[0])
    request = next(r for r in host.pending_interactions() if r.run_id == gates[1])
    host.answer_checkpoint(request.request_id, {"go": True})
    _settle(host, state_dir, gates, FINAL)
    assert _assert_exact(state_dir) == {"done": 13, "failed": 1, "cancelled": 1}

    # restart: a new run (queued) that fails again.
    failed = host.get_run(boom)
    child = host.restart_run(boom, expected_revision=failed.revision).run_id
    _settle(host, state_dir, [child], FINAL)
    assert _assert_exact(state_dir) == {"done": 13, "failed": 2, "cancelled": 1}
    assert _host_counts(host) == {"done": 13, "failed": 2, "cancelled": 1}

    # prune: every finished run goes, and its count with it.
    receipt = host.writer.call("state.prune", {"before": time.time() + 1, "apply": True})
    assert receipt["receipt"]["run_count"] == 16
    assert _assert_exact(state_dir) == {}
    assert _host_counts(host) == {}
    assert state_report.verify(state_database(state_dir), time.time())["ok"]


def test_counters_stay_exact_across_a_host_restart_that_interrupts_a_run(hosts, state_dir, flows) -> None:
    release = state_dir / "release"
    host = hosts(state_dir, max_workers=1)
    held = host.start_run(f"{flows}:hold", {"release": str(release)}).run_id
    queued = host.start_run(f"{flows}:quick").run_id
    _settle(host, state_dir, [held], ("running",))
    assert _assert_exact(state_dir) == {"running": 1, "queued": 1}
    assert _host_counts(host) == {"running": 1, "queued": 1}

    host.stop("test: interrupt a running run")
    assert _assert_exact(state_dir) in ({"running": 1, "queued": 1}, {"queued": 2}, {"parked": 1, "queued": 1})

    release.touch()
    host = hosts(state_dir, max_workers=1)  # recovery moves the interrupted run on; both end
    _settle(host, state_dir, [held, queued], (*FINAL, "parked"))
    if host.get_run(held).status == "parked":  # parked without progress after the crash: resume it
        host.resume_run(held)
        _settle(host, state_dir, [held], FINAL)
    assert _assert_exact(state_dir) == {"done": 2}
    assert _host_counts(host) == {"done": 2}
    assert state_report.verify(state_database(state_dir), time.time())["ok"]


def _as_version_4(path: Path) -> None:
    """Turn a fresh file back into what schema v4 had: no counters, no triggers, no v5 indexes."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for name in RUN_COUNT_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("DROP TABLE run_count")
        for _model, index in V5_INDEXES:
            conn.execute(f'DROP INDEX "{index._name}"')
        conn.execute("PRAGMA user_version = 4")
    finally:
        conn.close()


def _insert_run(conn: sqlite3.Connection, run_id: str, status: str) -> None:
    """A bare run row (no events: verify's event checks are not what these tests are about)."""
    conn.execute("INSERT INTO run (run_id, workflow, status, park_reason, revision, progress, steps, "
                 "pause_requested, cancel_requested, created_at, updated_at) "
                 "VALUES (?, 'w', ?, ?, 1, 0, 0, 0, 0, 1.0, 1.0)",
                 (run_id, status, "paused" if status == "parked" else None))


def test_a_version_4_database_with_runs_gets_exact_counters(state_dir) -> None:
    path = state_dir / "state.db"
    open_store(path).close()
    _as_version_4(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for n, status in enumerate(["done"] * 5 + ["failed"] * 2 + ["queued"] * 3 + ["parked"]):
            _insert_run(conn, f"run_{n:03d}", status)
    finally:
        conn.close()

    db = open_store(path)
    try:
        assert schema_version(db) == LATEST_VERSION
        assert _assert_exact(state_dir) == {"done": 5, "failed": 2, "queued": 3, "parked": 1}
        # The triggers exist and follow inserts, status changes (not other updates) and deletes.
        conn = db.connection()
        with db.atomic():
            _insert_run(conn, "run_new", "queued")
            conn.execute("UPDATE run SET status = 'running' WHERE run_id IN ('run_007', 'run_008')")
            conn.execute("UPDATE run SET steps = steps + 1 WHERE status = 'running'")
            conn.execute("UPDATE run SET status = 'done' WHERE run_id = 'run_000'")  # unchanged status
            conn.execute("DELETE FROM run WHERE status = 'failed'")
        assert _assert_exact(state_dir) == {"done": 5, "queued": 2, "running": 2, "parked": 1}
    finally:
        db.close()
    # Bare rows break other invariants (a done run without events, a running one without a claim).
    assert not [code for code in _codes(path) if code.startswith("run_count")]


def _codes(path: Path) -> list[str]:
    return [v["code"] for v in state_report.verify(path, time.time())["violations"]]


def test_verify_reports_a_counter_that_does_not_match_the_runs(state_dir) -> None:
    path = state_dir / "state.db"
    db = open_store(path)
    try:
        conn = db.connection()
        for n, status in enumerate(("queued", "queued", "parked")):  # no terminal run: it would need events
            _insert_run(conn, f"run_{n}", status)
    finally:
        db.close()
    assert _codes(path) == []

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE run_count SET n = n + 1 WHERE status = 'queued'")  # drifted up
        conn.execute("DELETE FROM run_count WHERE status = 'parked'")  # a status the counters lost
        conn.execute("INSERT INTO run_count (status, n) VALUES ('done', 4)")  # runs that do not exist
    finally:
        conn.close()
    report = state_report.verify(path, time.time())
    assert not report["ok"]
    details = sorted(v["detail"] for v in report["violations"] if v["code"] == "run_count_mismatch")
    assert details == ["run_count says 0 runs are parked but the run table holds 1",
                       "run_count says 3 runs are queued but the run table holds 2",
                       "run_count says 4 runs are done but the run table holds 0"]


def test_verify_reports_a_missing_trigger(state_dir) -> None:
    path = state_dir / "state.db"
    open_store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("DROP TRIGGER run_count_delete")
    finally:
        conn.close()
    assert _codes(path) == ["run_count_trigger_missing"]
