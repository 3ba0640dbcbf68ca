"""Pause and resume with real workers: a pause takes effect at a node boundary.

`run.pause` of an active run only raises a flag; the run parks `paused` when
its worker reports the next node result (after committing it), so no node
is interrupted and none runs twice. `run.resume` re-queues a paused run, or,
before the boundary was reached, withdraws the pending pause. Every node logs
each execution to an oracle file outside the database.
"""

from __future__ import annotations

import os
import signal

from wf import harness
from wf.harness import (
    Oracle,
    active_worker,
    alive,
    events,
    flow,
    wait_for,
    wait_for_oracle,
    wait_for_status,
)

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

SETTLED = ("done", "failed", "cancelled", "parked")
FOUR = ["p1", "p2", "p3", "p4"]

def _start_four(host, oracle: Oracle, **extra) -> str:
    return host.start_run(flow("four"), {"oracle": str(oracle.path), **extra})["receipt"]["run_id"]


def _p2_running_after_p1_committed(state_dir, run_id: str, oracle: Oracle) -> None:
    """p2 runs and p1's result is committed. p1's result is posted (pipelined): seeing p2 start says
    nothing of its commit, and a pause that commits first stops the run at p1's boundary instead, with
    p2 run for nothing (docs/durability.md, "Stops at a boundary") — a loaded machine showed it."""
    wait_for_oracle(oracle, "p2")
    wait_for(lambda: any(e["kind"] == "node_finished" and e["node_id"] == "p1" for e in events(state_dir, run_id)),
             10, "p1's result to be committed")


def test_pause_parks_at_the_next_node_boundary_and_resume_finishes(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = _start_four(host, oracle, sleeps={"p2": 1.0})
    _p2_running_after_p1_committed(state_dir, run_id, oracle)  # node 2 of 4 is running (a 1 s compute)
    assert host.pause_run(run_id)["receipt"]["status"] == "pausing"

    view = wait_for_status(host, run_id, SETTLED)
    assert (view["status"], view["park_reason"]) == ("parked", "paused"), view
    trace = events(state_dir, run_id)
    finished = [e["node_id"] for e in trace if e["kind"] == "node_finished"]
    assert finished == ["p1", "p2"], trace  # node 2's result was committed before parking
    assert not [e for e in trace if e["node_id"] in ("p3", "p4")]  # node 3 never started
    parked_at = next(e["seq"] for e in trace if e["kind"] == "run_parked")
    assert parked_at > next(e["seq"] for e in trace if e["kind"] == "node_finished" and e["node_id"] == "p2")
    assert oracle.nodes(run_id) == ["p1", "p2"]
    wait_for(lambda: host.status()["scheduler"]["active"] == [], 5, "the runner of the paused run to retire")
    assert host.get_run(run_id)["status"] == "parked"

    assert host.resume_run(run_id)["receipt"]["status"] == "queued"
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == dict.fromkeys(FOUR, 1)
    assert [n["attempts"] for n in view["nodes"]] == [1, 1, 1, 1]


def test_pause_during_the_first_node_of_a_launch_parks_paused(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = _start_four(host, oracle, sleeps={"p1": 1.0})
    wait_for_oracle(oracle, "p1")
    host.pause_run(run_id)
    view = wait_for_status(host, run_id, SETTLED)
    assert (view["status"], view["park_reason"]) == ("parked", "paused"), view
    assert [e["node_id"] for e in events(state_dir, run_id) if e["kind"] == "node_finished"] == ["p1"]
    host.resume_run(run_id)
    assert wait_for_status(host, run_id, SETTLED)["status"] == "done"
    assert oracle.counts(run_id) == dict.fromkeys(FOUR, 1)


def test_resume_before_the_boundary_withdraws_the_pause_without_interrupting(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = _start_four(host, oracle, sleeps={"p2": 1.0})
    _p2_running_after_p1_committed(state_dir, run_id, oracle)
    worker = guard.track(active_worker(host, run_id))
    assert host.pause_run(run_id)["receipt"]["status"] == "pausing"
    assert host.resume_run(run_id)["receipt"]["status"] == "running"
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    kinds = [e["kind"] for e in events(state_dir, run_id)]
    assert "run_parked" not in kinds and "run_requeued" not in kinds, kinds
    assert oracle.counts(run_id) == dict.fromkeys(FOUR, 1)
    assert alive(worker)  # the same worker served the whole run (and went back to the pool)


def test_pause_then_worker_crash_parks_paused_and_one_resume_requeues(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = _start_four(host, oracle, hang=["p2"])
    _p2_running_after_p1_committed(state_dir, run_id, oracle)  # p1 committed in this launch; p2 hangs
    worker = guard.track(active_worker(host, run_id))
    host.pause_run(run_id)
    os.kill(worker.pid, signal.SIGKILL)
    view = wait_for_status(host, run_id, SETTLED, timeout=10)
    assert (view["status"], view["park_reason"]) == ("parked", "paused"), view

    assert host.resume_run(run_id)["receipt"]["status"] == "queued"
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == {"p1": 1, "p2": 2, "p3": 1, "p4": 1}


def test_pause_of_a_queued_run_parks_it_at_once(guard, state_dir) -> None:
    """With one worker busy, a second run waits in the queue; pausing it parks it before it starts."""
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir, max_workers=1)
    busy = _start_four(host, oracle, sleeps={"p1": 1.0})
    wait_for_oracle(oracle, "p1")
    waiting = host.start_run(flow("idem_action"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    assert host.pause_run(waiting)["receipt"]["status"] == "parked"
    assert wait_for_status(host, busy, SETTLED)["status"] == "done"
    view = host.get_run(waiting)
    assert (view["status"], view["park_reason"]) == ("parked", "paused")
    assert oracle.counts(waiting) == {}
    refused = host.writer.execute("run.pause", {"run_id": waiting})
    assert (refused.ok, refused.error_code) == (False, "rejected")

    assert host.resume_run(waiting)["receipt"]["status"] == "queued"
    assert wait_for_status(host, waiting, SETTLED)["status"] == "done"
    assert oracle.counts(waiting) == {"a1": 1, "a2": 1, "a3": 1}
