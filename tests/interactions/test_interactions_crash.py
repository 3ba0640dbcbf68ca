"""Interactions across a host SIGKILL: the host runs in a subprocess of its own session
(tests/host_script.py); the test kills its process group with SIGKILL and starts the
next host in-process on the same state directory.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from interactions_support import (
    Harness,
    Oracle,
    attempts,
    events,
    flow,
    pending_request,
    rows,
    run_view,
    start,
    submissions,
    wait_for,
    wait_run,
)

from piwf_actors.client import Client, HostNotRunning


def _assert_no_host(state_dir: Path) -> None:
    with pytest.raises(HostNotRunning):
        Client(state_dir, retries=0).connect()


def test_deadline_that_passed_while_no_host_ran_is_applied_at_start(ix: Harness, tmp_path: Path) -> None:
    oracle = Oracle(tmp_path / "oracle.log")
    script = ix.host_script(workflow=flow("decide_crash"), input={"version": "3.1", "oracle": str(oracle.path)})
    run_id = script.value("RUN")
    client = ix.client()
    request = pending_request(client, run_id)
    deadline_at = request["deadline_at"]
    client.close()

    assert script.sigkill() == -signal.SIGKILL
    killed_at = time.time()
    assert killed_at < deadline_at, "the host was killed only after the deadline; the test proves nothing"
    _assert_no_host(ix.state_dir)
    wait_for(lambda: time.time() > deadline_at + 0.2, deadline_at - killed_at + 5, "the deadline to pass")
    # Nothing applied it while no host ran.
    assert rows(ix.state_dir, "SELECT status FROM interactive_request WHERE request_id = ?",
                (request["request_id"],)) == [{"status": "pending"}]
    assert submissions(ix.state_dir, request["request_id"]) == []

    started_at = time.time()
    ix.successor()
    client = ix.client()
    view = wait_run(client, run_id, timeout=15)
    assert view["status"] == "done", view
    assert view["output"] == {"status": "stopped"}
    approve = next(node for node in view["nodes"] if node["node_id"] == "approve")
    assert approve["output"] == {"choice": "stop"}
    accepted = submissions(ix.state_dir, request["request_id"])
    assert len(accepted) == 1 and accepted[0]["outcome"] == "accepted", accepted
    assert accepted[0]["provenance"] == {"kind": "timeout", "deadline_at": deadline_at}
    assert accepted[0]["submitted_at"] >= started_at
    assert oracle.counts(run_id) == {"stopped": 1}
    assert [a["status"] for a in attempts(ix.state_dir, run_id, "approve")] == ["succeeded"]


def test_accepted_answer_survives_a_host_sigkill_before_the_resume(ix: Harness, tmp_path: Path) -> None:
    oracle = Oracle(tmp_path / "oracle.log")
    blocker_oracle = Oracle(tmp_path / "blocker.log")
    # One worker: once the blocker holds it, the answered run cannot resume before the kill.
    script = ix.host_script(max_workers=1)
    script.value("EPOCH")
    client = ix.client("answerer")
    run_id = start(client, "decide", {"version": "4.0", "oracle": str(oracle.path)})
    request = pending_request(client, run_id)
    blocker_id = start(client, "blocker", {"sleep": 60, "oracle": str(blocker_oracle.path)})
    wait_for(lambda: blocker_oracle.counts(blocker_id)["block"] == 1, 20, "the blocker to hold the only worker")

    answer = client.request("decision.answer", {"request_id": request["request_id"],
                                                "response": {"choice": "ship"}}, idempotency_key="ship-4.0")
    assert answer.outcome == "accepted", answer
    assert run_view(client, run_id)["status"] == "queued"
    client.close()
    assert script.sigkill() == -signal.SIGKILL
    # Killed between the accepted answer and the resume.
    assert rows(ix.state_dir, "SELECT status FROM run WHERE run_id = ?", (run_id,)) == [{"status": "queued"}]
    assert [a["status"] for a in attempts(ix.state_dir, run_id, "approve")] == ["waiting"]
    assert oracle.counts(run_id) == {}

    ix.successor()
    client = ix.client("answerer")
    cancelled = client.request("run.cancel", run_id=blocker_id)
    assert cancelled.outcome == "accepted", cancelled
    view = wait_run(client, run_id, timeout=20)
    assert view["status"] == "done", view
    assert view["output"] == {"shipped": "4.0"}
    approve = next(node for node in view["nodes"] if node["node_id"] == "approve")
    assert approve["output"] == {"choice": "ship"}
    assert [a["status"] for a in attempts(ix.state_dir, run_id, "approve")] == ["succeeded"]
    assert oracle.counts(run_id) == {"ship": 1}
    accepted = submissions(ix.state_dir, request["request_id"])
    assert len(accepted) == 1 and accepted[0]["provenance"]["client_id"] == "answerer", accepted
    trace = events(ix.state_dir, run_id)
    assert [e["kind"] for e in trace].count("interaction_settled") == 1
    assert [e["node_id"] for e in trace if e["kind"] == "node_finished"] == ["approve", "ship"]
    # The answer replayed after the restart is adopted, not applied again.
    replay = client.request("decision.answer", {"request_id": request["request_id"],
                                                "response": {"choice": "ship"}}, idempotency_key="ship-4.0")
    assert replay.outcome == "adopted" and replay.receipt == answer.receipt, replay
    wait_run(client, blocker_id, ("cancelled",), timeout=15)
