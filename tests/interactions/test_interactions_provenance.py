"""Who answered is kept with every accepted answer and submission, and `run.get` shows it.

Over the socket the host records the client id and session the request named and the sending
process as the kernel names it (SO_PEERCRED: pid and uid); through the embedding API, the embedding
process; by a deadline, the timeout (docs/security.md).
"""

from __future__ import annotations

import os

from interactions_support import Harness, pending_request, run_view, start, wait_run


def test_an_answer_over_the_socket_records_the_client_and_its_process(ix: Harness) -> None:
    ix.host()
    client = ix.client(client_id="ops-laptop")
    run_id = start(client, "decide", {"version": "3.1", "oracle": "/dev/null"})
    request = pending_request(client, run_id)
    answer = client.request("decision.answer", {"request_id": request["request_id"], "response": {"choice": "ship"},
                                                "session_id": "review-7"})
    assert answer.outcome == "accepted", answer
    wait_run(client, run_id)
    node = {n["node_id"]: n for n in run_view(client, run_id)["nodes"]}["approve"]
    assert node["answer"]["by"] == {"kind": "human", "client_id": "ops-laptop", "session_id": "review-7",
                                    "via": "socket", "pid": os.getpid(), "uid": os.getuid()}
    assert isinstance(node["answer"]["at"], float)


def test_an_agent_submission_and_an_embedded_answer_record_who_sent_them(ix: Harness) -> None:
    host = ix.host()
    client = ix.client(client_id="summarizer")
    agent_run = start(client, "summarizer", {"topic": "retries"}, session_id="agent-1")
    request = pending_request(client, agent_run)
    submitted = client.request("interaction.submit", {"request_id": request["request_id"], "session_id": "agent-1",
                                                      "value": {"summary": "Adds retries"}})
    assert submitted.outcome == "accepted", submitted
    wait_run(client, agent_run)
    by = {n["node_id"]: n for n in run_view(client, agent_run)["nodes"]}["summarize"]["answer"]["by"]
    assert (by["kind"], by["client_id"], by["session_id"], by["pid"]) == ("agent", "summarizer", "agent-1", os.getpid())

    checkpoint_run = start(client, "checkpointed", {"version": "1"})
    request = pending_request(client, checkpoint_run)
    host.answer_checkpoint(request["request_id"], {"items": ["a"]}, client_id="embedding-app")
    wait_run(client, checkpoint_run)
    by = {n["node_id"]: n for n in run_view(client, checkpoint_run)["nodes"]}["ask"]["answer"]["by"]
    assert by == {"kind": "human", "client_id": "embedding-app", "session_id": None, "via": "embedded",
                  "pid": os.getpid(), "uid": os.getuid()}


def test_a_default_applied_by_its_deadline_says_so(ix: Harness) -> None:
    ix.host()
    client = ix.client()
    run_id = start(client, "decide_quick", {"version": "1.2", "oracle": "/dev/null"})
    view = wait_run(client, run_id, timeout=30)
    by = {n["node_id"]: n for n in view["nodes"]}["approve"]["answer"]["by"]
    assert by["kind"] == "timeout" and isinstance(by["deadline_at"], float), by
