"""Idempotency over the wire: mutating operations are recorded, read-only ones are not.

A mutating request (run.start, run.cancel, run.pause, run.resume,
run.restart, effect.resolve, state.prune with apply) is recorded under
(client_id, idempotency_key) with a fingerprint of (operation, run_id,
expected_revision, payload): a replay is answered `adopted` with the
recorded receipt and revision, whatever happened since; the same key with
another request is a `conflict`. Read-only operations are not recorded, so
a key may be reused for them freely.

The client library retries a request whose connection dropped with the
same request id and key, so the mutation happens once.
"""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest
from testsupport import hosts_on_postgres

from piwf_actors.client import connection as client_module
from piwf_actors.client.connection import Client


def _replay(conn, operation: str, payload=None, *, key: str, **fields) -> tuple[dict, dict]:
    """Send a request twice under one key; the first must be accepted, the second adopted and equal."""
    first = conn.request(operation, payload, idempotency_key=key, **fields)
    assert first["outcome"] == "accepted", first
    second = conn.request(operation, payload, idempotency_key=key, **fields)
    assert second["outcome"] == "adopted", second
    assert second["receipt"] == first["receipt"], (first, second)
    assert second.get("revision") == first.get("revision"), (first, second)
    assert "error" not in second
    return first, second


def _runs(conn) -> list[dict]:
    return conn.ok("run.list")["receipt"]["runs"]


def test_run_start_replay_is_adopted_once(host, connect, proto) -> None:
    conn = connect(host)
    payload = {"workflow": proto.flow("quick"), "input": {"n": 1}}
    first, _ = _replay(conn, "run.start", payload, key="start-1")
    assert first["receipt"]["status"] == "queued" and first["revision"] == first["receipt"]["revision"] == 1
    proto.wait_run(conn, first["receipt"]["run_id"])
    # Still the recorded receipt, though the run has moved on since.
    late = conn.request("run.start", payload, idempotency_key="start-1")
    assert late["outcome"] == "adopted" and late["receipt"] == first["receipt"]
    # Another client with the same key is another request.
    other = connect(host, client_id="someone-else")
    assert other.request("run.start", payload, idempotency_key="start-1")["outcome"] == "accepted"
    assert len(_runs(conn)) == 2
    conflict = conn.request("run.start", {**payload, "input": {"n": 2}}, idempotency_key="start-1")
    assert conflict["outcome"] == "conflict", conflict


def test_run_cancel_replay_is_adopted(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("three"), "input": {"sleep": 5}})["receipt"]["run_id"]
    first, _ = _replay(conn, "run.cancel", key="cancel-1", run_id=run_id)
    assert first["receipt"]["run_id"] == run_id
    assert first["receipt"]["status"] in ("cancelling", "cancelled")
    assert proto.wait_run(conn, run_id)["status"] == "cancelled"
    # After the run ended, the replay still returns the recorded receipt (a fresh cancel is refused).
    late = conn.request("run.cancel", idempotency_key="cancel-1", run_id=run_id)
    assert late["outcome"] == "adopted" and late["receipt"] == first["receipt"]
    assert conn.request("run.cancel", run_id=run_id)["outcome"] == "rejected"
    # The fingerprint covers the envelope's run_id and expected_revision.
    assert conn.request("run.cancel", idempotency_key="cancel-1", run_id=run_id,
                        expected_revision=1)["outcome"] == "conflict"


def test_run_pause_and_resume_replays_are_adopted(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("three"), "input": {"sleep": 0.3}})["receipt"]["run_id"]
    paused, _ = _replay(conn, "run.pause", key="pause-1", run_id=run_id)
    assert paused["receipt"]["status"] in ("parked", "pausing"), paused
    view = proto.wait_run(conn, run_id, ("parked",))
    assert view["park_reason"] == "paused"
    resumed, _ = _replay(conn, "run.resume", key="resume-1", run_id=run_id)
    assert resumed["receipt"]["status"] == "queued" and resumed["revision"] > paused["revision"]
    assert proto.wait_run(conn, run_id)["status"] == "done"
    assert conn.request("run.pause", idempotency_key="pause-1", run_id=run_id)["receipt"] == paused["receipt"]


