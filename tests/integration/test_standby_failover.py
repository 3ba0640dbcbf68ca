"""Failover between real `bin/piwf-host` processes on one shared database (docs/standby.md).

Two hosts, each with its own state directory (socket, lock), name one
database and a 2 s lease: every test runs twice, on a SQLite file
(`--database sqlite:///<shared>/state.db`) and on a PostgreSQL database of the
test session's cluster (`--database postgresql://…`), both in `make test`
(issue 12 asks for the failover to be shown on PostgreSQL). On PostgreSQL the
time fence and the lease times use the database server's clock.

- SIGKILL the active host in the middle of a six-node run (node n3 hangs on
  its first execution): the standby serves as active once the lease has
  run out (how soon: bench/latency.py), reaps the dead host's worker (same
  machine: pid + create time + machine id), recovers the run and finishes
  it; the oracle file (outside the database) shows no node committed before
  the kill ran again.
- SIGSTOP the active host past its lease: the standby takes over and
  finishes the run; SIGCONT the old host: it exits with status 1 and a
  "lease … lost" line, and the database is exactly what it was before it
  woke (every row of every table, save the new holder's heartbeat).
- SIGSTOP the only host past its lease, with no standby to take over, then
  SIGCONT: it stops itself with status 1 and the database is exactly what it
  was while it slept (the lease row included: its renewal is refused too);
  nothing it had in flight committed after its lease ran out.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testsupport import BIN_PIWF_HOST, all_threads_stopped, connect_database, database_rows
from wf import harness
from wf.harness import Oracle, alive, flow, wait_for, wait_for_oracle

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

LEASE_S = 2.0
#: A generous bound on a takeover (the lease, a poll, the start of the active parts; see bench/latency.py).
TAKEOVER_WAIT_S = LEASE_S + 60
NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]


@dataclass(frozen=True)
class Shared:
    """The database the hosts share, and a directory for the test's files (the oracle)."""

    url: str
    files: Path

    @property
    def postgres(self) -> bool:
        return self.url.startswith("postgresql://")


@pytest.fixture(params=["sqlite", "postgresql"])
def shared(request: pytest.FixtureRequest, other_state_dir: Path) -> Shared:
    if request.param == "postgresql":
        return Shared(request.getfixturevalue("pg_database").url, other_state_dir)
    return Shared(f"sqlite://{other_state_dir}/state.db", other_state_dir)


