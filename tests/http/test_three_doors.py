"""The socket, the embedding handle and HTTP are three doors onto one catalog: each write operation made
through all three with one client id and one idempotency key is one command — the first door's answer
`accepted`, the other two `adopted` with the same receipt."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from http_support import Door, flow
from test_api import _pending

from piwf_actors.client import Client

CLIENT = "three-doors"


def _socket(door: Door) -> Client:
    client = Client(door.host.paths.root, client_id=CLIENT)
    door.clients.append(client)  # closed with the HTTP clients
    return client


def _http(door: Door, key: str, method_path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    method, path = method_path.split(" ", 1)
    answer = door.operator.request(method, path, json=body, headers={"Idempotency-Key": key,
                                                                     "Piwf-Client-Id": CLIENT})
    return answer.json()


def _three(door: Door, socket: Callable[[str], Any], embedded: Callable[[str], Any],
           http: Callable[[str], dict[str, Any]]) -> list[dict[str, Any]]:
    key = uuid.uuid4().hex
    first = socket(key)
    answers = [{"outcome": first.outcome, "receipt": first.receipt}]
    second = embedded(key)
    answers.append({"outcome": second["outcome"], "receipt": second["receipt"]})
    answers.append(http(key))
    assert [a["outcome"] for a in answers] == ["accepted", "adopted", "adopted"], answers
    assert answers[0]["receipt"] == answers[1]["receipt"] == answers[2]["receipt"], answers
    return answers


def _waiting_run(door: Door, attr: str) -> tuple[str, dict[str, Any]]:
    run_id = door.operator.post("/api/v1/runs", json={"workflow": flow(attr), "input": {"version": "1"}}
                                ).json()["receipt"]["run_id"]
    return run_id, _pending(door, run_id)


def test_run_start_through_three_doors_is_one_run(door: Door) -> None:
    sock, host = _socket(door), door.host
    project = os.getcwd()
    payload = {"workflow": flow("quick"), "input": {"n": 3}, "project_path": project}
    answers = _three(
        door,
        lambda key: sock.request("run.start", payload, idempotency_key=key),
        lambda key: host.start_run(payload["workflow"], payload["input"], project_path=project, client_id=CLIENT,
                                   idempotency_key=key),
        lambda key: _http(door, key, "POST /api/v1/runs", payload))
    runs = door.viewer.get("/api/v1/runs", params={"workflow": "quick"}).json()["receipt"]["runs"]
    assert [r["run_id"] for r in runs] == [answers[0]["receipt"]["run_id"]]


@pytest.mark.parametrize("operation", ["run.pause", "run.resume", "run.cancel"])
def test_run_control_through_three_doors_is_one_command(door: Door, operation: str) -> None:
    sock, host = _socket(door), door.host
    run_id, _request = _waiting_run(door, "asks")
    if operation == "run.resume":
        assert door.operator.post(f"/api/v1/runs/{run_id}/pause").status_code == 200
    method = {"run.pause": host.pause_run, "run.resume": host.resume_run, "run.cancel": host.cancel_run}[operation]
    _three(door,
           lambda key: sock.request(operation, run_id=run_id, idempotency_key=key),
           lambda key: method(run_id, client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, f"POST /api/v1/runs/{run_id}/{operation.split('.')[1]}"))


def test_message_send_through_three_doors_is_one_message(door: Door) -> None:
    sock, host = _socket(door), door.host
    run_id, _request = _waiting_run(door, "asks")
    _three(door,
           lambda key: sock.request("message.send", {"run_id": run_id, "topic": "t", "payload": {"a": 1}},
                                    idempotency_key=key),
           lambda key: host.send_message(run_id, "t", {"a": 1}, client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, f"POST /api/v1/runs/{run_id}/messages", {"topic": "t", "payload": {"a": 1}}))
    view = door.viewer.get(f"/api/v1/runs/{run_id}").json()["receipt"]
    assert len(view["mailbox"]) == 1, view["mailbox"]


def test_answers_through_three_doors_are_one_answer(door: Door) -> None:
    sock, host = _socket(door), door.host
    run_id, request = _waiting_run(door, "decides")
    rid = request["request_id"]
    _three(door,
           lambda key: sock.request("decision.answer", {"request_id": rid, "response": {"choice": "ship"}},
                                    idempotency_key=key),
           lambda key: host.answer_decision(rid, "ship", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, f"POST /api/v1/interactions/{rid}/answer", {"choice": "ship"}))
    assert door.wait_status(run_id, ("done",))["output"] == {"choice": "ship"}

    run_id, request = _waiting_run(door, "asks")
    rid = request["request_id"]
    _three(door,
           lambda key: sock.request("checkpoint.answer", {"request_id": rid, "input": "v2"}, idempotency_key=key),
           lambda key: host.answer_checkpoint(rid, "v2", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, f"POST /api/v1/interactions/{rid}/answer", {"input": "v2"}))
    assert door.wait_status(run_id, ("done",))["output"] == "v2"


def test_restart_through_three_doors_is_one_new_run(door: Door) -> None:
    sock, host = _socket(door), door.host
    run_id = door.operator.post("/api/v1/runs", json={"workflow": flow("quick")}).json()["receipt"]["run_id"]
    revision = door.wait_status(run_id, ("done",))["revision"]
    answers = _three(
        door,
        lambda key: sock.request("run.restart", run_id=run_id, expected_revision=revision, idempotency_key=key),
        lambda key: host.restart_run(run_id, expected_revision=revision, client_id=CLIENT, idempotency_key=key),
        lambda key: _http(door, key, f"POST /api/v1/runs/{run_id}/restart", {"expected_revision": revision}))
    children = door.viewer.get("/api/v1/runs", params={"workflow": "quick"}).json()["receipt"]["runs"]
    assert sorted(r["run_id"] for r in children) == sorted([run_id, answers[0]["receipt"]["run_id"]])


def test_event_emit_through_three_doors_is_one_event(door: Door) -> None:
    sock, host = _socket(door), door.host
    payload = {"name": "order.created", "data": {"order_id": "o-1"}}

    def embedded(key: str) -> dict[str, Any]:
        receipt = host.emit_event("order.created", {"order_id": "o-1"}, client_id=CLIENT, idempotency_key=key)
        adopted = receipt.pop("adopted")
        return {"outcome": "adopted" if adopted else "accepted", "receipt": receipt}

    answers = _three(door, lambda key: sock.request("event.emit", payload, idempotency_key=key), embedded,
                     lambda key: _http(door, key, "POST /api/v1/events", payload))
    listed = door.viewer.get("/api/v1/events", params={"name": "order.created"}).json()["receipt"]["events"]
    assert [item["event_id"] for item in listed] == [answers[0]["receipt"]["event_id"]]
    shown = door.viewer.get(f"/api/v1/events/{listed[0]['event_id']}").json()["receipt"]
    assert shown["data"] == {"order_id": "o-1"} and shown["deliveries"] == [] and shown["woke"] == []
    assert door.viewer.post("/api/v1/events", json=payload).status_code == 403  # a viewer reads, never emits
    refused = door.operator.post("/api/v1/events", json={"name": " spaced "})
    assert refused.status_code == 422 and "no spaces at the ends" in refused.json()["error"]
