"""A full disk that gets some room back: the runs get the room, not the write-ahead log.

On a 4 MiB filesystem filled while six runs go, then given back 1.5 MB: before writing resumes the
writer checkpoints and truncates the WAL, so the freed space goes to the runs, every run finishes,
and `state.status` said meanwhile that the disk was why nothing moved. (Without the truncation the
WAL grew into the freed space and filled the disk again: nothing moved for good.)
"""

from __future__ import annotations

import os

from testsupport import fill_up, small_filesystem, sqlite_only
from wf import harness
from wf.harness import Oracle, edge_flow, rows, wait_for, wait_for_status

from piwf_actors.client import Client

guard = harness.guard

FREED = 1_500_000


@sqlite_only("the state database must live on the small tmpfs that fills up (PostgreSQL keeps its own WAL)")
def test_a_disk_filled_and_partly_freed_gives_the_room_to_the_runs_not_to_the_wal(guard, tmp_path) -> None:
    oracle = Oracle(tmp_path / "oracle")
    with small_filesystem("4m") as disk:
        state_dir = disk / "s"
        host = guard.start_host(state_dir, lease_s=3.0, max_workers=3, warm_workers=3, claim_lease_s=3.0)
        runs = [host.start_run(edge_flow("chain"), {"oracle": str(oracle.path), "sleep": 0.005})["receipt"]["run_id"]
                for _ in range(6)]
        wait_for(lambda: len(oracle.entries()) >= 60, 30, "the runs to get going")
        filler = disk / "filler"
        fill_up(filler)
        try:
            failed = host.writer.stats().failed_batches
            wait_for(lambda: host.writer.stats().failed_batches > failed + 3, 30, "writes to fail: disk full")
            with Client(state_dir) as client:
                status = client.request("state.status").receipt
            assert status["disk_full"]["since"] is not None, status
            assert "full" in status["disk_full"]["detail"], status
            assert not host.stopped, host.stop_reason
        finally:
            # Give 1.5 MB back, keep the rest full.
            os.truncate(filler, max(0, os.stat(filler).st_size - FREED))
        for run_id in runs:
            view = wait_for_status(host, run_id, ("done", "failed", "cancelled", "parked"), timeout=180)
            assert view["status"] == "done", view
        assert not host.stopped, host.stop_reason
        assert rows(state_dir, "SELECT run_id FROM run WHERE status IN ('starting', 'running')") == []
        with Client(state_dir) as client:
            assert client.request("state.status").receipt["disk_full"] is None
        for run_id in runs:  # a node whose result was committed never ran again
            finished = [e["node_id"] for e in harness.events(state_dir, run_id) if e["kind"] == "node_finished"]
            assert len(finished) == len(set(finished)) == 200
        host.stop()
