"""The socket, the embedding handle and HTTP are three doors onto one catalog: each write operation made
through all three with one client id and one idempotency key is one command — the first door's answer
`accepted`, the other two `adopted` with the same receipt. Every write route of the HTTP door is made so:
run start and control, messages, answers, agent submissions, effect resolutions, schedule control and
resource operations."""

from __future__ import annotations

import hashlib
import os
import signal
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from http_support import Door, flow, open_door
from test_api import _pending
from testsupport import wait_for

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


def test_an_agent_submission_through_three_doors_is_one_submission(door: Door) -> None:
    sock, host = _socket(door), door.host
    run_id, request = _waiting_run(door, "asks_agent")
    rid, value = request["request_id"], {"summary": "one line"}
    key = uuid.uuid4().hex
    first = sock.request("interaction.submit", {"request_id": rid, "value": value}, idempotency_key=key)
    assert first.outcome == "accepted", first
    submission = first.receipt["submission_id"]
    # The handle returns the submission's id: the same one, no second submission.
    assert host.submit_agent(rid, value, client_id=CLIENT, idempotency_key=key) == submission
    third = _http(door, key, f"POST /api/v1/interactions/{rid}/submit", {"value": value})
    assert third["outcome"] == "adopted" and third["receipt"]["submission_id"] == submission, third
    view = door.wait_status(run_id, ("done",))
    assert view["output"] == value
    node = next(n for n in view["nodes"] if n["node_id"] == "summarize")
    assert node["answer"]["by"]["client_id"] == CLIENT, node  # the first door's submission is the one taken


def _worker_pid(door: Door, run_id: str) -> int | None:
    for active in door.host.status()["scheduler"]["active"]:
        if active["run_id"] == run_id and active.get("pid"):
            return int(active["pid"])
    return None


def test_an_effect_resolution_through_three_doors_is_one_resolution(door: Door, state_dir: Path) -> None:
    sock, host = _socket(door), door.host
    marker = state_dir / "effect-marker"
    run_id = door.operator.post("/api/v1/runs", json={"workflow": flow("effectful"), "input": {"oracle": str(marker)}}
                                ).json()["receipt"]["run_id"]
    wait_for(marker.exists, 15, "the shell node to start")
    os.kill(wait_for(lambda: _worker_pid(door, run_id), 10, "the run's worker"), signal.SIGKILL)
    parked = door.wait_status(run_id, ("parked",))
    assert parked["park_reason"] == "ambiguous_effect", parked
    (effect,) = [e for e in parked["effects"] if e["status"] == "ambiguous"]
    effect_id = effect["effect_id"]
    _three(door,
           lambda key: sock.request("effect.resolve", {"effect_id": effect_id, "action": "retry"}, idempotency_key=key),
           lambda key: host.resolve_effect(effect_id, "retry", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, f"POST /api/v1/effects/{effect_id}/resolve", {"action": "retry"}))
    view = door.wait_status(run_id, ("done",))
    resolved = [e for e in door.viewer.get(f"/api/v1/runs/{run_id}/events").json()["receipt"]["events"]
                if e["kind"] == "effect_resolved"]
    assert len(resolved) == 1, resolved
    assert view["nodes"][0]["output"]["stdout"].strip() == "again"  # retried once


SCHEDULED = """
from piwf_actors.workflows import compute, define_schedule, define_workflow

ticked = define_workflow(name="ticked", start_at="a", nodes={"a": compute(run=lambda ctx: "tick")}, edges=[])
nightly = define_schedule(name="nightly", workflow=ticked, every_s=86400)
"""

MANAGER = """
from piwf_actors.workflows import define_resource_manager

def reconcile(ctx):
    return {"result": "done", "status_patch": {"generation": ctx.generation}}

box = define_resource_manager("box", reconcile=reconcile, timeout_s=30)
"""


