"""Human decisions answered through the client socket of a live host.

Each test starts a real host (`start_host`) on its own state directory and
talks to it through `Client` connections: the run parks `waiting` at its
decision, the answer goes through `decision.answer`, and the tests check
routing, refusals, concurrency and idempotency from the outside (run views,
the run's events, the test's own read-only view of the database and an
oracle file the nodes append to).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from interactions_support import (
    Harness,
    Oracle,
    assert_one_line,
    attempts,
    events,
    listed,
    pending_request,
    requests_of,
    rows,
    run_view,
    start,
    submissions,
    wait_run,
    wait_waiting,
)
from testsupport import both_engines

from piwf_actors.client import Client


def _answer(client: Client, request: dict[str, Any], response: dict[str, Any], **kwargs: Any):
    return client.request("decision.answer", {"request_id": request["request_id"], "response": response}, **kwargs)


def _inputs(tmp_path: Path) -> tuple[Oracle, dict[str, Any]]:
    oracle = Oracle(tmp_path / "oracle.log")
    return oracle, {"version": "1.2", "oracle": str(oracle.path)}


def _node(view: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(node for node in view["nodes"] if node["node_id"] == node_id)


def test_ship_answer_routes_to_the_ship_node(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input)

    request = pending_request(client, run_id)
    contract = request["contract"]
    assert request["kind"] == "decision" and request["node_id"] == "approve"
    assert contract["title"] == "Ship 1.2?" and contract["summary"] == "Tests passed."
    assert set(contract["choices"]) == {"ship", "stop", "fix"}
    assert contract["default_response"] == {"choice": "stop"}
    assert request["deadline_at"] is not None

    answer = _answer(client, request, {"choice": "ship"}, expected_revision=request["revision"])
    assert answer.outcome == "accepted", answer
    assert answer.receipt["run_id"] == run_id and answer.receipt["choice"] == "ship"

    view = wait_run(client, run_id)
    assert view["status"] == "done", view
    assert view["output"] == {"shipped": "1.2"}
    assert _node(view, "approve")["output"] == {"choice": "ship"}
    assert oracle.counts(run_id) == {"ship": 1}
    assert requests_of(client, run_id) == []


def test_fix_answer_routes_its_input_to_the_notify_node(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input, session_id="sess-fix")

    request = pending_request(client, run_id)
    answer = _answer(client, request, {"choice": "fix", "input": {"instructions": "bump the changelog"}})
    assert answer.outcome == "accepted", answer

    view = wait_run(client, run_id)
    assert view["status"] == "done", view
    assert _node(view, "approve")["output"] == {"choice": "fix", "input": {"instructions": "bump the changelog"}}
    assert view["output"] == {"message": "bump the changelog"}
    assert oracle.counts(run_id) == {"fix": 1}
    messages = [m for m in listed(client, "sess-fix")["messages"] if m["run_id"] == run_id]
    notes = [m for m in messages if m["kind"] == "notify"]
    assert [m["body"] for m in notes] == [{"node_id": "fix", "message": "bump the changelog"}]
    assert all(m["session_id"] == "sess-fix" for m in messages)


@both_engines  # its hosts on SQLite, then on PostgreSQL
def test_two_clients_answering_at_once_one_wins_and_the_run_resumes_once(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input)
    request = pending_request(client, run_id)

    answerers = [ix.client("alice"), ix.client("bob")]
    choices = ["ship", "stop"]
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]
    failures: list[BaseException] = []

    def answer(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = _answer(answerers[index], request, {"choice": choices[index]},
                                     idempotency_key=f"key-{index}")
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=answer, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failures, failures
    assert sorted(r.outcome for r in results) == ["accepted", "conflict"], results
    winner = next(i for i, r in enumerate(results) if r.outcome == "accepted")
    loser = results[1 - winner]
    assert_one_line(loser.error)
    assert "answered already" in loser.error

    view = wait_run(client, run_id)
    assert view["status"] == "done", view
    won = choices[winner]
    assert _node(view, "approve")["output"] == {"choice": won}
    expected_node = {"ship": "ship", "stop": "stopped"}[won]
    assert oracle.counts(run_id) == {expected_node: 1}

    trace = events(ix.state_dir, run_id)
    settled = [e["seq"] for e in trace if e["kind"] == "interaction_settled"]
    assert len(settled) == 1, trace
    after = [e for e in trace if e["seq"] > settled[0]]
    # One resume: one wake (`run_requeued` with `after`: parked → queued), one claim, one
    # worker start (`run_resumed` with the node it resumes at: queued → running).
    wakes = [e["payload"] for e in after if e["kind"] == "run_requeued" and "after" in e["payload"]]
    assert wakes == [{"after": "decision.answer"}], trace
    assert len([e for e in after if e["kind"] == "run_claimed"]) == 1, trace
    starts = [e["payload"] for e in after if e["kind"] == "run_resumed" and "after" not in e["payload"]]
    assert starts == [{"current_node": "approve", "steps": 0}], trace
    assert [e["node_id"] for e in after if e["kind"] == "node_finished"] == ["approve", expected_node], trace
    assert [a["status"] for a in attempts(ix.state_dir, run_id, "approve")] == ["succeeded"]
    accepted = [s for s in submissions(ix.state_dir, request["request_id"]) if s["outcome"] == "accepted"]
    assert len(accepted) == 1 and accepted[0]["payload"] == {"choice": won}
    assert accepted[0]["provenance"]["kind"] == "human"
    assert accepted[0]["provenance"]["client_id"] == ["alice", "bob"][winner]


def test_replayed_answer_with_the_same_key_is_adopted_with_the_same_receipt(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client("replayer")
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input)
    request = pending_request(client, run_id)
    response = {"choice": "ship"}

    first = _answer(client, request, response, idempotency_key="answer-1")
    assert first.outcome == "accepted", first
    again = _answer(client, request, response, idempotency_key="answer-1")
    assert again.outcome == "adopted", again
    assert again.receipt == first.receipt and again.revision == first.revision

    # A reconnecting client (same client id, new connection) gets the same.
    reconnected = ix.client("replayer")
    later = _answer(reconnected, request, response, idempotency_key="answer-1")
    assert later.outcome == "adopted" and later.receipt == first.receipt, later
    # The same key for another answer is a conflict, not a second answer.
    other = _answer(reconnected, request, {"choice": "stop"}, idempotency_key="answer-1")
    assert other.outcome == "conflict", other
    assert_one_line(other.error)

    view = wait_run(client, run_id)
    assert view["status"] == "done" and view["output"] == {"shipped": "1.2"}, view
    assert len(submissions(ix.state_dir, request["request_id"])) == 1
    assert oracle.counts(run_id) == {"ship": 1}
    assert [e["kind"] for e in events(ix.state_dir, run_id)].count("interaction_settled") == 1


def test_invalid_answers_are_refused_and_the_run_keeps_waiting(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input)
    request = pending_request(client, run_id)
    revision = request["revision"]

    cases: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
        ("unknown choice", {"choice": "maybe"}, {}, "rejected", "unknown choice"),
        ("missing input", {"choice": "fix"}, {}, "rejected", "needs input"),
        ("wrong input name", {"choice": "fix", "input": {"why": "x"}}, {}, "rejected", "needs input"),
        ("extra input", {"choice": "ship", "input": {"instructions": "x"}}, {}, "rejected", "takes no input"),
        ("input too long", {"choice": "fix", "input": {"instructions": "x" * 21}}, {}, "rejected", "1..20"),
        ("input too short", {"choice": "fix", "input": {"instructions": ""}}, {}, "rejected", "1..20"),
        ("extra response key", {"choice": "ship", "note": "x"}, {}, "rejected", "'choice'"),
        ("stale expected_revision", {"choice": "ship"}, {"expected_revision": revision - 1}, "conflict",
         f"revision {revision}"),
    ]
    for name, response, kwargs, outcome, fragment in cases:
        answer = _answer(client, request, response, **kwargs)
        assert answer.outcome == outcome, (name, answer)
        assert fragment in assert_one_line(answer.error), (name, answer.error)
        view = wait_waiting(client, run_id, timeout=1)
        assert view["status"] == "parked" and view["park_reason"] == "waiting", (name, view)
        still = requests_of(client, run_id)
        assert [(r["request_id"], r["status"], r["revision"]) for r in still] == [
            (request["request_id"], "pending", revision)], (name, still)

    assert submissions(ix.state_dir, request["request_id"]) == []
    assert oracle.counts(run_id) == {}
    answer = _answer(client, request, {"choice": "fix", "input": {"instructions": "x" * 20}},
                     expected_revision=revision)
    assert answer.outcome == "accepted", answer
    view = wait_run(client, run_id)
    assert view["status"] == "done" and view["output"] == {"message": "x" * 20}, view


def test_a_paused_run_refuses_answers_until_it_is_resumed(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input)
    request = pending_request(client, run_id)

    paused = client.request("run.pause", run_id=run_id)
    assert paused.outcome == "accepted", paused
    refused = _answer(client, request, {"choice": "ship"})
    assert refused.outcome == "rejected", refused
    assert "paused" in assert_one_line(refused.error)
    view = wait_waiting(client, run_id, timeout=1)
    assert view["pause_requested"] is True
    assert [r["status"] for r in requests_of(client, run_id)] == ["pending"]
    assert submissions(ix.state_dir, request["request_id"]) == []

    resumed = client.request("run.resume", run_id=run_id)
    assert resumed.outcome == "accepted", resumed
    answer = _answer(client, request, {"choice": "ship"})
    assert answer.outcome == "accepted", answer
    view = wait_run(client, run_id)
    assert view["status"] == "done" and view["output"] == {"shipped": "1.2"}, view
    assert oracle.counts(run_id) == {"ship": 1}


def test_cancel_while_waiting_cancels_the_request(ix: Harness, tmp_path: Path) -> None:
    ix.host()
    client = ix.client()
    oracle, run_input = _inputs(tmp_path)
    run_id = start(client, "decide", run_input)
    request = pending_request(client, run_id)

    cancelled = client.request("run.cancel", run_id=run_id)
    assert cancelled.outcome == "accepted", cancelled
    view = wait_run(client, run_id, ("cancelled",), timeout=10)
    assert view["status"] == "cancelled"
    assert requests_of(client, run_id) == []
    assert rows(ix.state_dir, "SELECT status FROM interactive_request WHERE request_id = ?",
                (request["request_id"],)) == [{"status": "cancelled"}]

    refused = _answer(client, request, {"choice": "ship"})
    assert refused.outcome == "rejected", refused
    assert "cancelled" in assert_one_line(refused.error)
    assert submissions(ix.state_dir, request["request_id"]) == []
    assert run_view(client, run_id)["status"] == "cancelled"
    assert oracle.counts(run_id) == {}

