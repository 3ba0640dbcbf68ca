"""Runner hosts that share the queue (docs/runners.md), with real `bin/piwf-host` processes.

- PostgreSQL (a database of the session's cluster, tests/pg_cluster.py): the active host and two
  runner hosts (2 s leases) execute 200 runs of `shared` (three compute nodes and a non-idempotent
  action, each counted in an oracle file outside the database). One runner is SIGKILLed while it
  holds runs: every run ends `done`, or `parked` on an ambiguous effect (only a run the killed
  runner held); no node committed before the kill ran again; the killed runner's claims were
  recovered by the active host once its lease ran out (how soon: bench/latency.py) and its
  workers reaped; `run.get` names attempts executed by each of the three hosts.
- PostgreSQL: a runner host paused (SIGSTOP) past its lease loses its run to the active host;
  woken (SIGCONT) it writes nothing (every row of every table is as it was) and exits with 1.
- SQLite: the active host and two runner hosts on one shared SQLite file (no SKIP LOCKED: the
  file's write lock makes claims take turns) finish every run, each runner executing some.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import BIN_PIWF_HOST, all_threads_stopped
from wf import harness
from wf.harness import Oracle, alive, flow, wait_for

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

LEASE_S = 2.0
NODES = ("c1", "c2", "act", "c3")
SETTLED = ("done", "failed", "cancelled", "parked")


# --- the database, read by the test itself -------------------------------------------------------


@contextlib.contextmanager
def _connect(database: str) -> Iterator[Any]:
    if database.startswith("postgresql://"):
        import psycopg

        from piwf_actors.store.engines.pg_connection import PgConnection
        from piwf_actors.store.engines.postgresql import POSTGRESQL

        raw = psycopg.connect(database, autocommit=True)
        try:
            yield PgConnection(raw, POSTGRESQL)
        finally:
            raw.close()
    else:
        conn = sqlite3.connect(f"file:{database.removeprefix('sqlite://')}?mode=ro", uri=True, timeout=10)
        try:
            yield conn
        finally:
            conn.close()


def _rows(database: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with _connect(database) as conn:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]


def _committed(database: str, run_ids: list[str]) -> set[tuple[str, str]]:
    """(run, node) pairs whose result is committed (`node_finished` events)."""
    found: set[tuple[str, str]] = set()
    for run_id in run_ids:
        found |= {(run_id, node) for (node,) in _rows(
            database, "SELECT node_id FROM run_event WHERE run_id = ? AND kind = 'node_finished'", (run_id,))}
    return found


def _snapshot(database: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, but the active host's heartbeat and expiry (it keeps renewing)."""
    with _connect(database) as conn:
        if database.startswith("postgresql://"):
            tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_catalog.pg_tables "
                                                 "WHERE schemaname = current_schema() ORDER BY tablename")]
        else:
            tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                 "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        found = {}
        for table in tables:
            if table == "host_state":
                found[table] = [tuple(r) for r in conn.execute(
                    "SELECT epoch, host_id, token_hash, pid, started_at, released_at FROM host_state").fetchall()]
            else:
                found[table] = sorted((tuple(r) for r in conn.execute(f'SELECT * FROM "{table}"').fetchall()),
                                      key=repr)
        return found


# --- hosts -----------------------------------------------------------------------------------------


def _start(guard, state_dir: Path, database: str, name: str, *extra: str, workers: int = 2):
    return guard.start_script(["--state-dir", str(state_dir / name), "--database", database, "--host-id", name,
                               "--lease-s", str(LEASE_S), "--max-workers", str(workers), "--log-level", "INFO",
                               *extra], command=[BIN_PIWF_HOST])


def _status(state_dir: Path) -> dict[str, Any] | None:
    try:
        with Client(state_dir, timeout=2, retries=0) as client:
            return client.status()
    except (HostNotRunning, OSError, TimeoutError):
        return None


