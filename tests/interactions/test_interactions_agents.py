"""Agent steps: a session submits structured output and the run's worker validates it.

`interaction.submit` answers only when the worker has decided: `accepted`, or
`rejected` with the validation error (the shape from `expected_output`, then
the node's `validate`). After `max_submissions` rejected submissions, or with
a `timeout_s` missing ones, the run fails with `missing_submission`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from interactions_support import (
    Harness,
    Oracle,
    assert_one_line,
    listed,
    requests_of,
    start,
    submissions,
    wait_run,
    wait_waiting,
)

from piwf_actors.client import Client

SESSION = "agent-7"


def _submit(client: Client, request: dict[str, Any], value: Any, session_id: str = SESSION):
    return client.request("interaction.submit", {"request_id": request["request_id"], "session_id": session_id,
                                                 "value": value})


def _agent_request(client: Client, run_id: str) -> dict[str, Any]:
    wait_waiting(client, run_id)
    found = [r for r in listed(client, SESSION)["requests"] if r["run_id"] == run_id]
    assert len(found) == 1, found
    return found[0]


def test_agent_submission_is_validated_by_the_worker(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client("summarizer")
    oracle = Oracle(tmp_path / "oracle.log")
    run_id = start(client, "summarizer", {"topic": "the release notes", "oracle": str(oracle.path)},
                   session_id=SESSION)
    request = _agent_request(client, run_id)
    assert request["kind"] == "agent" and request["session_id"] == SESSION
    assert request["contract"]["prompt"] == "Summarize the release notes"
    assert request["contract"]["expected_output"]["required"] == ["summary"]

    wrong_session = _submit(client, request, {"summary": "fine summary"}, session_id="someone-else")
    assert wrong_session.outcome == "rejected", wrong_session
    assert "another session" in assert_one_line(wrong_session.error)

    bad_shape = _submit(client, request, {"summary": 42})
    assert bad_shape.outcome == "rejected", bad_shape
    assert "$.summary: expected string" in assert_one_line(bad_shape.error)
    view = wait_waiting(client, run_id, timeout=10)
    assert view["status"] == "parked"

    too_short = _submit(client, request, {"summary": "hey"})
    assert too_short.outcome == "rejected", too_short
    assert "shorter than 5" in assert_one_line(too_short.error)

    good = _submit(client, request, {"summary": "all good here"})
    assert good.outcome == "accepted", good
    assert good.receipt["request_id"] == request["request_id"]
    view = wait_run(client, run_id)
    assert view["status"] == "done", view
    assert view["output"] == {"summary": "all good here"}
    summarize = next(node for node in view["nodes"] if node["node_id"] == "summarize")
    assert summarize["output"] == {"summary": "all good here"}
    assert oracle.counts(run_id) == {"after": 1}
    outcomes = [s["outcome"] for s in submissions(ix.state_dir, request["request_id"])]
    assert outcomes == ["rejected", "rejected", "accepted"]
    assert requests_of(client, run_id) == []


def test_agent_fails_missing_submission_after_max_rejections(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client("summarizer")
    oracle = Oracle(tmp_path / "oracle.log")
    run_id = start(client, "summarizer_two", {"topic": "x", "oracle": str(oracle.path)}, session_id=SESSION)
    request = _agent_request(client, run_id)

    first = _submit(client, request, {"summary": "no"})
    assert first.outcome == "rejected", first
    wait_waiting(client, run_id, timeout=10)
    second = _submit(client, request, {"wrong": "shape"})
    assert second.outcome == "rejected", second
    assert "missing required property 'summary'" in assert_one_line(second.error)

    view = wait_run(client, run_id, timeout=15)
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "missing_submission"
    assert oracle.counts(run_id) == {}
    summary = [m for m in listed(client, SESSION)["messages"] if m["run_id"] == run_id and m["kind"] == "run_summary"]
    assert [m["body"]["error"]["code"] for m in summary] == ["missing_submission"]


def test_agent_request_of_a_run_failed_by_rejections_is_closed(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client("summarizer")
    run_id = start(client, "summarizer_two", {"topic": "x"}, session_id=SESSION)
    request = _agent_request(client, run_id)
    for _ in range(2):
        assert _submit(client, request, {"summary": "no"}).outcome == "rejected"
        wait_run(client, run_id, ("parked", "failed"), timeout=10)
    assert wait_run(client, run_id, timeout=10)["status"] == "failed"

    assert requests_of(client, run_id) == []
    impatient = ix.client("late-agent", timeout=3)
    impatient.retries = 0
    late = _submit(impatient, request, {"summary": "finally good"})
    assert late.outcome == "rejected", late
    assert "cancelled" in assert_one_line(late.error)


def test_agent_fails_missing_submission_when_its_deadline_passes(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client("summarizer")
    run_id = start(client, "summarizer_timeout", {"topic": "x"}, session_id=SESSION)
    request = _agent_request(client, run_id)
    assert request["deadline_at"] is not None

    view = wait_run(client, run_id, timeout=15)
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "missing_submission"
    assert submissions(ix.state_dir, request["request_id"]) == []
    assert requests_of(client, run_id) == []
    late = _submit(client, request, {"summary": "finally here"})
    assert late.outcome == "rejected", late
    assert "cancelled" in assert_one_line(late.error)