@pytest.fixture
def project_door(state_dir: Path, tmp_path: Path) -> Iterator[tuple[Door, Path]]:
    """A door whose host runs a project's schedule (`nightly`, once a day) and resource manager (`box`)."""
    project = tmp_path / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "resource-managers").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "scheduled.py").write_text(textwrap.dedent(SCHEDULED))
    (project / ".piwf" / "resource-managers" / "box.py").write_text(textwrap.dedent(MANAGER))
    with open_door(state_dir, projects=(str(project),)) as door:
        yield door, project


def _schedule(door: Door) -> dict[str, Any]:
    def loaded() -> dict[str, Any] | None:
        listed = door.viewer.get("/api/v1/schedules").json()["receipt"]["schedules"]
        # Loaded, and its row recorded: paused, or its next fire known (the keeper publishes what it
        # loaded before it records the next fire; a pause before that record finds no schedule row).
        return next((s for s in listed if s["name"] == "nightly" and s["loaded"]
                     and (s["paused"] or s["next_fire_at"])), None)

    return wait_for(loaded, 30, lambda: f"the schedule nightly, loaded and recorded: {door.viewer.get('/api/v1/schedules').json()}")


def test_schedule_control_through_three_doors_is_one_command_each(project_door: tuple[Door, Path]) -> None:
    door, _project = project_door
    sock, host = _socket(door), door.host
    _schedule(door)
    _three(door,
           lambda key: sock.request("schedule.pause", {"name": "nightly"}, idempotency_key=key),
           lambda key: host.pause_schedule("nightly", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, "POST /api/v1/schedules/nightly/pause"))
    assert _schedule(door)["paused"] is True
    _three(door,
           lambda key: sock.request("schedule.resume", {"name": "nightly"}, idempotency_key=key),
           lambda key: host.resume_schedule("nightly", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, "POST /api/v1/schedules/nightly/resume"))
    assert _schedule(door)["paused"] is False
    answers = _three(door,
                     lambda key: sock.request("schedule.trigger", {"name": "nightly"}, idempotency_key=key),
                     lambda key: host.trigger_schedule("nightly", client_id=CLIENT, idempotency_key=key),
                     lambda key: _http(door, key, "POST /api/v1/schedules/nightly/trigger"))
    fired = answers[0]["receipt"]["run_id"]
    door.wait_status(fired, ("done",))
    runs = door.viewer.get("/api/v1/runs", params={"workflow": "ticked"}).json()["receipt"]["runs"]
    assert [r["run_id"] for r in runs] == [fired]  # one fire, one run


def test_resource_operations_through_three_doors_are_one_command_each(project_door: tuple[Door, Path]) -> None:
    door, project = project_door
    sock, host = _socket(door), door.host
    digest = hashlib.sha256((project / ".piwf" / "resource-managers" / "box.py").read_bytes()).hexdigest()
    applied = sock.request("resource.apply", {"manager": "box", "key": "one", "spec": {"size": 1},
                                              "project_path": str(project), "digest": digest})
    assert applied.outcome == "accepted", applied

    def resource() -> dict[str, Any] | None:
        answer = door.viewer.get("/api/v1/resources/box/one")
        return answer.json()["receipt"] if answer.status_code == 200 else None

    wait_for(lambda: (resource() or {}).get("status", {}).get("generation") is not None or None, 30,
             "the first reconcile")
    _three(door,
           lambda key: sock.request("resource.reconcile", {"manager": "box", "key": "one"}, idempotency_key=key),
           lambda key: host.reconcile_resource("box", "one", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, "POST /api/v1/resources/box/one/reconcile"))
    _three(door,
           lambda key: sock.request("resource.delete", {"manager": "box", "key": "one"}, idempotency_key=key),
           lambda key: host.delete_resource("box", "one", client_id=CLIENT, idempotency_key=key),
           lambda key: _http(door, key, "POST /api/v1/resources/box/one/delete"))
    wait_for(lambda: resource() is None, 30, "the resource to be gone")
    again = _http(door, uuid.uuid4().hex, "POST /api/v1/resources/box/one/delete")
    assert again["outcome"] == "notFound", again


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