def _wait_role(state_dir: Path, role: str, script, timeout: float = 30) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        if script.proc.poll() is not None:
            pytest.fail(f"host exited with {script.proc.returncode}:\n{script.log()}")
        status = _status(state_dir)
        return status if status is not None and status["role"] == role else None

    return wait_for(check, timeout, lambda: f"{state_dir} to serve as {role}; log:\n{script.log()}", poll=0.05)


def _trio(guard, state_dir: Path, database: str):
    """The active host, then two runner hosts; returns (active, runner-1, runner-2)."""
    active = _start(guard, state_dir, database, "host-a")
    _wait_role(state_dir / "host-a", "active", active)
    runners = [_start(guard, state_dir, database, f"runner-{i}", "--role", "runner") for i in (1, 2)]
    for index, runner in enumerate(runners, 1):
        status = _wait_role(state_dir / f"runner-{index}", "runner", runner)
        assert status["runner"]["runner_id"] == f"runner-{index}" and status["runner"]["epoch"] == 1
    return active, *runners


def _start_runs(state_dir: Path, count: int, oracle: Oracle, **input: Any) -> list[str]:
    """Start `count` runs as a client should: a start answered `unavailable` (its batch lost every retry
    to the hosts' conflicting claims, which a loaded machine makes likelier) is sent again under its
    idempotency key until it is accepted."""
    with Client(state_dir / "host-a") as client:
        return [_start_one(client, {"oracle": str(oracle.path), **input}) for _ in range(count)]


def _start_one(client: Client, run_input: dict[str, Any]) -> str:
    key = f"start-{uuid.uuid4().hex}"
    deadline = time.monotonic() + 30
    while True:
        response = client.request("run.start", {"workflow": flow("shared"), "input": run_input}, idempotency_key=key)
        if response.ok:
            return response.receipt["run_id"]
        if response.outcome != "unavailable" or time.monotonic() >= deadline:
            pytest.fail(f"run.start: {response.outcome}: {response.error}")


