"""The host-side watchdog: what the worker cannot stop, its supervisor does.

- A node blocked where the worker's own timeout cannot reach it (SIGALRM
  blocked, then a long sleep) is killed from outside after its `timeout_s`
  plus the grace period: the worker's tree goes, the node fails with
  `timeout`, and the run routes that failure like any other.
- A worker that never becomes ready (here: the workflow snapshot hangs while
  it loads, once) is replaced after the start-up timeout and the run is
  requeued; the next launch finishes it.
"""

from __future__ import annotations

import psutil
from wf import harness
from wf.harness import Oracle, active_worker, alive, edge_flow, rows, wait_for, wait_for_oracle, wait_for_status

guard = harness.guard

TERMINAL = ("done", "failed", "cancelled", "parked")



def test_a_node_stuck_where_its_worker_cannot_interrupt_it_is_killed_by_the_watchdog(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir, max_workers=1, watchdog_grace_s=0.5)
    run_id = host.start_run(edge_flow("stuck"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "stuck")
    worker = psutil.Process(active_worker(host, run_id))
    guard.track(worker.pid)
    view = wait_for_status(host, run_id, TERMINAL, timeout=15)
    assert view["status"] == "failed", view
    node = {n["node_id"]: n for n in view["nodes"]}["stuck"]
    assert node["status"] == "failed" and node["error"]["code"] == "timeout", node
    assert "timed out" in view["error"]["message"], view["error"]
    wait_for(lambda: not alive(worker), 5, "the stuck worker to be killed")
    assert oracle.counts(run_id) == {"stuck": 1}  # routed as a failure, not run again
    outcomes = [w["outcome"] for w in rows(state_dir, "SELECT outcome FROM run_worker WHERE run_id = ?", (run_id,))]
    assert "timedOut" in outcomes, outcomes
    # The slot is free again: another run goes through.
    other = host.start_run(edge_flow("fresh"), {"oracle": str(oracle.path), "sleep": 0})["receipt"]["run_id"]
    assert wait_for_status(host, other, TERMINAL)["status"] == "done"


def test_a_worker_that_never_becomes_ready_is_replaced_and_the_run_requeued(guard, state_dir, monkeypatch) -> None:
    oracle = Oracle(state_dir / "oracle")
    flag = state_dir / "hang-flag"
    monkeypatch.setenv("PIWF_EDGE_HANG_FLAG", str(flag))
    host = guard.start_host(state_dir, max_workers=1, worker_ready_timeout_s=2.0)
    run_id = host.start_run(edge_flow("slow_start"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for(flag.exists, 15, "the first worker to start hanging in the snapshot load")
    hung = psutil.Process(int(flag.read_text()))
    guard.track(hung.pid)
    view = wait_for_status(host, run_id, TERMINAL, timeout=20)
    assert view["status"] == "done", view
    assert not alive(hung)
    assert oracle.counts(run_id) == {"only": 1}
    workers = rows(state_dir, "SELECT outcome FROM run_worker WHERE run_id = ? ORDER BY started_at", (run_id,))
    assert [w["outcome"] for w in workers][0] == "startTimeout", workers