def test_run_restart_replay_is_adopted_and_starts_one_run(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("quick"), "input": 7})["receipt"]["run_id"]
    revision = proto.wait_run(conn, run_id)["revision"]
    first, _ = _replay(conn, "run.restart", key="restart-1", run_id=run_id, expected_revision=revision)
    child = first["receipt"]
    assert child["parent_run_id"] == run_id and child["run_id"] != run_id and child["status"] == "queued"
    assert sorted(r["run_id"] for r in _runs(conn)) == sorted([run_id, child["run_id"]])
    view = proto.wait_run(conn, child["run_id"])
    assert view["parent_run_id"] == run_id and view["input"] == 7
    # A stale expected revision under a fresh key is a conflict.
    stale = conn.request("run.restart", run_id=run_id, expected_revision=revision - 1)
    assert stale["outcome"] == "conflict" and "revision" in stale["error"]
    assert len(_runs(conn)) == 2


def test_effect_resolve_replay_is_adopted(make_host, connect, proto, state_dir) -> None:
    host = make_host()
    conn = connect(host)
    marker = state_dir / "effect-marker"
    run_id = conn.ok("run.start", {"workflow": proto.flow("effectful"),
                                   "input": {"oracle": str(marker)}})["receipt"]["run_id"]
    proto.wait_for(marker.exists, 15, "the shell node to start")

    def worker_pid() -> int | None:
        for active in host.status()["scheduler"]["active"]:
            if active["run_id"] == run_id and active.get("pid"):
                return int(active["pid"])
        return None

    os.kill(proto.wait_for(worker_pid, 10, "the run's worker"), signal.SIGKILL)
    view = proto.wait_run(conn, run_id, ("parked",))
    assert view["park_reason"] == "ambiguous_effect", view
    (effect,) = [e for e in view["effects"] if e["status"] == "ambiguous"]
    payload = {"effect_id": effect["effect_id"], "action": "retry"}
    first, _ = _replay(conn, "effect.resolve", payload, key="resolve-1")
    assert first["receipt"]["effect_id"] == effect["effect_id"] and first["receipt"]["run_id"] == run_id
    done = proto.wait_run(conn, run_id)
    assert done["status"] == "done", done
    assert conn.request("effect.resolve", payload, idempotency_key="resolve-1")["receipt"] == first["receipt"]
    # A fresh key is a new request: the effect is no longer ambiguous.
    assert conn.request("effect.resolve", payload)["outcome"] == "rejected"


def test_applied_prune_is_recorded_dry_run_is_not(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]
    proto.wait_run(conn, run_id)
    before = time.time() + 60
    dry = conn.request("state.prune", {"before": before}, idempotency_key="prune-1")
    assert dry["outcome"] == "accepted" and dry["receipt"]["applied"] is False
    assert dry["receipt"]["run_count"] == 1
    # The dry run did not take the key: the applied prune under it is accepted, then adopted.
    first, _ = _replay(conn, "state.prune", {"before": before, "apply": True}, key="prune-1")
    assert first["receipt"]["applied"] is True and first["receipt"]["runs"] == [run_id]
    assert _runs(conn) == []


