"""Decision deadlines: the default response is applied with `timeout` provenance.

`decide_quick` has `on_timeout={"after_s": 1, "response": {"choice": "stop"}}`:
the housekeeper applies it on a tick while the host runs. Applying it after a
host restart (the deadline passed while no host ran) is in
test_interactions_crash.py.
"""

from __future__ import annotations

from pathlib import Path

from interactions_support import Harness, Oracle, events, pending_request, start, submissions, wait_run


def test_decision_default_is_applied_when_its_deadline_passes(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle = Oracle(tmp_path / "oracle.log")
    run_id = start(client, "decide_quick", {"version": "1.2", "oracle": str(oracle.path)})
    request = pending_request(client, run_id)
    assert request["contract"]["default_response"] == {"choice": "stop"}
    deadline_at = request["deadline_at"]

    view = wait_run(client, run_id, timeout=15)
    assert view["status"] == "done", view
    assert view["output"] == {"status": "stopped"}
    approve = next(node for node in view["nodes"] if node["node_id"] == "approve")
    assert approve["output"] == {"choice": "stop"} and approve["status"] == "succeeded"
    assert oracle.counts(run_id) == {"stopped": 1}

    accepted = submissions(ix.state_dir, request["request_id"])
    assert len(accepted) == 1, accepted
    assert accepted[0]["outcome"] == "accepted" and accepted[0]["payload"] == {"choice": "stop"}
    assert accepted[0]["provenance"] == {"kind": "timeout", "deadline_at": deadline_at}
    assert accepted[0]["submitted_at"] >= deadline_at
    kinds = [e["kind"] for e in events(ix.state_dir, run_id)]
    assert kinds.count("interaction_settled") == 1
    # The run was woken once, by the deadline (a `run_requeued` with `after`; the worker's
    # `ready` logs another `run_resumed`, with the node it resumes at).
    wakes = [e["payload"] for e in events(ix.state_dir, run_id)
             if e["kind"] == "run_requeued" and "after" in (e["payload"] or {})]
    assert wakes == [{"after": "timeout"}]

    # A human answer after the default was applied is too late.
    late = client.request("decision.answer", {"request_id": request["request_id"], "response": {"choice": "ship"}})
    assert late.outcome == "conflict", late
