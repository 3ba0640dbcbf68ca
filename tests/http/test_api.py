"""The HTTP door's fixed paths, statuses and auth, against a real host and a real uvicorn on 127.0.0.1."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from http_support import Door, flow, one_line_error
from testsupport import wait_for

from piwf_actors.client import Client


def _pending(door: Door, run_id: str) -> dict:
    def found() -> dict | None:
        listed = door.viewer.get("/api/v1/interactions").json()["receipt"]
        return next((r for r in listed["requests"] if r["run_id"] == run_id), None)

    return wait_for(found, 30, f"the request of run {run_id}")


def test_the_fixed_paths_start_list_get_message_answer_and_cancel_with_their_statuses(door: Door) -> None:
    host = door.viewer.get("/api/v1/host")
    assert host.status_code == 200 and host.json()["outcome"] == "accepted"
    assert host.json()["receipt"]["role"] == "active"

    started = door.operator.post("/api/v1/runs", json={"workflow": flow("decides"), "input": {"version": "1.2"},
                                                       "priority": 3})
    assert started.status_code == 201, started.text
    assert started.json()["outcome"] == "accepted"
    run_id = started.json()["receipt"]["run_id"]

    listed = door.viewer.get("/api/v1/runs", params={"workflow": "decides"})
    assert listed.status_code == 200 and [r["run_id"] for r in listed.json()["receipt"]["runs"]] == [run_id]
    got = door.viewer.get(f"/api/v1/runs/{run_id}")
    assert got.status_code == 200 and got.json()["receipt"]["run_id"] == run_id
    assert got.json()["revision"] == got.json()["receipt"]["revision"]

    sent = door.operator.post(f"/api/v1/runs/{run_id}/messages", json={"topic": "note", "payload": {"n": 1}})
    assert sent.status_code == 200 and sent.json()["outcome"] == "accepted", sent.text

    request = _pending(door, run_id)
    answered = door.operator.post(f"/api/v1/interactions/{request['request_id']}/answer",
                                  json={"choice": "fix", "input": {"instructions": "add tests"}})
    assert answered.status_code == 200 and answered.json()["outcome"] == "accepted", answered.text
    done = door.wait_status(run_id, ("done",))
    assert done["output"] == {"choice": "fix", "input": {"instructions": "add tests"}}
    # Who answered: via http, the token's name (what `piwf show` prints from `answered_by`).
    by = next(n for n in done["nodes"] if n["node_id"] == "approve")["answer"]["by"]
    assert (by["via"], by["token"], by["kind"]) == ("http", "ops", "human")

    again = door.operator.post(f"/api/v1/interactions/{request['request_id']}/answer", json={"choice": "ship"})
    assert again.status_code == 409 and again.json()["outcome"] == "conflict", again.text

    cancelled = door.operator.post(f"/api/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 422 and cancelled.json()["outcome"] == "rejected"  # it has finished
    assert "\n" not in cancelled.json()["error"]


def test_a_checkpoint_is_answered_with_its_input_and_a_cancel_is_accepted(door: Door) -> None:
    run_id = door.operator.post("/api/v1/runs", json={"workflow": flow("asks")}).json()["receipt"]["run_id"]
    request = _pending(door, run_id)
    answered = door.operator.post(f"/api/v1/interactions/{request['request_id']}/answer", json={"input": "1.2.0"})
    assert answered.status_code == 200, answered.text
    assert door.wait_status(run_id, ("done",))["output"] == "1.2.0"

    waiting = door.operator.post("/api/v1/runs", json={"workflow": flow("asks")}).json()["receipt"]["run_id"]
    _pending(door, waiting)
    cancelled = door.operator.post(f"/api/v1/runs/{waiting}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["outcome"] == "accepted", cancelled.text
    door.wait_status(waiting, ("cancelled",))


def test_not_found_rejected_conflict_and_the_doors_own_errors(door: Door) -> None:
    missing = door.viewer.get("/api/v1/runs/run_nope")
    assert missing.status_code == 404 and missing.json()["outcome"] == "notFound"
    assert door.operator.post("/api/v1/runs/run_nope/cancel").status_code == 404
    bad_type = door.operator.post("/api/v1/runs", json={"workflow": 42})
    assert bad_type.status_code == 422 and bad_type.json()["outcome"] == "rejected"
    assert "workflow" in bad_type.json()["error"]
    unknown_field = door.operator.post("/api/v1/runs", json={"workflow": flow("quick"), "colour": "red"})
    assert unknown_field.status_code == 422 and "colour" in unknown_field.json()["error"]
    bad_query = door.viewer.get("/api/v1/runs", params={"limit": "many"})
    assert bad_query.status_code == 422 and bad_query.json()["outcome"] == "rejected"
    unknown_query = door.viewer.get("/api/v1/runs", params={"colour": "red"})
    assert unknown_query.status_code == 422 and "colour" in unknown_query.json()["error"]

    key = uuid.uuid4().hex
    first = door.operator.post("/api/v1/runs", json={"workflow": flow("quick"), "input": 1},
                               headers={"Idempotency-Key": key})
    other = door.operator.post("/api/v1/runs", json={"workflow": flow("quick"), "input": 2},
                               headers={"Idempotency-Key": key})
    assert first.status_code == 201 and other.status_code == 409 and other.json()["outcome"] == "conflict"

    assert door.operator.post("/api/v1/runs", content=b"{not json").status_code == 400
    assert "not JSON" in one_line_error(door.operator.post("/api/v1/runs", content=b"{not json"))
    assert door.operator.post("/api/v1/runs", content=b"[1, 2]").status_code == 400
    assert door.operator.post("/api/v1/runs", content=b'{"input": NaN}').status_code == 400
    deep = b"[" * 100_000 + b"]" * 100_000
    assert door.operator.post("/api/v1/runs", content=deep).status_code in (400, 413)
    huge = door.operator.post("/api/v1/runs", content=b'{"input": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    assert huge.status_code == 413 and "over" in one_line_error(huge)
    headers = door.viewer.get("/api/v1/host", headers={f"x-h{i}": "v" * 100 for i in range(70)})
    assert headers.status_code == 431 and one_line_error(headers)
    assert door.viewer.get("/api/v1/nothing").status_code == 404
    assert door.viewer.delete("/api/v1/runs").status_code == 405
    assert one_line_error(door.viewer.delete("/api/v1/runs"))


def test_same_idempotency_key_is_adopted_and_makes_one_run(door: Door) -> None:
    key = uuid.uuid4().hex
    body = {"workflow": flow("quick"), "input": {"n": 1}}
    first = door.operator.post("/api/v1/runs", json=body, headers={"Idempotency-Key": key})
    second = door.operator.post("/api/v1/runs", json=body, headers={"Idempotency-Key": key})
    assert (first.status_code, second.status_code) == (201, 200)
    assert (first.json()["outcome"], second.json()["outcome"]) == ("accepted", "adopted")
    assert first.json()["receipt"]["run_id"] == second.json()["receipt"]["run_id"]
    runs = door.viewer.get("/api/v1/runs", params={"workflow": "quick"}).json()["receipt"]["runs"]
    assert len(runs) == 1


def test_auth_no_token_wrong_token_slowed_viewer_forbidden_and_revoked(door: Door) -> None:
    anonymous = door.client(None)
    refused = anonymous.get("/api/v1/runs")
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert "Bearer" in one_line_error(refused)
    wrong = door.client("piwf_not-a-token")
    delays = []
    for _ in range(3):
        answer = wrong.get("/api/v1/runs")
        assert answer.status_code == 401 and one_line_error(answer) == "unknown or revoked token"
        delays.append(answer.json()["delay_s"])
    assert delays[0] < delays[1] < delays[2]  # each failure from this address waits longer than the last

    assert door.viewer.get("/api/v1/runs").status_code == 200
    forbidden = door.viewer.post("/api/v1/runs", json={"workflow": flow("quick")})
    assert forbidden.status_code == 403 and "operator" in one_line_error(forbidden)
    assert door.viewer.get("/api/v1/runs", params={"workflow": "quick"}).json()["receipt"]["runs"] == []

    # A good sign-in clears the address's failures.
    assert door.operator.get("/api/v1/host").status_code == 200
    assert wrong.get("/api/v1/runs").json()["delay_s"] == delays[0]

    revoked = door.socket.request("http_token.revoke", {"name": "eye"})
    assert revoked.outcome == "accepted"
    gone = door.viewer.get("/api/v1/runs")
    assert gone.status_code == 401 and one_line_error(gone) == "unknown or revoked token"
    listed = door.socket.request("http_token.list").receipt["tokens"]
    assert [(t["name"], t["role"], t["revoked_at"] is not None) for t in listed] == [
        ("eye", "viewer", True), ("ops", "operator", False)]
    assert all("token_sha256" not in t for t in listed)


def test_a_standby_serves_reads_and_answers_writes_503(state_dir: Path, other_state_dir: Path) -> None:
    from http_support import add_token, start_door

    shared = f"sqlite://{other_state_dir}/shared.db"
    active, _ = start_door(state_dir / "a", database=shared, lease_s=300.0, host_id="host-a")
    standby, standby_base = start_door(state_dir / "b", database=shared, lease_s=300.0, host_id="host-b")
    try:
        assert standby.role == "standby"
        with Client(active.paths.root) as client:
            token = add_token(client, "ops", "operator")  # written by the active host, read by the standby
        with httpx.Client(base_url=standby_base, headers={"Authorization": f"Bearer {token}"}) as http:
            host = http.get("/api/v1/host")
            assert host.status_code == 200 and host.json()["receipt"]["role"] == "standby"
            assert http.get("/api/v1/runs").status_code == 200
            refused = http.post("/api/v1/runs", json={"workflow": flow("quick")})
            assert refused.status_code == 503 and refused.json()["outcome"] == "unavailable"
            assert refused.json()["error"].startswith("standby host; the active host is host-a")
    finally:
        standby.stop("test teardown")
        active.stop("test teardown")