def test_read_only_operations_are_not_recorded(host, connect, proto) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]
    proto.wait_run(conn, run_id)
    key = "read-key"
    first = conn.request("run.get", idempotency_key=key, run_id=run_id)
    second = conn.request("run.get", idempotency_key=key, run_id=run_id)
    assert (first["outcome"], second["outcome"]) == ("accepted", "accepted")
    for operation, fields in (("run.list", {}), ("run.events", {"run_id": run_id}), ("host.status", {}),
                              ("state.status", {}), ("state.verify", {})):
        answer = conn.request(operation, idempotency_key=key, **fields)
        assert answer["outcome"] == "accepted", (operation, answer)
    # The key is still unused as far as mutations go.
    started = conn.request("run.start", {"workflow": proto.flow("quick")}, idempotency_key=key)
    assert started["outcome"] == "accepted", started
    # … and a read with a key a mutation took is still just a read.
    assert conn.request("run.list", idempotency_key=key)["outcome"] == "accepted"


# --- the client library ------------------------------------------------------------------------


def _dropping_send(monkeypatch, after_send) -> list[dict]:
    """Patch the client's send_frame: the first frame is sent, then `after_send()` runs and the
    socket is closed before the answer is read (whatever the host sent is lost with it).
    Returns the frames sent."""
    real = client_module.send_frame
    sent: list[dict] = []

    def send(sock: socket.socket, value: dict, *args, **kwargs) -> None:
        real(sock, value, *args, **kwargs)
        sent.append(value)
        if len(sent) == 1:
            after_send()
            sock.close()

    monkeypatch.setattr(client_module, "send_frame", send)
    return sent


def test_client_retry_after_a_lost_answer_is_adopted(host, connect, proto, monkeypatch) -> None:
    observer = connect(host)
    # The host applies the request; the connection drops before the answer is read.
    sent = _dropping_send(monkeypatch, lambda: proto.wait_for(lambda: _runs(observer), 10, "the run to exist"))
    client = Client(socket_path=str(host.paths.socket), timeout=10)
    try:
        answer = client.request("run.start", {"workflow": proto.flow("quick"), "input": "once"})
    finally:
        client.close()
    assert len(sent) == 2, "one retry"
    assert sent[0] == sent[1], "the retry is the same request: same request id and idempotency key"
    assert answer.outcome == "adopted", answer
    runs = _runs(observer)
    assert [r["run_id"] for r in runs] == [answer.receipt["run_id"]]


def test_client_retry_after_an_early_drop_still_starts_one_run(host, connect, proto, monkeypatch) -> None:
    observer = connect(host)
    sent = _dropping_send(monkeypatch, lambda: None)  # dropped at once: the host may not have read it yet
    client = Client(socket_path=str(host.paths.socket), timeout=10)
    try:
        answer = client.request("run.start", {"workflow": proto.flow("quick"), "input": "once"})
    finally:
        client.close()
    assert len(sent) == 2 and sent[0] == sent[1]
    assert answer.outcome in ("accepted", "adopted"), answer
    time.sleep(0.3)  # the first copy, if the host read it, has been applied by now
    assert [r["run_id"] for r in _runs(observer)] == [answer.receipt["run_id"]]


@pytest.mark.parametrize("operation", ["run.cancel", "run.pause"])
def test_client_retry_of_run_control_is_adopted(operation, host, connect, proto, monkeypatch) -> None:
    observer = connect(host)
    run_id = observer.ok("run.start", {"workflow": proto.flow("three"), "input": {"sleep": 5}})["receipt"]["run_id"]

    def applied() -> bool:
        view = observer.ok("run.get", run_id=run_id)["receipt"]
        return view["cancel_requested"] or view["pause_requested"] or view["status"] in ("cancelled", "parked")

    _dropping_send(monkeypatch, lambda: proto.wait_for(applied, 10, f"{operation} to be applied"))
    client = Client(socket_path=str(host.paths.socket), timeout=10)
    try:
        answer = client.request(operation, run_id=run_id)
    finally:
        client.close()
    assert answer.outcome == "adopted", answer
    assert answer.receipt["run_id"] == run_id
    observer.request("run.cancel", run_id=run_id)


