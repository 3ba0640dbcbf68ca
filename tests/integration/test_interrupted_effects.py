"""An effect cut off by a timeout has an unknown outcome: it is never run again on its own.

A non-idempotent action or shell node interrupted by its timeout — the worker's own SIGALRM,
its command's process group killed at `timeout_s`, or the host's watchdog killing the worker —
may have done its work (here it always has: the oracle line is written first). The run parks
`ambiguous_effect` with the effect `ambiguous`, whatever `retries` says, and the node runs
again only after a person's `retry` (or the run goes on with a person's `confirm`). A node
declared idempotent, and a function that raises, are ordinary failures retried as declared.
The oracle file outside the database counts the executions.
"""

from __future__ import annotations

from wf import harness
from wf.harness import WF, Oracle, wait_for_oracle, wait_for_status

guard = harness.guard

SETTLED = ("done", "failed", "cancelled", "parked")


def _flow(attr: str) -> str:
    return f"{WF / 'interrupted_flows.py'}:{attr}"


def _start(host, attr: str, oracle: Oracle, block_flag) -> str:
    block_flag.write_text("block")
    return host.start_run(_flow(attr), {"oracle": str(oracle.path), "block_flag": str(block_flag)})["receipt"]["run_id"]


def _parked_on_ambiguous_effect(host, run_id: str) -> dict:
    view = wait_for_status(host, run_id, SETTLED, timeout=30)
    assert (view["status"], view["park_reason"]) == ("parked", "ambiguous_effect"), view
    effects = [e for e in view["effects"] if e["node_id"] == "send"]
    assert [e["status"] for e in effects] == ["ambiguous"], effects
    assert view["park_detail"] == effects[0]["effect_id"]
    return view


def _retry_then_done(host, run_id: str, view: dict, oracle: Oracle, block_flag) -> None:
    """A person's retry runs the node once more; this time it does not block."""
    block_flag.unlink()
    host.resolve_effect(view["park_detail"], "retry")
    done = wait_for_status(host, run_id, SETTLED, timeout=30)
    assert done["status"] == "done", done
    assert oracle.counts(run_id) == {"send": 2, "after": 1}


def test_an_action_killed_by_the_watchdog_parks_on_an_ambiguous_effect(guard, state_dir) -> None:
    oracle, flag = Oracle(state_dir / "oracle"), state_dir / "block"
    host = guard.start_host(state_dir, max_workers=1, watchdog_grace_s=0.5)
    run_id = _start(host, "stuck_action", oracle, flag)
    view = _parked_on_ambiguous_effect(host, run_id)
    assert oracle.counts(run_id) == {"send": 1}, "the killed effect was run again although retries=2"
    node = {n["node_id"]: n for n in view["nodes"]}["send"]
    assert node["error"]["code"] == "timeout", node
    _retry_then_done(host, run_id, view, oracle, flag)


def test_an_action_stopped_by_its_own_timeout_parks_on_an_ambiguous_effect(guard, state_dir) -> None:
    oracle, flag = Oracle(state_dir / "oracle"), state_dir / "block"
    host = guard.start_host(state_dir, max_workers=1)
    run_id = _start(host, "slow_action", oracle, flag)
    view = _parked_on_ambiguous_effect(host, run_id)
    assert oracle.counts(run_id) == {"send": 1}
    node = {n["node_id"]: n for n in view["nodes"]}["send"]
    assert node["error"]["code"] == "timeout" and "timed out" in node["error"]["message"], node
    kinds = [e["kind"] for e in host.run_events(run_id)]
    assert "effect_ambiguous" in kinds and "effect_settled" not in kinds, kinds
    # The worker stopped the node itself: its warm worker serves the next run.
    _retry_then_done(host, run_id, view, oracle, flag)


def test_a_shell_command_cut_off_at_its_timeout_parks_on_an_ambiguous_effect(guard, state_dir) -> None:
    oracle, flag = Oracle(state_dir / "oracle"), state_dir / "block"
    host = guard.start_host(state_dir, max_workers=1)
    run_id = _start(host, "slow_shell", oracle, flag)
    view = _parked_on_ambiguous_effect(host, run_id)
    assert oracle.counts(run_id) == {"send": 1}, "the command cut off was run again although retries=2"
    node = {n["node_id"]: n for n in view["nodes"]}["send"]
    assert node["error"]["code"] == "timeout", node
    _retry_then_done(host, run_id, view, oracle, flag)


def test_a_confirmed_interrupted_effect_goes_on_with_the_given_output(guard, state_dir) -> None:
    oracle, flag = Oracle(state_dir / "oracle"), state_dir / "block"
    host = guard.start_host(state_dir, max_workers=1)
    run_id = _start(host, "slow_action", oracle, flag)
    view = _parked_on_ambiguous_effect(host, run_id)
    host.resolve_effect(view["park_detail"], "confirm", {"sent": "by hand"})
    done = wait_for_status(host, run_id, SETTLED, timeout=30)
    assert done["status"] == "done", done
    assert done["output"] == {"after": {"sent": "by hand"}}
    assert oracle.counts(run_id) == {"send": 1, "after": 1}


def test_an_idempotent_action_that_times_out_is_retried_as_declared(guard, state_dir) -> None:
    oracle, flag = Oracle(state_dir / "oracle"), state_dir / "block"
    host = guard.start_host(state_dir, max_workers=1)
    run_id = _start(host, "slow_idempotent", oracle, flag)
    view = wait_for_status(host, run_id, SETTLED, timeout=30)
    assert view["status"] == "failed", view
    assert oracle.counts(run_id) == {"send": 2}  # retries=1: two attempts, both timed out
    assert [e["status"] for e in view["effects"]] == ["failed", "failed"], view["effects"]
    assert view["error"]["code"] == "node_failed" and "timed out" in view["error"]["message"], view["error"]


def test_an_action_that_raises_is_a_known_failure_retried_as_declared(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir, max_workers=1)
    run_id = host.start_run(_flow("raising_action"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    wait_for_oracle(oracle, "send", count=3)
    view = wait_for_status(host, run_id, SETTLED, timeout=30)
    assert view["status"] == "failed", view
    assert oracle.counts(run_id) == {"send": 3}
    assert [e["status"] for e in view["effects"]] == ["failed"] * 3, view["effects"]