def _wait_settled(state_dir: Path, run_ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    views: dict[str, dict[str, Any]] = {}

    def settled() -> bool:
        with Client(state_dir / "host-a") as client:
            for run_id in run_ids:
                if run_id not in views:
                    view = client.get(run_id)
                    if view["status"] in SETTLED:
                        views[run_id] = view
        return len(views) == len(run_ids)

    wait_for(settled, timeout, lambda: f"every run to settle ({len(views)} of {len(run_ids)})", poll=0.2)
    return views


def _executors(views: dict[str, dict[str, Any]]) -> set[str]:
    return {by for view in views.values() for node in view["nodes"] for by in node.get("executors", [])}


# --- the tests --------------------------------------------------------------------------------------


@pytest.fixture
def pg_url(pg_database) -> str:
    return pg_database.url


def test_two_runner_hosts_and_the_active_host_share_200_runs_and_survive_a_runner_sigkill(
        guard, state_dir: Path, other_state_dir: Path, pg_url: str) -> None:
    oracle = Oracle(other_state_dir / "oracle")
    active, runner_1, runner_2 = _trio(guard, state_dir, pg_url)
    run_ids = _start_runs(state_dir, 200, oracle, sleep=0.02)

    # Kill runner-1 while it holds runs, a good way into the queue.
    def holding() -> list[str] | None:
        done = _rows(pg_url, "SELECT count(*) FROM run WHERE status = 'done'")[0][0]
        held = [r for (r,) in _rows(pg_url, "SELECT run_id FROM run_claim WHERE runner_id = 'runner-1'")]
        return held if done >= 40 and held else None

    wait_for(holding, 60, "runner-1 to hold runs after 40 runs are done", poll=0.01)
    workers = [w for w in runner_1.descendants() if alive(w)]
    assert runner_1.sigkill() < 0
    # What the dead runner held and had committed: nobody else may touch those runs before recovery.
    held = [r for (r,) in _rows(pg_url, "SELECT run_id FROM run_claim WHERE runner_id = 'runner-1'")]
    assert held, "runner-1 held no run when it was killed"
    committed_before = _committed(pg_url, held)

    def recovered() -> bool:
        return not _rows(pg_url, "SELECT run_id FROM run_claim WHERE runner_id = 'runner-1'")

    # How soon after the kill (the runner lease, then a sweep): bench/latency.py; here a generous bound.
    wait_for(recovered, LEASE_S + 60,
             lambda: f"the active host to recover the SIGKILLed runner-1's claims:\n{active.log()}")
    # The claims go with the recovery's commit; its log line follows when the watch reads the result.
    wait_for(lambda: "of runner host(s) runner-1#1 whose lease is gone" in active.log(), 10,
             lambda: f"the active host to log the recovery of runner-1's runs:\n{active.log()}")
    wait_for(lambda: not any(alive(w) for w in workers), 10, "the dead runner's workers to be reaped")

    views = _wait_settled(state_dir, run_ids, 120)
    counts = {run_id: oracle.counts(run_id) for run_id in run_ids}
    for run_id, view in views.items():
        if view["status"] == "parked":
            assert run_id in held and view["park_reason"] == "ambiguous_effect", view
            # Cut off after its reservation was committed: it may have acted or not (a kill between
            # the reservation and the function's first line leaves no oracle line), never twice,
            # and nothing after it ran.
            assert counts[run_id]["act"] <= 1 and "c3" not in counts[run_id], (run_id, counts[run_id])
            continue
        assert view["status"] == "done", view
        assert set(counts[run_id]) == set(NODES), (run_id, counts[run_id])
        if run_id not in held:
            assert all(n == 1 for n in counts[run_id].values()), (run_id, counts[run_id])
    for run_id, node in committed_before:
        assert counts[run_id][node] == 1, f"{node} of {run_id} ran again after it was committed: {counts[run_id]}"
    for run_id in held:  # a node cut off by the kill ran at most once more
        assert all(n <= 2 for n in counts[run_id].values()), (run_id, counts[run_id])
    assert {"host-a", "runner-1", "runner-2"} <= _executors(views)
    # Every run the dead runner held went on elsewhere (or parked on its ambiguous effect).
    for run_id in held:
        if views[run_id]["status"] == "done":
            assert set(_executors({run_id: views[run_id]})) - {"runner-1"}, views[run_id]
    # The survivors are still serving, and the active host lists the live runner host.
    assert active.proc.poll() is None and runner_2.proc.poll() is None
    status = _status(state_dir / "host-a")
    assert [r["runner_id"] for r in status["runners"] if r["live"]] == ["runner-2"]
    unreleased = _rows(pg_url, "SELECT pid FROM child_process WHERE released_at IS NULL AND runner_id = 'runner-1'")
    assert unreleased == []


def _idle_in_transaction(database: str) -> int:
    return _rows(database, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND state LIKE 'idle in transaction%'")[0][0]


def _pause_outside_a_transaction(pid: int, database: str) -> None:
    """SIGSTOP `pid` at a moment none of its sessions is inside a transaction (a paused open one
    would hold its row locks until it woke)."""
    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: all_threads_stopped(pid), 30, f"every thread of runner {pid} to be stopped by SIGSTOP")
        if not _idle_in_transaction(database):
            return
        os.kill(pid, signal.SIGCONT)
        # Running again: let it end the transaction it was paused in before trying the next pause.
        wait_for(lambda: not _idle_in_transaction(database), 30,
                 f"runner {pid}, continued, to end its transaction")
    pytest.fail("could not pause the runner outside a transaction")


@pytest.mark.slow  # kept out of make test's 10-minute budget: make test-slow (CI runs it too)
def test_a_runner_paused_past_its_lease_writes_nothing_and_exits(
        guard, state_dir: Path, other_state_dir: Path, pg_url: str) -> None:
    # The active host with one worker, kept busy by a run of its own; then the runner takes the next.
    active = _start(guard, state_dir, pg_url, "host-a", workers=1)
    _wait_role(state_dir / "host-a", "active", active)
    busy = Oracle(other_state_dir / "busy")
    oracle = Oracle(other_state_dir / "oracle")
    (blocker,) = _start_runs(state_dir, 1, busy, hang=["c1"], hang_s=12)
    harness.wait_for_oracle(busy, "c1")
    runner = _start(guard, state_dir, pg_url, "runner-1", "--role", "runner")
    _wait_role(state_dir / "runner-1", "runner", runner)
    (run_id,) = _start_runs(state_dir, 1, oracle, hang=["c2"], hang_s=30)
    harness.wait_for_oracle(oracle, "c2")
    assert _rows(pg_url, "SELECT runner_id FROM run_claim WHERE run_id = ?", (run_id,)) == [("runner-1",)]

    _pause_outside_a_transaction(runner.pid, pg_url)
    try:
        wait_for(lambda: not _rows(pg_url, "SELECT 1 FROM run_claim WHERE run_id = ? AND runner_id = 'runner-1'",
                                   (run_id,)), LEASE_S + 10, "the active host to recover the paused runner's run")
        # The run goes on at the active host once its own run is done; wait until everything settled.
        _wait_settled(state_dir, [blocker, run_id], 60)
        quiet = [_snapshot(pg_url)]

        def still() -> bool:
            quiet.append(_snapshot(pg_url))
            return quiet[-1] == quiet[-2]

        wait_for(still, 15, "the database to hold still", poll=0.5)
        before = quiet[-1]
    finally:
        os.kill(runner.pid, signal.SIGCONT)
    code = runner.proc.wait(LEASE_S + 20)
    assert code == 1, f"the woken runner exited with {code}:\n{runner.log()}"
    assert "piwf-host: stopped: runner lease of runner-1 (epoch 1) lost" in runner.log(), runner.log()
    after = _snapshot(pg_url)
    changed = {table for table in before if before[table] != after.get(table)}
    assert not changed, {t: (before[t], after.get(t)) for t in changed}
    with Client(state_dir / "host-a") as client:
        view = client.get(run_id)
    assert view["status"] == "done"
    c2 = next(node for node in view["nodes"] if node["node_id"] == "c2")
    assert c2["executors"] == ["host-a"] and oracle.counts(run_id)["c2"] == 2  # cut off once, then run here
    c1 = next(node for node in view["nodes"] if node["node_id"] == "c1")
    assert c1["executors"] == ["runner-1"] and oracle.counts(run_id)["c1"] == 1  # committed by the runner: kept


def test_runner_hosts_share_a_sqlite_file_with_the_active_host(guard, state_dir: Path,
                                                               other_state_dir: Path) -> None:
    database = f"sqlite://{other_state_dir}/state.db"
    oracle = Oracle(other_state_dir / "oracle")
    active, *_runners = _trio(guard, state_dir, database)
    run_ids = _start_runs(state_dir, 40, oracle, sleep=0.05)
    views = _wait_settled(state_dir, run_ids, 90)
    assert {view["status"] for view in views.values()} == {"done"}
    assert all(oracle.counts(run_id)[node] == 1 for run_id in run_ids for node in NODES)
    assert {"host-a", "runner-1", "runner-2"} <= _executors(views)
    status = _status(state_dir / "host-a")
    assert sorted(r["runner_id"] for r in status["runners"] if r["live"]) == ["runner-1", "runner-2"]
    # A runner host refuses mutations, naming the active host.
    with Client(state_dir / "runner-1") as client:
        answer = client.request("run.start", {"workflow": flow("shared"), "input": {"oracle": str(oracle.path)}})
    assert answer.outcome == "unavailable" and "active host host-a" in (answer.error or ""), answer
    assert active.proc.poll() is None
