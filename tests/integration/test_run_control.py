"""Run control with real workers: cancel and restart lineage (pause/resume: test_run_control_pause.py).

An in-process host runs workflows from `wf/recovery_flows.py`; their nodes
log every execution to an oracle file outside the database, so "each node
ran once" is counted outside the store. Teardown stops the host and checks
with psutil that no process of the test (worker, shell command) is left.
"""

from __future__ import annotations

import psutil
from testsupport import both_engines
from wf import harness
from wf.harness import (
    Oracle,
    active_worker,
    alive,
    events,
    flow,
    tagged_processes,
    wait_for,
    wait_for_oracle,
    wait_for_status,
)

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

SETTLED = ("done", "failed", "cancelled", "parked")
FOUR = ["p1", "p2", "p3", "p4"]


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_cancel_during_long_shell_sleep_kills_worker_and_shell_tree(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("long_shell"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "sh")
    worker_pid = active_worker(host, run_id)
    # worker → sh -c "…; sleep 60; …" → sleep 60
    tree = wait_for(lambda: [p for p in _tree(worker_pid) if p.name() == "sleep"] and _tree(worker_pid), 5,
                    "the worker's `sleep 60`")
    names = sorted(p.name() for p in tree)
    assert "sh" in names and "sleep" in names, names
    for process in tree:
        guard.track(process.pid)

    receipt = host.cancel_run(run_id)["receipt"]
    assert receipt["status"] == "cancelling"
    view = wait_for_status(host, run_id, SETTLED, timeout=10)
    assert view["status"] == "cancelled", view
    wait_for(lambda: not any(alive(p) for p in tree), 5,
             lambda: f"the worker and shell tree to be gone: {[p.pid for p in tree if alive(p)]}")
    assert not [p for p in tagged_processes(guard.tag) if p.name() == "sleep"]
    assert oracle.counts(run_id) == {"sh": 1}  # `after` never ran
    kinds = [e["kind"] for e in events(state_dir, run_id)]
    assert "cancel_requested" in kinds and kinds[-1] == "run_cancelled"
    wait_for(lambda: host.status()["scheduler"]["active"] == [], 5, "the scheduler to retire the runner")


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_restart_of_a_finished_run_creates_a_child_run_with_the_same_input(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_input = {"oracle": str(oracle.path), "sleep": 0.01}
    old = host.start_run(flow("four"), run_input)["receipt"]["run_id"]
    old_view = wait_for_status(host, old, SETTLED)
    assert old_view["status"] == "done"

    receipt = host.restart_run(old, expected_revision=old_view["revision"])["receipt"]
    new = receipt["run_id"]
    assert new != old and receipt["parent_run_id"] == old
    view = wait_for_status(host, new, SETTLED)
    assert view["status"] == "done", view
    assert view["parent_run_id"] == old
    assert view["input"] == run_input
    assert view["definition_digest"] == old_view["definition_digest"]
    assert [n["node_id"] for n in view["nodes"]] == FOUR
    assert {n["attempt_id"] for n in view["nodes"]}.isdisjoint({n["attempt_id"] for n in old_view["nodes"]})
    # Its own executions: each node ran once more, under the new run's id.
    assert oracle.counts(new) == dict.fromkeys(FOUR, 1)
    assert oracle.counts(old) == dict.fromkeys(FOUR, 1)
    # The old run is untouched.
    assert host.get_run(old)["status"] == "done"
    assert host.get_run(old)["revision"] == old_view["revision"]


def test_restart_with_a_stale_revision_is_a_conflict(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    old = host.start_run(flow("four"), {"oracle": str(oracle.path), "sleep": 0.01})["receipt"]["run_id"]
    view = wait_for_status(host, old, SETTLED)
    result = host.writer.execute("run.restart", {"run_id": old, "expected_revision": view["revision"] - 1})
    assert (result.ok, result.error_code) == (False, "conflict")
    assert len(host.list_runs()) == 1


def test_a_running_run_is_cancelled_before_it_can_be_restarted(guard, state_dir) -> None:
    """A restart is for terminal runs only (test_edges_restart.py has the refusals): cancel, then restart."""
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    old = host.start_run(flow("four"), {"oracle": str(oracle.path), "hang": ["p2"]})["receipt"]["run_id"]
    wait_for_oracle(oracle, "p2")
    worker = guard.track(active_worker(host, old))

    host.cancel_run(old)
    old_view = wait_for_status(host, old, SETTLED, timeout=10)
    assert old_view["status"] == "cancelled", old_view
    wait_for(lambda: not alive(worker), 5, "the old run's worker to be killed")
    new = host.restart_run(old, expected_revision=old_view["revision"])["receipt"]["run_id"]
    view = wait_for_status(host, new, SETTLED)
    assert view["status"] == "done", view
    assert view["parent_run_id"] == old
    assert oracle.counts(old) == {"p1": 1, "p2": 1}
    assert oracle.counts(new) == dict.fromkeys(FOUR, 1)


def test_cancel_of_a_parked_run_ends_it_at_once(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("four"), {"oracle": str(oracle.path), "sleeps": {"p1": 1.0}})["receipt"]["run_id"]
    wait_for_oracle(oracle, "p1")
    host.pause_run(run_id)
    assert wait_for_status(host, run_id, SETTLED)["status"] == "parked"
    assert host.cancel_run(run_id)["receipt"]["status"] == "cancelled"
    view = host.get_run(run_id)
    assert view["status"] == "cancelled" and view["finished_at"] is not None
    refused = host.writer.execute("run.resume", {"run_id": run_id})
    assert (refused.ok, refused.error_code) == (False, "rejected")
    # p2 is pure: the worker may have started it (pipelined) before it learned of the pause
    # at p1's boundary, but it stops there and p2's result is never committed.
    counts = oracle.counts(run_id)
    assert counts["p1"] == 1 and counts.get("p2", 0) <= 1 and set(counts) <= {"p1", "p2"}, counts
    assert [node["node_id"] for node in view["nodes"]] == ["p1"]
