"""A clean host stop in the middle of runs: nothing is left running, nothing is lost.

- stopping a host while a node runs kills that worker and re-queues the run
  whatever its progress (a clean stop is not the run's fault); the next host
  resumes it from its last committed node;
- stopping a host while another run's runner is handing its worker back must
  not leave that worker running.
"""

from __future__ import annotations

import logging
import threading

from wf import harness
from wf.harness import (
    Oracle,
    active_worker,
    alive,
    events,
    flow,
    kill_group_and_process,
    rows,
    wait_for,
    wait_for_oracle,
    wait_for_status,
)

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

SETTLED = ("done", "failed", "cancelled", "parked")


def test_stop_mid_node_requeues_without_parking_and_the_next_host_finishes(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    first = guard.start_host(state_dir)
    run_id = first.start_run(flow("four"), {"oracle": str(oracle.path), "hang": ["p1"]})["receipt"]["run_id"]
    wait_for_oracle(oracle, "p1")  # the first node of the launch: no progress yet
    worker = guard.track(active_worker(first, run_id))
    first.stop()
    assert not alive(worker)
    view = rows(state_dir, "SELECT status, park_reason FROM run WHERE run_id = ?", (run_id,))[0]
    assert (view["status"], view["park_reason"]) == ("queued", None)
    requeued = [e for e in events(state_dir, run_id) if e["kind"] == "run_requeued"]
    assert [e["payload"]["runner_outcome"] for e in requeued] == ["host_stopping"]
    assert rows(state_dir, "SELECT count(*) AS n FROM run_claim")[0]["n"] == 0
    assert rows(state_dir, "SELECT host_id FROM host_state")[0]["host_id"] is None  # lease released

    second = guard.start_host(state_dir)
    assert second.epoch == first.epoch + 1
    view = wait_for_status(second, run_id, SETTLED)
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == {"p1": 2, "p2": 1, "p3": 1, "p4": 1}


def test_stop_while_another_runner_hands_back_its_worker_leaves_no_worker(guard, state_dir, caplog) -> None:
    caplog.set_level(logging.INFO, logger="piwf_actors.worker.termination")
    oracle = Oracle(state_dir / "oracle")
    gate = state_dir / "gate"
    # A grace period long enough for the other run to finish while the first worker is being killed.
    host = guard.start_host(state_dir, reap_grace_s=1.0)
    slow = host.start_run(flow("stubborn"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "stubborn")
    quick = host.start_run(flow("gated"), {"oracle": str(oracle.path), "gate": str(gate)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "gated")
    slow_worker = guard.track(active_worker(host, slow))
    quick_worker = guard.track(active_worker(host, quick))

    stopper = threading.Thread(target=host.stop, name="test-host-stop")
    stopper.start()
    try:
        # The scheduler is stopping the first runner (its worker ignores SIGTERM for the grace period)…
        wait_for(lambda: any(f"terminating process tree of pid {slow_worker.pid}" in r.getMessage()
                             for r in caplog.records), 10, "the stop to reach the first worker")
        # …when the second run ends and its runner hands the worker back.
        gate.touch()
    finally:
        stopper.join(30)
    assert not stopper.is_alive()
    assert rows(state_dir, "SELECT status FROM run WHERE run_id = ?", (quick,))[0]["status"] == "done"
    assert not alive(slow_worker)
    try:
        wait_for(lambda: not alive(quick_worker), 2,
                 f"the finished run's worker {quick_worker.pid} to be gone after host.stop()")
    finally:
        kill_group_and_process(quick_worker)  # reported above; keep the teardown check about the rest
