"""Worker SIGKILL: the run's fate depends on its progress and on the node's side effects.

An in-process host runs workflows from `wf/recovery_flows.py` whose nodes log
each execution to an oracle file; a node listed in the input's `hang` sleeps
on its first execution so that the test can SIGKILL the worker (pid from the
scheduler's status) while that node runs.

- progress since launch → the run is re-queued and completes;
- no progress since launch → parked `no_progress` with a diagnostic naming
  SIGKILL (parking is the stop: no crash loop); `run.resume` lets it finish;
- a non-idempotent shell node in flight → parked `ambiguous_effect` with the
  effect id; the orphaned shell command is terminated; `effect.resolve`
  confirm continues with the given output without re-running the node,
  retry runs it again;
- an idempotent action in flight → simply run again, never parked.
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from testsupport import both_engines
from wf import harness
from wf.harness import (
    Oracle,
    active_worker,
    alive,
    events,
    flow,
    rows,
    wait_for,
    wait_for_oracle,
    wait_for_status,
)

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

SETTLED = ("done", "failed", "cancelled", "parked")


def _sigkill_worker(guard, host, run_id: str) -> psutil.Process:
    worker = guard.track(active_worker(host, run_id))
    os.kill(worker.pid, signal.SIGKILL)
    wait_for(lambda: not alive(worker), 5, "the worker to die")
    return worker


def _kinds(state_dir, run_id: str) -> list[str]:
    return [e["kind"] for e in events(state_dir, run_id)]


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_worker_sigkill_after_progress_requeues_and_completes(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("four"), {"oracle": str(oracle.path), "hang": ["p2"]})["receipt"]["run_id"]
    wait_for_oracle(oracle, "p2")  # p1 was committed in this launch: progress
    worker = _sigkill_worker(guard, host, run_id)

    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == {"p1": 1, "p2": 2, "p3": 1, "p4": 1}
    requeued = [e for e in events(state_dir, run_id) if e["kind"] == "run_requeued"]
    assert len(requeued) == 1
    assert requeued[0]["payload"]["runner_outcome"] == "crashed"
    assert "SIGKILL" in requeued[0]["payload"]["diagnostic"]
    record = rows(state_dir, "SELECT outcome, exit_code, diagnostic FROM run_worker WHERE pid = ? AND run_id = ?",
                  (worker.pid, run_id))
    assert record and record[0]["exit_code"] == -signal.SIGKILL, record
    assert "run_parked" not in _kinds(state_dir, run_id)


def test_worker_sigkill_without_progress_parks_no_progress_then_resume_finishes(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("four"), {"oracle": str(oracle.path), "hang": ["p1"]})["receipt"]["run_id"]
    wait_for_oracle(oracle, "p1")  # the first node of a fresh launch is executing
    _sigkill_worker(guard, host, run_id)

    view = wait_for_status(host, run_id, SETTLED, timeout=10)
    assert (view["status"], view["park_reason"]) == ("parked", "no_progress"), view
    assert "SIGKILL" in view["park_detail"]
    # Parking is the stop: the runner retires and nothing relaunches the run on its own.
    wait_for(lambda: host.status()["scheduler"]["active"] == [], 5, "the runner to retire")
    assert _kinds(state_dir, run_id).count("run_claimed") == 1
    assert oracle.counts(run_id) == {"p1": 1}

    assert host.resume_run(run_id)["outcome"] == "accepted"
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == {"p1": 2, "p2": 1, "p3": 1, "p4": 1}


def _shell_sleeps(guard) -> list[psutil.Process]:
    return [p for p in harness.tagged_processes(guard.tag) if p.name() == "sleep"]


def _park_on_ambiguous_shell(guard, state_dir, host, oracle: Oracle) -> tuple[str, str]:
    """Run `shell-effect` until its shell node sleeps, SIGKILL the worker; returns (run_id, effect_id)."""
    run_id = host.start_run(flow("shell_effect"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "s2")
    # The command is registered for reaping before it can do anything lasting.
    wait_for(lambda: rows(state_dir, "SELECT pid FROM child_process WHERE run_id = ? AND kind = 'shell' "
                                     "AND released_at IS NULL", (run_id,)), 5, "the shell child's registration")
    sleeps = wait_for(lambda: _shell_sleeps(guard), 5, "the shell's `sleep 60`")
    for process in sleeps:
        guard.track(process.pid)
    _sigkill_worker(guard, host, run_id)

    view = wait_for_status(host, run_id, SETTLED, timeout=10)
    assert (view["status"], view["park_reason"]) == ("parked", "ambiguous_effect"), view
    effect_id = view["park_detail"]
    assert [(e["effect_id"], e["node_id"], e["status"]) for e in view["effects"]] == [(effect_id, "s2", "ambiguous")]
    # The orphaned command (its own session, so not in the worker's group) was terminated.
    wait_for(lambda: not any(alive(p) for p in sleeps), 5, "the orphaned `sleep 60` to be terminated")
    wait_for(lambda: not rows(state_dir, "SELECT pid FROM child_process WHERE run_id = ? AND released_at IS NULL",
                              (run_id,)), 5, "the reaped command's registration to be released")
    # An ambiguous run is not resumable by run.resume: a person must resolve the effect.
    refused = host.writer.execute("run.resume", {"run_id": run_id})
    assert (refused.ok, refused.error_code) == (False, "rejected")
    assert effect_id in refused.error
    return run_id, effect_id


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_worker_sigkill_in_shell_node_parks_ambiguous_then_confirm_continues(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id, effect_id = _park_on_ambiguous_shell(guard, state_dir, host, oracle)

    confirmed = {"stdout": "confirmed by a person\n", "stderr": "", "exit_code": 0, "duration_ms": 1}
    host.resolve_effect(effect_id, "confirm", output=confirmed)
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert nodes["s2"]["output"] == confirmed
    assert nodes["s2"]["status"] == "succeeded"
    assert oracle.counts(run_id) == {"s1": 1, "s2": 1, "s3": 1}  # s2 was not run again
    effect = {e["effect_id"]: e for e in view["effects"]}[effect_id]
    assert effect["status"] == "applied"


def test_worker_sigkill_in_shell_node_parks_ambiguous_then_retry_reruns(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id, effect_id = _park_on_ambiguous_shell(guard, state_dir, host, oracle)

    host.resolve_effect(effect_id, "retry")
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert nodes["s2"]["output"]["stdout"] == "shell-done\n"
    assert nodes["s2"]["output"]["exit_code"] == 0
    assert oracle.counts(run_id) == {"s1": 1, "s2": 2, "s3": 1}
    statuses = [(e["node_id"], e["status"], e["resolution"]) for e in view["effects"]]
    assert statuses == [("s2", "failed", "retry"), ("s2", "applied", None)]


def test_worker_sigkill_in_idempotent_action_reruns_without_parking(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("idem_action"), {"oracle": str(oracle.path), "hang": ["a2"]})["receipt"]["run_id"]
    wait_for_oracle(oracle, "a2")
    _sigkill_worker(guard, host, run_id)

    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done", view
    assert oracle.counts(run_id) == {"a1": 1, "a2": 2, "a3": 1}
    assert "run_parked" not in _kinds(state_dir, run_id)
    statuses = [(e["node_id"], e["status"], e["resolution"]) for e in view["effects"]]
    assert statuses == [("a2", "failed", "abandoned"), ("a2", "applied", None)]


@pytest.mark.parametrize("action", ["confirm", "retry"])
def test_resolving_an_effect_that_is_not_ambiguous_is_refused(guard, state_dir, action) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow("idem_action"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    view = wait_for_status(host, run_id, SETTLED)
    assert view["status"] == "done"
    (effect,) = view["effects"]
    result = host.writer.execute("effect.resolve", {"effect_id": effect["effect_id"], "action": action})
    assert (result.ok, result.error_code) == (False, "rejected")
    assert host.get_run(run_id)["revision"] == view["revision"]
