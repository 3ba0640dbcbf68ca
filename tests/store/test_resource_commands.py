"""The resource commands with a chosen `now`: generation and resource_version, the queue and its back-off,
claims that expire, at-most-once effects, finalizers and deletion, owned runs waking their resource."""

from __future__ import annotations

import json

import pytest
from test_store_regressions import Store

from piwf_actors.errors import ClaimLost, NotFound, Rejected

TOKEN = "c" * 64
REF = {"manager": "builds", "key": "repo-a"}


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


def _apply(store: Store, spec: dict, now: float = 1000.0, **extra) -> dict:
    args = {**REF, "spec": spec, "initial_status": {"phase": "new"}, "project_path": "/p",
            "manager_path": "/p/.piwf/resource-managers/builds.py", "manager_digest": "d1", **extra}
    return store.call("resource.apply", args, now)["receipt"]


def _claim(store: Store, now: float, epoch: str = "e1") -> dict | None:
    return store.call("reconcile.claim", {"token_hash": TOKEN, "launch_id": epoch, "claim_lease_s": 120}, now)


def _msg(store: Store, claim: dict, op: str, payload: dict, now: float) -> dict:
    return store.call("reconcile.message", {**REF, "claim_generation": claim["claim_generation"],
                                            "launch_id": claim["launch_id"], "token_hash": TOKEN,
                                            "message_id": "m", "op": op, "payload": payload}, now)


def _finish(store: Store, claim: dict, now: float, result: str = "done", **payload) -> dict:
    return _msg(store, claim, "finish", {"result": result, "generation": claim["resource"]["generation"], **payload},
                now)


def _row(store: Store) -> dict:
    cursor = store.db.execute_sql("SELECT * FROM resource WHERE manager = ? AND resource_key = ?",
                                  (REF["manager"], REF["key"]))
    row = cursor.fetchone()
    return {} if row is None else dict(zip([d[0] for d in cursor.description], row, strict=True))


def _events(store: Store) -> list[tuple[str, dict]]:
    return [(kind, json.loads(payload) if payload else None) for kind, payload in store.db.execute_sql(
        "SELECT kind, payload FROM resource_event WHERE manager = ? AND resource_key = ? ORDER BY seq",
        (REF["manager"], REF["key"])).fetchall()]


def test_generation_grows_with_the_spec_and_resource_version_with_every_change(store) -> None:
    created = _apply(store, {"n": 1})
    assert (created["generation"], created["resource_version"], created["changed"]) == (1, 1, True)
    assert created["status"] == {"phase": "new"} and created["queued"]
    same = _apply(store, {"n": 1}, initial_status={"ignored": True})
    assert (same["generation"], same["resource_version"], same["changed"]) == (1, 1, False)
    claim = _claim(store, 1001.0)
    _finish(store, claim, 1002.0, status_patch={"phase": "ready"}, finalizers=["builds/cleanup"])
    row = _row(store)
    assert (row["generation"], row["resource_version"], row["observed_generation"]) == (1, 2, 1)  # status: version only
    changed = _apply(store, {"n": 2}, 1003.0)
    assert (changed["generation"], changed["resource_version"], changed["queued"]) == (2, 3, True)
    moved = _apply(store, {"n": 2}, 1004.0, manager_digest="d2")  # the manager file changed: version, not generation
    assert (moved["generation"], moved["resource_version"]) == (2, 4)
    with pytest.raises(Exception, match="belongs to project"):
        _apply(store, {"n": 2}, project_path="/elsewhere")


def test_errors_back_off_one_two_four_seconds_and_a_done_clears_the_queue(store) -> None:
    _apply(store, {"n": 1})
    now, waits = 1000.0, []
    for _ in range(4):
        assert _claim(store, now - 0.001) is None  # not due yet
        claim = _claim(store, now)
        _finish(store, claim, now, result="error", error="boom")
        waits.append(round(_row(store)["available_at"] - now, 3))
        now = _row(store)["available_at"]
    assert waits == [1.0, 2.0, 4.0, 8.0]
    assert _row(store)["consecutive_errors"] == 4 and _row(store)["last_error"] == "boom"
    claim = _claim(store, now)
    _finish(store, claim, now, result="requeue_after", after_s=30)
    assert (_row(store)["available_at"], _row(store)["consecutive_errors"]) == (now + 30, 0)
    claim = _claim(store, now + 30)
    _finish(store, claim, now + 30)
    assert _row(store)["available_at"] is None and _claim(store, now + 1000) is None
    finished = [payload for kind, payload in _events(store) if kind == "reconcile_finished"]
    assert [item["result"] for item in finished] == ["error"] * 4 + ["requeue_after", "done"]
    assert finished[0]["requeue_after_s"] == 1.0 and finished[4]["requeue_after_s"] == 30.0


