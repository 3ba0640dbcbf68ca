"""Fenced by time: a host whose lease expired writes nothing and starts nothing.

- SIGSTOP: a host paused past its lease and then continued commits nothing
  and starts no node (the writer checks the lease's expiry inside every
  transaction, not only its epoch); it notices the loss and stops itself.
- Disk full: when renewals fail only because the disk is full, the host does
  not exit. Workers keep their results and resend them; once the disk has
  room again the host takes the lease at a higher epoch (its lock file proves
  no other host took the state directory) and every run finishes; none is
  left stranded `running`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from testsupport import fill_up, per_thread, small_filesystem, sqlite_only
from wf import harness
from wf.harness import Oracle, edge_flow, rows, wait_for, wait_for_status

guard = harness.guard




#: Every table a run's progress writes to, with the column stamped with the writing batch's time.
_STAMPED = (("run_event", "created_at"), ("node_attempt", "started_at"), ("node_attempt", "finished_at"),
            ("worker_message", "created_at"), ("run_worker", "started_at"), ("run", "updated_at"))


def _written_after(state_dir: Path, run_id: str, moment: float) -> dict[str, int]:
    """Rows of the run stamped at or after `moment` (a batch's time is read before it starts, so a
    commit that was under way when the host was stopped is stamped before the stop)."""
    found = {}
    for table, column in _STAMPED:
        n = rows(state_dir, f"SELECT count(*) AS n FROM {table} WHERE run_id = ? AND {column} >= ?",
                 (run_id, moment))[0]["n"]
        if n:
            found[f"{table}.{column}"] = n
    return found


def _reading_its_socket(process: psutil.Process) -> bool:
    """Every thread of `process` sleeps in a read of a Unix stream socket (Linux: its wchan), or
    the process is gone (it starts nothing either)."""
    if not harness.alive(process):
        return True
    waits = [wchan.strip() for wchan in per_thread(process.pid, "wchan")]
    return not waits or all(wait in ("unix_stream_read_generic", "unix_stream_data_wait") for wait in waits)


def test_a_host_paused_past_its_lease_commits_nothing_and_starts_no_node(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    script = guard.host_script(state_dir, workflow=edge_flow("chain"), input={"oracle": str(oracle.path)},
                               lease_s=1.5)
    run_id = script.value("RUN")
    wait_for(lambda: len(oracle.entries()) >= 10, 20, "ten nodes to run")
    for process in script.descendants():
        guard.track(process.pid)
    workers = [p for p in script.descendants() if "piwf_actors.worker.main" in " ".join(p.cmdline())]
    assert workers, "the host has no worker"
    os.kill(script.pid, signal.SIGSTOP)
    stopped_at = time.time()
    try:
        # Whatever the worker was doing settles: it finishes its node (and the few more it may
        # pipeline) and then waits for the host's answer, blocked reading its socket. Blocked there
        # while the host sleeps, it can start no node; the oracle holds still from then on.
        def settled() -> bool:
            seen = len(oracle.entries())
            return (all(_reading_its_socket(worker) for worker in workers)
                    and len(oracle.entries()) == seen)

        wait_for(settled, 30, "the worker to block reading its socket, waiting for the paused host")
        before_oracle = len(oracle.entries())
        lease = rows(state_dir, "SELECT epoch, expires_at FROM host_state WHERE id = 1")[0]
        # Stay stopped until well past the lease's expiry.
        wait_for(lambda: time.time() > lease["expires_at"] + 1.0, 10, "the lease to expire")
    finally:
        os.kill(script.pid, signal.SIGCONT)
    assert script.proc.wait(20) is not None
    assert "lost" in script.log(), script.log()
    assert _written_after(state_dir, run_id, stopped_at) == {}, "the host wrote after it was continued"
    assert len(oracle.entries()) == before_oracle, "a node started after the lease expired"
    assert rows(state_dir, "SELECT epoch FROM host_state WHERE id = 1")[0]["epoch"] == lease["epoch"]
    # The next host finishes the run from its last committed node.
    host = guard.start_host(state_dir)
    assert wait_for_status(host, run_id, ("done", "failed", "parked"), timeout=60)["status"] == "done"


@pytest.fixture
def small_disk():
    with small_filesystem("12m") as mount:
        yield mount


@sqlite_only("the state database must live on the small tmpfs that fills up; a PostgreSQL server's full "
             "disk (SQLSTATE class 53) is classified as disk_full in tests/store/test_postgres.py")
@pytest.mark.timeout(360)  # three chains of 200 nodes after the outage: minutes on a loaded machine
def test_a_disk_filled_and_freed_during_runs_strands_nothing_and_the_host_keeps_running(
        guard, small_disk, tmp_path) -> None:
    oracle = Oracle(tmp_path / "oracle")
    state_dir = small_disk / "s"
    # A lease that a busy machine still renews in time (renewals every second): only the full disk
    # may make it run out.
    host = guard.start_host(state_dir, lease_s=3.0, max_workers=2, warm_workers=2, claim_lease_s=3.0)
    first_epoch = host.epoch
    runs = [host.start_run(edge_flow("chain"), {"oracle": str(oracle.path), "sleep": 0.01})["receipt"]["run_id"]
            for _ in range(3)]
    wait_for(lambda: len(oracle.entries()) >= 20, 20, "the runs to get going")
    filler = small_disk / "filler"
    fill_up(filler)
    try:
        # Renewals fail while the disk is full, until the lease runs out and is suspended (not lost).
        # The writer frees room by truncating its write-ahead log, and a renewal may take that room
        # before the next fill: how long the lease lasts is a race, so the disk stays full (the freed
        # room taken back at every poll) until the suspension is seen, not for a fixed time.
        def suspended() -> bool:
            fill_up(filler)
            lease = host.status()["lease"]
            assert not lease["lost"] and not host.stopped, (lease, host.stop_reason)
            return bool(lease["suspended"])

        wait_for(suspended, 120, "the lease to be suspended while the disk is full", poll=0.05)
    finally:
        filler.unlink()
    for run_id in runs:
        view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"), timeout=240)
        assert view["status"] == "done", view
    assert not host.stopped, host.stop_reason
    assert host.epoch > first_epoch
    assert rows(state_dir, "SELECT run_id FROM run WHERE status IN ('starting', 'running')") == []
    # A node whose result was committed never ran again.
    for run_id in runs:
        finished = [e["node_id"] for e in harness.events(state_dir, run_id) if e["kind"] == "node_finished"]
        assert len(finished) == len(set(finished)) == 200



def test_workers_of_a_host_that_died_exit_quietly(guard, state_dir) -> None:
    """A worker outlives its host's SIGKILL (it leads a session of its own); at its next word to the
    dead host it exits, without a traceback in the log."""
    oracle = Oracle(state_dir / "oracle")
    script = guard.host_script(state_dir, workflow=edge_flow("chain"), input={"oracle": str(oracle.path)})
    script.value("RUN")
    wait_for(lambda: len(oracle.entries()) >= 5, 20, "five nodes to run")
    workers = [p for p in script.descendants() if "piwf_actors.worker.main" in " ".join(p.cmdline())]
    assert workers
    for process in workers:
        guard.track(process.pid)
    script.sigkill()
    wait_for(lambda: not any(harness.alive(p) for p in workers), 15, "the orphaned workers to exit")
    log = script.log()
    assert "Traceback" not in log, log[-3000:]
