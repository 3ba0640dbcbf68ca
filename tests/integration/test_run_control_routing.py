"""Retries, step limits and routing outcomes, executed by real workers.

- a compute node that fails twice then succeeds: with `retries=2` three
  attempts are recorded and the run is `done`; with `retries=1` the run
  fails `node_failed`;
- a loop through a switch that exceeds `max_steps` fails `max_steps_exceeded`;
- a switch without a case for the value (and no default) fails `routing_error`;
- a failed shell node routed by a switch on `$result.outcome` takes the
  `failed` branch and the run completes.

Every node logs its executions to an oracle file outside the database.
"""

from __future__ import annotations

from wf import harness
from wf.harness import Oracle, events, flow, rows, wait_for_status

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

SETTLED = ("done", "failed", "cancelled", "parked")


def _run(guard, state_dir, attr: str):
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir)
    run_id = host.start_run(flow(attr), {"oracle": str(oracle.path), "sleep": 0.0})["receipt"]["run_id"]
    return host, oracle, run_id, wait_for_status(host, run_id, SETTLED)


def test_retries_cover_two_failures(guard, state_dir) -> None:
    _host, oracle, run_id, view = _run(guard, state_dir, "flaky_retries_2")
    assert view["status"] == "done", view
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert nodes["flaky"]["attempts"] == 3
    assert nodes["flaky"]["status"] == "succeeded"
    assert nodes["flaky"]["output"] == {"succeeded_on": 3}
    assert oracle.counts(run_id) == {"flaky": 3, "after": 1}
    failures = [e for e in events(state_dir, run_id) if e["kind"] == "node_failed"]
    assert [e["node_id"] for e in failures] == ["flaky", "flaky"]
    assert "flaky failure #1" in failures[0]["payload"]["error"]
    attempts = rows(state_dir, "SELECT attempt_no, status, error_code FROM node_attempt WHERE run_id = ? "
                               "AND node_id = 'flaky' ORDER BY attempt_no", (run_id,))
    assert [tuple(a.values()) for a in attempts] == [
        (1, "failed", "node_error"), (2, "failed", "node_error"), (3, "succeeded", None)]


def test_too_few_retries_fail_the_run_node_failed(guard, state_dir) -> None:
    _host, oracle, run_id, view = _run(guard, state_dir, "flaky_retries_1")
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "node_failed"
    assert "flaky failure #2" in view["error"]["message"]
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert nodes["flaky"]["attempts"] == 2 and nodes["flaky"]["status"] == "failed"
    assert "after" not in nodes
    assert oracle.counts(run_id) == {"flaky": 2}
    assert view["output"] is None


def test_loop_beyond_max_steps_fails_max_steps_exceeded(guard, state_dir) -> None:
    _host, oracle, run_id, view = _run(guard, state_dir, "looping")
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "max_steps_exceeded"
    assert view["steps"] == 5
    assert oracle.counts(run_id) == {"spin": 5}  # max_steps=5: five executions, no sixth


def test_switch_without_a_matching_case_fails_routing_error(guard, state_dir) -> None:
    _host, oracle, run_id, view = _run(guard, state_dir, "unknown_case")
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "routing_error"
    assert "neither" in view["error"]["message"]
    assert oracle.counts(run_id) == {"pick": 1}
    # The node itself succeeded; only the route failed.
    assert [(n["node_id"], n["status"]) for n in view["nodes"]] == [("pick", "succeeded")]


def test_shell_failure_routed_on_result_outcome_takes_the_failed_branch(guard, state_dir) -> None:
    _host, oracle, run_id, view = _run(guard, state_dir, "shell_failure_routed")
    assert view["status"] == "done", view
    assert view["output"]["node"] == "bad"
    nodes = {n["node_id"]: n for n in view["nodes"]}
    assert nodes["check"]["status"] == "failed"
    assert "exited with code 3" in nodes["check"]["error"]["message"]
    assert oracle.counts(run_id) == {"check": 1, "bad": 1}
    assert [(e["node_id"], e["status"]) for e in view["effects"]] == [("check", "failed")]