def rows(shared: Shared, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    return database_rows(shared.url, sql, params)


def committed_nodes(shared: Shared, run_id: str) -> list[str]:
    """Node ids whose result is committed (`node_finished` events), in order."""
    return [row["node_id"] for row in rows(shared, "SELECT node_id FROM run_event WHERE run_id = ? AND "
                                                   "kind = 'node_finished' ORDER BY seq", (run_id,))]


def _start(guard, state_dir: Path, shared: Shared, name: str):
    return guard.start_script(["--state-dir", str(state_dir / name), "--database", shared.url,
                               "--host-id", f"host-{name}", "--lease-s", str(LEASE_S), "--max-workers", "2",
                               "--log-level", "INFO"], command=[BIN_PIWF_HOST])


def _status(state_dir: Path) -> dict[str, Any] | None:
    """host.status from the host on `state_dir`, or None while nothing answers there."""
    try:
        with Client(state_dir, timeout=2, retries=0) as client:
            return client.status()
    except (HostNotRunning, OSError, TimeoutError):
        return None


def _wait_role(state_dir: Path, role: str, script, timeout: float = 20, waiting_for: str | None = None
               ) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        if script.proc.poll() is not None:
            pytest.fail(f"host exited with {script.proc.returncode}:\n{script.log()}")
        status = _status(state_dir)
        return status if status is not None and status["role"] == role else None

    what = waiting_for or f"{state_dir} to serve as {role}"
    return wait_for(check, timeout, lambda: f"{what}; log:\n{script.log()}", poll=0.05)


def _wait_run(state_dir: Path, run_id: str, timeout: float = 30) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        with Client(state_dir) as client:
            view = client.get(run_id)
        return view if view["status"] in ("done", "failed", "cancelled", "parked") else None

    return wait_for(done, timeout, f"run {run_id} to settle")


def _pair(guard, state_dir: Path, shared: Shared):
    """Host a (active), then host b (standby)."""
    a = _start(guard, state_dir, shared, "a")
    _wait_role(state_dir / "a", "active", a)
    b = _start(guard, state_dir, shared, "b")
    status = _wait_role(state_dir / "b", "standby", b)
    assert status["active"]["host_id"] == "host-a"
    return a, b


def test_sigkill_of_the_active_host_mid_run_the_standby_takes_over_and_finishes(
        guard, state_dir: Path, shared: Shared) -> None:
    oracle = Oracle(shared.files / "oracle")
    a, b = _pair(guard, state_dir, shared)
    with Client(state_dir / "a") as client:
        run_id = client.start(flow("six"), {"oracle": str(oracle.path), "hang": ["n3"], "sleep": 0.05})["run_id"]
    wait_for_oracle(oracle, "n3", timeout=20)
    committed_before = set(committed_nodes(shared, run_id))
    assert committed_before == {"n1", "n2"}
    seen_at_kill = len(oracle.nodes(run_id))
    old_workers = [w for w in a.descendants() if alive(w)]
    assert old_workers, "the active host has no worker"
    old_epoch = rows(shared, "SELECT epoch FROM host_state")[0]["epoch"]

    assert a.sigkill() < 0
    # How soon after the kill (lease + a poll): bench/latency.py; here only a generous bound.
    status = _wait_role(state_dir / "b", "active", b, timeout=TAKEOVER_WAIT_S,
                        waiting_for="the standby to take over after the active host's SIGKILL")
    assert status["epoch"] == old_epoch + 1 and status["active"]["host_id"] == "host-b"
    # The dead host's worker (own session, same machine) was reaped by the new active host.
    wait_for(lambda: not any(alive(w) for w in old_workers), 5, "the dead host's workers to be reaped")
    assert "reaped orphan worker" in b.log()

    view = _wait_run(state_dir / "b", run_id)
    assert view["status"] == "done", view
    nodes = oracle.nodes(run_id)
    counts = oracle.counts(run_id)
    assert set(counts) == set(NODES), nodes
    rerun = [node for node in nodes[seen_at_kill:] if node in committed_before]
    assert not rerun, f"{rerun} ran again although committed before the kill (oracle: {nodes})"
    assert counts["n3"] == 2 and all(counts[n] == 1 for n in NODES if n != "n3"), counts
    unreleased = rows(shared, "SELECT pid FROM child_process WHERE released_at IS NULL AND host_epoch = ?",
                      (old_epoch,))
    assert unreleased == []


# --- SIGSTOP past the lease ----------------------------------------------------------------------


def _tables(conn: Any, shared: Shared) -> list[str]:
    if shared.postgres:
        sql = ("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() "
               "AND table_type = 'BASE TABLE' ORDER BY table_name")
    else:
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
    return [row["name"] for row in conn.execute(sql).fetchall()]


def _snapshot(shared: Shared, *, heartbeat: bool = False) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order, read in one read transaction; the lease row
    without the holder's heartbeat unless `heartbeat`."""
    with connect_database(shared.url) as conn:
        if shared.postgres:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        else:
            conn.execute("BEGIN")
        try:
            found = {}
            for table in _tables(conn, shared):
                if table == "host_state" and not heartbeat:
                    sql = "SELECT epoch, host_id, token_hash, pid, started_at, released_at FROM host_state"
                else:
                    sql = f'SELECT * FROM "{table}"'
                found[table] = sorted((tuple(dict(row).values()) for row in conn.execute(sql).fetchall()),
                                      key=repr)
            return found
        finally:
            conn.execute("COMMIT")


def _writes_locked(shared: Shared) -> bool:
    """True when some connection holds a write transaction right now (SQLite: the file's write lock;
    PostgreSQL: a session whose transaction has written, so it holds row locks another host may need)."""
    if shared.postgres:
        return bool(rows(shared, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL")[0]["n"])
    conn = sqlite3.connect(shared.url.removeprefix("sqlite://"), timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def _pause_outside_a_transaction(pid: int, shared: Shared) -> None:
    """SIGSTOP `pid` at a moment it holds no write transaction. (A host paused inside one blocks every
    other writer of a SQLite file — on PostgreSQL, of the rows it locked — until it wakes or dies;
    docs/standby.md says so. That case is not this test's.)"""
    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: all_threads_stopped(pid), 30, f"every thread of host {pid} to be stopped by SIGSTOP")
        if not _writes_locked(shared):
            return
        os.kill(pid, signal.SIGCONT)
        # Running again: let it end the transaction it was paused in before trying the next pause.
        wait_for(lambda: not _writes_locked(shared), 30, f"host {pid}, continued, to end its write transaction")
    pytest.fail("could not pause the host outside a write transaction")


def test_a_paused_active_host_that_lost_its_lease_writes_nothing_and_exits(
        guard, state_dir: Path, shared: Shared) -> None:
    oracle = Oracle(shared.files / "oracle")
    a, b = _pair(guard, state_dir, shared)
    with Client(state_dir / "a") as client:
        run_id = client.start(flow("six"), {"oracle": str(oracle.path), "hang": ["n2"], "sleep": 0.05})["run_id"]
    wait_for_oracle(oracle, "n2", timeout=20)
    old_epoch = rows(shared, "SELECT epoch FROM host_state")[0]["epoch"]

    _pause_outside_a_transaction(a.pid, shared)
    try:
        status = _wait_role(state_dir / "b", "active", b, timeout=LEASE_S + 10)
        assert status["epoch"] == old_epoch + 1
        view = _wait_run(state_dir / "b", run_id)
        assert view["status"] == "done", view
        # The new active host is idle now; wait until the database holds still (but for its heartbeat).
        quiet = [_snapshot(shared)]

        def settled() -> bool:
            quiet.append(_snapshot(shared))
            return quiet[-1] == quiet[-2]

        wait_for(settled, 10, "the database to hold still", poll=0.5)
        before = quiet[-1]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    code = a.proc.wait(LEASE_S + 20)
    assert code == 1, f"the woken host exited with {code}:\n{a.log()}"
    log_text = a.log()
    assert f"lease for epoch {old_epoch} lost" in log_text, log_text
    assert f"piwf-host: stopped: lease for epoch {old_epoch} lost" in log_text
    after = _snapshot(shared)
    changed = {table for table in before if before[table] != after.get(table)}
    assert not changed, {t: (before[t], after.get(t)) for t in changed}
    assert after["host_state"][0][:2] == (old_epoch + 1, "host-b")
    # Everything the old epoch registered is settled by the new host, not by the woken one.
    assert rows(shared, "SELECT pid FROM child_process WHERE released_at IS NULL AND host_epoch = ?",
                (old_epoch,)) == []
    # The standby kept serving throughout.
    assert b.proc.poll() is None and _status(state_dir / "b")["role"] == "active"


def test_a_paused_host_without_a_standby_wakes_past_its_lease_and_commits_nothing(
        guard, state_dir: Path, shared: Shared) -> None:
    """No other host takes the lease, so nothing but the time fence stands between the woken host and
    the database: its epoch is still the current one. Whatever it sends after waking — the lease
    renewal, its claim renewals, the result its worker finished while it slept — is judged against
    the lease's expiry by the clock read inside the transaction (the database server's
    `clock_timestamp()` on PostgreSQL) and refused, and its lease actor stops it. Which of them
    reaches the writer before the host stops varies; the contract checked is the database's: not one
    row differs. (The fence itself, with hosts' clocks an hour off the database's, is
    tests/store/test_postgres.py::test_the_time_fence_and_lease_times_use_the_databases_clock.)"""
    oracle = Oracle(shared.files / "oracle")
    a = _start(guard, state_dir, shared, "a")
    _wait_role(state_dir / "a", "active", a)
    with Client(state_dir / "a") as client:
        # n1 sleeps 3 s: its worker finishes while the host sleeps and reports to it on waking.
        run_id = client.start(flow("six"), {"oracle": str(oracle.path), "sleep": 3.0})["run_id"]
    wait_for_oracle(oracle, "n1", timeout=20)
    n1_started = time.time()
    epoch = rows(shared, "SELECT epoch FROM host_state")[0]["epoch"]

    _pause_outside_a_transaction(a.pid, shared)
    try:
        lease = rows(shared, "SELECT expires_at FROM host_state")[0]["expires_at"]
        # Past the lease by the database's own clock (on SQLite: this machine's, the hosts' clock),
        # and past n1's sleep: its worker has sent the result into the sleeping host's socket.
        clock = ("SELECT CAST(extract(epoch from clock_timestamp()) AS DOUBLE PRECISION) AS now" if shared.postgres
                 else "SELECT CAST(strftime('%s', 'now') AS REAL) AS now")
        wait_for(lambda: rows(shared, clock)[0]["now"] > lease + 1.0 and time.time() > n1_started + 3.5,
                 LEASE_S + 15, "the paused host's lease to run out and n1 to end", poll=0.1)
        before = _snapshot(shared, heartbeat=True)
        assert committed_nodes(shared, run_id) == []
    finally:
        os.kill(a.pid, signal.SIGCONT)
    code = a.proc.wait(LEASE_S + 20)
    assert code == 1, f"the woken host exited with {code}:\n{a.log()}"
    assert f"piwf-host: stopped: lease for epoch {epoch} lost" in a.log()
    after = _snapshot(shared, heartbeat=True)
    changed = {table for table in before if before[table] != after.get(table)}
    assert not changed, {t: (before[t], after.get(t)) for t in changed}
    row = rows(shared, "SELECT epoch, host_id, expires_at FROM host_state")[0]
    assert (row["epoch"], row["host_id"], row["expires_at"]) == (epoch, "host-a", lease)  # not renewed, not released
    assert oracle.nodes(run_id) == ["n1"]  # no node started after the wake