def test_an_enqueue_while_it_runs_brings_it_back_at_once(store) -> None:
    _apply(store, {"n": 1})
    claim = _claim(store, 1000.0)
    assert _claim(store, 1000.0, "e2") is None  # claimed: nobody else reconciles it
    _apply(store, {"n": 2}, 1001.0)  # the spec changed while the old one was reconciled
    _finish(store, claim, 1002.0)
    assert _row(store)["available_at"] <= 1002.0 and _row(store)["observed_generation"] == 1  # due at once
    assert _claim(store, 1002.0, "e3")["resource"]["generation"] == 2


def test_a_stale_claim_writes_nothing_and_an_expired_one_is_taken_over_with_its_effect_ambiguous(store) -> None:
    _apply(store, {"n": 1})
    first = _claim(store, 1000.0)
    reserved = _msg(store, first, "effect_reserve", {"key": "deploy"}, 1001.0)["value"]
    assert reserved["state"] == "reserved"
    assert _msg(store, first, "effect_reserve", {"key": "deploy"}, 1001.0)["value"] == reserved  # a resend
    assert _claim(store, 1119.0, "e2") is None  # the lease (120 s) still holds
    second = _claim(store, 1121.0, "e2")
    assert second["claim_generation"] == first["claim_generation"] + 1
    with pytest.raises(ClaimLost):
        _finish(store, first, 1122.0)
    assert _msg(store, second, "effect_reserve", {"key": "deploy"}, 1122.0)["value"] == {
        "state": "ambiguous", "effect_id": reserved["effect_id"]}
    assert ("effect_ambiguous", {"effect_id": reserved["effect_id"], "effect_key": "deploy"}) in _events(store)
    assert _row(store)["consecutive_errors"] == 1  # the lost reconcile counted as an error
    # A person says it happened: the next reconcile gets the result without running it.
    store.call("effect.resolve", {"effect_id": reserved["effect_id"], "action": "confirm", "output": {"v": 7}}, 1123.0)
    assert _row(store)["available_at"] <= 1123.0  # due at once
    assert _msg(store, second, "effect_reserve", {"key": "deploy"}, 1124.0)["value"] == {
        "state": "applied", "effect_id": reserved["effect_id"], "result": {"v": 7}}


def test_an_effect_settles_once_and_a_failed_one_may_run_again(store) -> None:
    _apply(store, {"n": 1})
    claim = _claim(store, 1000.0)
    effect = _msg(store, claim, "effect_reserve", {"key": "a"}, 1000.0)["value"]
    _msg(store, claim, "effect_settle", {"effect_id": effect["effect_id"], "ok": False, "error": "nope"}, 1000.0)
    again = _msg(store, claim, "effect_reserve", {"key": "a"}, 1001.0)["value"]
    assert again == {"state": "reserved", "effect_id": effect["effect_id"]}
    _msg(store, claim, "effect_settle", {"effect_id": effect["effect_id"], "ok": True, "result": [1]}, 1001.0)
    assert _msg(store, claim, "effect_settle", {"effect_id": effect["effect_id"], "ok": True, "result": [1]},
                1001.0)["value"] == {"status": "applied"}  # a resend
    assert _msg(store, claim, "effect_reserve", {"key": "a"}, 1002.0)["value"]["result"] == [1]
    kinds = [kind for kind, _ in _events(store) if kind.startswith("effect_")]
    assert kinds == ["effect_applying", "effect_failed", "effect_applying", "effect_applied"]