def test_interaction_answers_replays_are_adopted(host, connect, proto) -> None:
    conn = connect(host)
    started = {}
    for name, payload in (("asks", {}), ("decides", {"input": {"version": "1.2.0"}}),
                          ("asks_agent", {"session_id": "sess-1"}), ("tells", {"session_id": "sess-1"})):
        started[name] = conn.ok("run.start", {"workflow": proto.flow(name), **payload})["receipt"]["run_id"]

    def pending() -> dict | None:
        receipt = conn.ok("interaction.list")["receipt"]
        ready = len(receipt["requests"]) == 3 and any(m["kind"] == "notify" for m in receipt["messages"])
        return receipt if ready else None

    receipt = proto.wait_for(pending, 15, lambda: "three pending requests and a notify message: "
                             f"{conn.ok('interaction.list')['receipt']}")
    by_kind = {r["kind"]: r for r in receipt["requests"]}

    _replay(conn, "checkpoint.answer", {"request_id": by_kind["checkpoint"]["request_id"], "submission_id": "cp-1",
                                        "input": {"version": "1.2.0"}}, key="answer-cp")
    decision = by_kind["decision"]
    _replay(conn, "decision.answer", {"request_id": decision["request_id"], "submission_id": "d-1",
                                      "response": {"choice": "ship"}},
            key="answer-d", expected_revision=decision["revision"])
    submitted, _ = _replay(conn, "interaction.submit", {"request_id": by_kind["agent"]["request_id"],
                                                        "submission_id": "a-1", "session_id": "sess-1",
                                                        "value": {"summary": "Adds retries"}}, key="submit-a")
    assert submitted["receipt"]["outcome"] == "accepted"
    (message,) = [m for m in receipt["messages"] if m["kind"] == "notify"]
    _replay(conn, "interaction.ack", {"message_id": message["message_id"]}, key="ack-m")

    assert proto.wait_run(conn, started["asks"])["output"] == {"version": "1.2.0"}
    assert proto.wait_run(conn, started["decides"])["output"] == {"choice": "ship"}
    assert proto.wait_run(conn, started["asks_agent"])["status"] == "done"
    after = conn.ok("interaction.list")["receipt"]
    assert after["requests"] == [] and message["message_id"] not in [m["message_id"] for m in after["messages"]]


def test_a_replay_after_its_run_was_pruned_is_adopted_not_run_again(host, connect, proto) -> None:
    """Idempotency records outlive prune: the replay answers the first receipt and starts nothing."""
    conn = connect(host)
    payload = {"workflow": proto.flow("quick"), "input": {"n": 9}}
    first = conn.request("run.start", payload, idempotency_key="pruned-start")
    assert first["outcome"] == "accepted", first
    run_id = first["receipt"]["run_id"]
    proto.wait_run(conn, run_id)
    pruned = conn.request("state.prune", {"before": time.time() + 60, "apply": True})
    assert pruned["outcome"] == "accepted" and pruned["receipt"]["run_count"] == 1, pruned
    assert conn.request("run.get", run_id=run_id)["outcome"] == "notFound"
    replay = conn.request("run.start", payload, idempotency_key="pruned-start")
    assert replay["outcome"] == "adopted", replay
    assert replay["receipt"] == first["receipt"]
    assert _runs(conn) == []


# --- refusals are recorded too ------------------------------------------------------------------


def test_a_refused_request_is_recorded_and_its_replay_is_refused_the_same_way(host, connect, proto) -> None:
    """A client that lost the answer to a refusal and resends with the same key must not get another
    outcome because the state moved on meanwhile: the refusal is recorded like an acceptance."""
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("three"), "input": {"sleep": 5}})["receipt"]["run_id"]
    early = conn.request("run.resume", idempotency_key="resume-early", run_id=run_id)
    assert early["outcome"] == "rejected" and "not paused" in early["error"], early
    assert conn.request("run.pause", run_id=run_id)["outcome"] == "accepted"
    proto.wait_for(lambda: conn.ok("run.get", run_id=run_id)["receipt"]["park_reason"] == "paused", 20,
                   "the run to park paused")
    # The run is paused now, but the replay of the refused resume is refused as it was, and changes nothing.
    late = conn.request("run.resume", idempotency_key="resume-early", run_id=run_id)
    assert (late["outcome"], late["error"]) == ("rejected", early["error"]), late
    assert conn.ok("run.get", run_id=run_id)["receipt"]["status"] == "parked"
    # The same key with another request is still a conflict; a fresh key resumes the run.
    assert conn.request("run.resume", idempotency_key="resume-early", run_id=run_id,
                        expected_revision=1)["outcome"] == "conflict"
    assert conn.request("run.resume", idempotency_key="resume-now", run_id=run_id)["outcome"] == "accepted"
    assert conn.request("run.cancel", run_id=run_id)["outcome"] == "accepted"


