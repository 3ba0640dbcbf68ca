"""Failover between real `bin/piwf-host` processes on one shared database (docs/standby.md).

Two hosts, each with its own state directory (socket, lock), name one
database with `--database sqlite:///<shared>/state.db` and a 2 s lease.

- SIGKILL the active host in the middle of a six-node run (node n3 hangs on
  its first execution): the standby serves as active within lease + 2 s,
  reaps the dead host's worker (same machine: pid + create time + machine
  id), recovers the run and finishes it; the oracle file (outside the
  database) shows no node committed before the kill ran again.
- SIGSTOP the active host past its lease: the standby takes over and
  finishes the run; SIGCONT the old host: it exits with status 1 and a
  "lease … lost" line, and the database is exactly what it was before it
  woke (every row of every table, save the new holder's heartbeat).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from testsupport import BIN_PIWF_HOST
from wf import harness
from wf.harness import Oracle, alive, committed_nodes, flow, rows, wait_for, wait_for_oracle

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

LEASE_S = 2.0
NODES = ["n1", "n2", "n3", "n4", "n5", "n6"]


def _start(guard, state_dir: Path, shared: Path, name: str):
    return guard.start_script(["--state-dir", str(state_dir / name), "--database", f"sqlite://{shared}/state.db",
                               "--host-id", f"host-{name}", "--lease-s", str(LEASE_S), "--max-workers", "2",
                               "--log-level", "INFO"], command=[BIN_PIWF_HOST])


def _status(state_dir: Path) -> dict[str, Any] | None:
    """host.status from the host on `state_dir`, or None while nothing answers there."""
    try:
        with Client(state_dir, timeout=2, retries=0) as client:
            return client.status()
    except (HostNotRunning, OSError, TimeoutError):
        return None


def _wait_role(state_dir: Path, role: str, script, timeout: float = 20) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        if script.proc.poll() is not None:
            pytest.fail(f"host exited with {script.proc.returncode}:\n{script.log()}")
        status = _status(state_dir)
        return status if status is not None and status["role"] == role else None

    return wait_for(check, timeout, lambda: f"{state_dir} to serve as {role}; log:\n{script.log()}", poll=0.05)


def _wait_run(state_dir: Path, run_id: str, timeout: float = 30) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        with Client(state_dir) as client:
            view = client.get(run_id)
        return view if view["status"] in ("done", "failed", "cancelled", "parked") else None

    return wait_for(done, timeout, f"run {run_id} to settle")


def _pair(guard, state_dir: Path, shared: Path):
    """Host a (active), then host b (standby)."""
    a = _start(guard, state_dir, shared, "a")
    _wait_role(state_dir / "a", "active", a)
    b = _start(guard, state_dir, shared, "b")
    status = _wait_role(state_dir / "b", "standby", b)
    assert status["active"]["host_id"] == "host-a"
    return a, b


def test_sigkill_of_the_active_host_mid_run_the_standby_takes_over_and_finishes(
        guard, state_dir: Path, other_state_dir: Path) -> None:
    shared = other_state_dir
    oracle = Oracle(shared / "oracle")
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
    killed_at = time.monotonic()
    status = _wait_role(state_dir / "b", "active", b, timeout=LEASE_S + 10)
    took = time.monotonic() - killed_at
    assert took <= LEASE_S + 2, f"the standby served as active {took:.2f} s after the kill (lease {LEASE_S} s)"
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


def _snapshot(shared: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order; the lease row without the holder's heartbeat."""
    conn = sqlite3.connect(f"file:{shared / 'state.db'}?mode=ro", uri=True, timeout=10)
    try:
        tables = [name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        found = {}
        for table in tables:
            if table == "host_state":
                found[table] = conn.execute("SELECT epoch, host_id, token_hash, pid, started_at, released_at "
                                            "FROM host_state").fetchall()
            else:
                found[table] = sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
        return found
    finally:
        conn.close()


def _writes_locked(shared: Path) -> bool:
    """True when some connection holds the database's write lock right now."""
    conn = sqlite3.connect(str(shared / "state.db"), timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def _pause_outside_a_transaction(pid: int, shared: Path) -> None:
    """SIGSTOP `pid` at a moment it holds no write transaction. (A host paused inside one blocks every
    other writer of a SQLite file until it wakes or dies; docs/standby.md says so. That case is not
    this test's.)"""
    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.05)  # let the stop land
        if not _writes_locked(shared):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    pytest.fail("could not pause the host outside a write transaction")


def test_a_paused_active_host_that_lost_its_lease_writes_nothing_and_exits(
        guard, state_dir: Path, other_state_dir: Path) -> None:
    shared = other_state_dir
    oracle = Oracle(shared / "oracle")
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