def test_an_effect_cut_off_by_the_timeout_is_ambiguous_and_never_runs_again_by_itself(store) -> None:
    _apply(store, {"n": 1})
    claim = _claim(store, 1000.0)
    effect = _msg(store, claim, "effect_reserve", {"key": "a"}, 1000.0)["value"]
    _msg(store, claim, "effect_settle", {"effect_id": effect["effect_id"], "ok": False, "interrupted": True,
                                         "error": "NodeTimeout: timed out after 30 s"}, 1000.0)
    assert _msg(store, claim, "effect_reserve", {"key": "a"}, 1001.0)["value"] == {
        "state": "ambiguous", "effect_id": effect["effect_id"]}
    assert [kind for kind, _ in _events(store) if kind.startswith("effect_")] == ["effect_applying",
                                                                                  "effect_ambiguous"]


def test_delete_waits_for_the_finalizers_then_removes_the_resource_and_keeps_its_events(store) -> None:
    _apply(store, {"n": 1})
    claim = _claim(store, 1000.0)
    _finish(store, claim, 1000.0, finalizers=["builds/cleanup"])
    deleting = store.call("resource.delete", REF, 1001.0)["receipt"]
    assert deleting["deleting"] and deleting["queued"]
    with pytest.raises(Rejected, match="being deleted"):
        _apply(store, {"n": 2}, 1001.5)
    claim = _claim(store, 1002.0)
    assert claim["resource"]["deleting"]
    _finish(store, claim, 1002.0)  # done, but the finalizer is still there: it stays
    assert _row(store)["deletion_requested_at"] == 1001.0
    store.call("resource.reconcile", REF, 1003.0)
    claim = _claim(store, 1003.0)
    _finish(store, claim, 1003.0, finalizers=[])
    assert _row(store) == {}
    assert [kind for kind, _ in _events(store)][-2:] == ["reconcile_finished", "resource_deleted"]
    with pytest.raises(NotFound):
        store.call("resource.reconcile", REF, 1004.0)


def test_an_owned_run_is_ensured_once_and_its_end_wakes_the_resource(store) -> None:
    _apply(store, {"n": 1})
    claim = _claim(store, 1000.0)
    asked = _msg(store, claim, "workflow_ensure", {"key": "build-1", "input": {"n": 1}, "name": "build"}, 1000.0)
    assert asked["value"]["missing"]
    spec = {"workflow": "build", "workflow_path": None, "workflow_attr": None, "definition_digest": "x", "source": None}
    made = _msg(store, claim, "workflow_ensure", {"key": "build-1", "input": {"n": 1}, "name": "build", "spec": spec},
                1000.0)["value"]
    assert made["status"] == "queued" and made["created"]
    again = _msg(store, claim, "workflow_ensure", {"key": "build-1", "name": "build"}, 1000.0)["value"]
    assert again["run_id"] == made["run_id"] and not again["created"]
    _finish(store, claim, 1001.0)
    assert _row(store)["available_at"] is None
    store.call("run.cancel", {"run_id": made["run_id"]}, 1002.0)  # the run ends (cancelled): the owner is due
    assert _row(store)["available_at"] == 1002.0


def test_a_reconcile_whose_worker_died_is_an_error_and_a_host_restart_is_not(store) -> None:
    _apply(store, {"n": 1})
    claim = _claim(store, 1000.0)
    effect = _msg(store, claim, "effect_reserve", {"key": "a"}, 1000.0)["value"]
    settled = store.call("reconcile.exit", {**REF, "claim_generation": claim["claim_generation"],
                                            "launch_id": "e1", "token_hash": TOKEN, "outcome": "crashed",
                                            "diagnostic": "killed by SIGKILL"}, 1001.0)
    assert settled["settled"]
    row = _row(store)
    assert (row["available_at"], row["consecutive_errors"], row["claim_token_hash"]) == (1002.0, 1, None)
    assert store.db.execute_sql("SELECT status FROM resource_effect WHERE effect_id = ?",
                                (effect["effect_id"],)).fetchone()[0] == "ambiguous"
    _claim(store, 1002.0, "e2")
    store.epoch = store.call("lease.acquire", {"host_id": "h2", "token_hash": "u" * 64, "pid": 1,
                                               "process_start_identity": "2", "lease_s": 6000}, 9000.0)["epoch"]
    assert store.call("resource.recover", {}, 9000.0) == {"builds/repo-a": "queued"}
    row = _row(store)
    assert row["available_at"] <= 9000.0 and (row["consecutive_errors"], row["claim_token_hash"]) == (1, None)