def test_a_refused_start_is_recorded_even_when_its_workflow_appears_later(host, connect, tmp_path) -> None:
    conn = connect(host)
    path = tmp_path / "later.py"
    payload = {"workflow": f"{path}:later", "input": {"n": 1}}
    first = conn.request("run.start", payload, idempotency_key="start-later")
    assert first["outcome"] == "rejected", first
    path.write_text("from piwf_actors.workflows import compute, define_workflow\n"
                    "later = define_workflow(name='later', start_at='a', nodes={'a': compute(run=lambda ctx: 1)},"
                    " edges=[])\n")
    replay = conn.request("run.start", payload, idempotency_key="start-later")
    assert (replay["outcome"], replay["error"]) == ("rejected", first["error"]), replay
    assert conn.ok("run.list")["receipt"]["runs"] == []
    assert conn.request("run.start", payload, idempotency_key="start-now")["outcome"] == "accepted"


def test_an_accepted_start_replayed_after_its_workflow_file_broke_is_adopted(host, connect, proto,
                                                                             tmp_path) -> None:
    conn = connect(host)
    path = tmp_path / "fragile.py"
    path.write_text("from piwf_actors.workflows import compute, define_workflow\n"
                    "fragile = define_workflow(name='fragile', start_at='a', nodes={'a': compute(run=lambda ctx: 1)},"
                    " edges=[])\n")
    payload = {"workflow": f"{path}:fragile"}
    first = conn.request("run.start", payload, idempotency_key="start-fragile")
    assert first["outcome"] == "accepted", first
    path.write_text("this is not python (\n")
    replay = conn.request("run.start", payload, idempotency_key="start-fragile")
    assert replay["outcome"] == "adopted" and replay["receipt"] == first["receipt"], replay


def test_a_backup_replay_is_adopted_with_the_first_receipt(host, connect, proto, tmp_path) -> None:
    conn = connect(host)
    run_id = conn.ok("run.start", {"workflow": proto.flow("quick")})["receipt"]["run_id"]
    proto.wait_run(conn, run_id)
    destination = str(tmp_path / "copy.db")
    if hosts_on_postgres():
        # PostgreSQL backups are pg_dump's (docs/postgresql.md): the refusal is recorded like any other.
        refused = conn.request("state.backup", {"destination": destination}, idempotency_key="backup-1")
        assert refused["outcome"] == "rejected" and "pg_dump" in refused["error"], refused
        replay = conn.request("state.backup", {"destination": destination}, idempotency_key="backup-1")
        assert (replay["outcome"], replay["error"]) == ("rejected", refused["error"]), replay
        return
    first, _ = _replay(conn, "state.backup", {"destination": destination}, key="backup-1")
    assert first["receipt"]["destination"] == destination and first["receipt"]["verified"] is True
    # Another key is another backup: the file is there already.
    again = conn.request("state.backup", {"destination": destination}, idempotency_key="backup-2")
    assert again["outcome"] == "rejected" and "already exists" in again["error"], again
    # … and that refusal is recorded too.
    assert conn.request("state.backup", {"destination": destination},
                        idempotency_key="backup-2")["error"] == again["error"]
