"""A deadline counts only while a person could answer: pausing the run stops it, resuming goes on.

Answers to a paused run are refused, so a checkpoint's or agent step's `timeout_s` and a decision's
`on_timeout.after_s` stand still while the run is paused. Each kind waits here with a 2 s deadline;
the run is paused at once and stays `parked` well past the old deadline (nothing expires, the
request is listed as paused with the time it has left), and only after `run.resume` does the
deadline come, the time left later.
"""

from __future__ import annotations

import time

import pytest
from interactions_support import Harness, pending_request, requests_of, run_view, start, wait_run
from testsupport import wait_for

#: workflow attr, input, what the run becomes when the deadline is applied: (status, error code, output)
CASES = {
    "checkpoint": ("checkpoint_quick", {}, ("failed", "checkpoint_timeout", None)),
    "agent": ("summarizer_paused", {"topic": "x"}, ("failed", "missing_submission", None)),
    "decision": ("decide_paused", {"version": "2.0", "oracle": "/dev/null"}, ("done", None, {"status": "stopped"})),
}


def _still_parked_until(client, run_id: str, request_id: str, until: float) -> None:
    """Poll until the wall clock passes `until`: the run stays parked and its request pending."""
    def checked() -> bool:
        view = run_view(client, run_id)
        assert view["status"] == "parked", view
        [request] = [r for r in requests_of(client, run_id) if r["request_id"] == request_id] or [None]
        assert request is not None and request["status"] == "pending", request
        return time.time() > until

    wait_for(checked, until - time.time() + 20, "the old deadline to be well past")


# The decision case in make test; the checkpoint and agent cases (the same path, ~7 s each) in make test-slow.
@pytest.mark.parametrize("kind", [pytest.param(kind, marks=[] if kind == "decision" else [pytest.mark.slow])
                                  for kind in sorted(CASES)])
def test_a_paused_run_keeps_its_request_open_past_the_deadline_and_resume_goes_on_from_what_was_left(
        ix: Harness, kind: str) -> None:
    attr, run_input, (status, code, output) = CASES[kind]
    ix.host()
    client = ix.client()
    run_id = start(client, attr, run_input)
    request = pending_request(client, run_id)
    assert request["deadline_at"] is not None
    paused = client.request("run.pause", run_id=run_id)
    assert paused.outcome == "accepted", paused
    [listed] = requests_of(client, run_id)
    assert listed["deadline_at"] is None and 0 < listed["paused_remaining_s"] <= 2.0, listed
    waiting = run_view(client, run_id)["waiting"]
    assert [(w["request_id"], w["clock"]) for w in waiting] == [(request["request_id"], "paused")], waiting
    assert waiting[0]["remaining_s"] == listed["paused_remaining_s"]

    _still_parked_until(client, run_id, request["request_id"], request["deadline_at"] + 3.0)

    resumed_at = time.time()
    assert client.request("run.resume", run_id=run_id).outcome == "accepted"
    [running] = requests_of(client, run_id) or [None]
    if running is not None:  # (the deadline may already have been applied on a fast tick)
        assert running["paused_remaining_s"] is None
        assert running["deadline_at"] >= resumed_at + listed["paused_remaining_s"] - 0.5, (running, resumed_at)
        assert run_view(client, run_id)["waiting"][0]["clock"] == "running"
    view = wait_run(client, run_id, timeout=20)
    assert view["status"] == status, view
    assert (view["error"] or {}).get("code") == code, view["error"]
    if output is not None:
        assert view["output"] == output


def test_a_paused_decision_is_answered_after_resume(ix: Harness) -> None:
    ix.host()
    client = ix.client()
    run_id = start(client, "decide_paused", {"version": "2.1", "oracle": "/dev/null"})
    request = pending_request(client, run_id)
    assert client.request("run.pause", run_id=run_id).outcome == "accepted"
    refused = client.request("decision.answer", {"request_id": request["request_id"], "response": {"choice": "ship"}})
    assert refused.outcome == "rejected" and "paused" in refused.error, refused
    _still_parked_until(client, run_id, request["request_id"], request["deadline_at"] + 1.0)
    assert client.request("run.resume", run_id=run_id).outcome == "accepted"
    answer = client.request("decision.answer", {"request_id": request["request_id"], "response": {"choice": "ship"}})
    assert answer.outcome == "accepted", answer
    assert wait_run(client, run_id)["output"] == {"shipped": "2.1"}
