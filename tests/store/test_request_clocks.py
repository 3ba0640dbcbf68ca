"""A request's deadline counts only while the run could be answered, with a chosen `now` (both engines).

Pausing a waiting run stops its requests' clocks (time left kept, `deadline_at` cleared);
`interaction.expire` far past the old deadline changes nothing; `run.resume` restarts them from
what was left. A request created while a pause is requested starts stopped. Every kind of request
(checkpoint, agent step, decision with a default) keeps the same rule.
"""

from __future__ import annotations

import pytest
from test_store_regressions import Store

CONTRACTS = {
    "checkpoint": {"kind": "checkpoint", "prompt": "p"},
    "agent": {"kind": "agent", "prompt": "p", "max_submissions": 1, "timeout_s": 10},
    "decision": {"kind": "decision", "audience": "ops", "title": "t", "choices": {"yes": {"label": "Y", "input": None}},
                 "default_response": {"choice": "yes"}, "timeout_s": 10},
}
#: What a deadline does once it is applied, per kind.
EXPIRED = {"checkpoint": "failed", "agent": "failed", "decision": "default_applied"}


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


def _waiting(store: Store, kind: str, now: float) -> str:
    """A run parked waiting on a `kind` request with a 10 s deadline, asked at `now`."""
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}}, now)
    store.claim(now)
    store.worker("r1", "ready", {"start_at": "n"}, now)
    asked = store.worker("r1", "interaction_request", {
        "node_id": "n", "attempt_id": "att1", "kind": kind, "contract": CONTRACTS[kind], "after_s": 10,
        "default_response": CONTRACTS[kind].get("default_response")}, now)
    return asked["value"]["request_id"]


def _clock(store: Store, request_id: str) -> tuple:
    return store.db.execute_sql("SELECT status, deadline_at, paused_remaining_s FROM interactive_request "
                                "WHERE request_id = ?", (request_id,)).fetchone()


@pytest.mark.parametrize("kind", sorted(CONTRACTS))
def test_a_paused_request_keeps_its_time_left_and_goes_on_from_it_after_resume(store, kind) -> None:
    request_id = _waiting(store, kind, 1000.0)
    assert _clock(store, request_id) == ("pending", 1010.0, None)
    store.call("run.pause", {"run_id": "r1"}, 1003.0)
    assert _clock(store, request_id) == ("pending", None, 7.0)
    # Long past the old deadline: nothing expires while the run is paused.
    assert store.call("interaction.expire", {}, 5000.0) == {"expired": {}}
    assert store.run("r1") == ("parked", "waiting", 1)
    store.call("run.resume", {"run_id": "r1"}, 6000.0)
    assert _clock(store, request_id) == ("pending", 6007.0, None)
    assert store.call("interaction.expire", {}, 6006.9) == {"expired": {}}
    assert store.call("interaction.expire", {}, 6007.0) == {"expired": {request_id: EXPIRED[kind]}}


def test_a_request_made_while_a_pause_is_requested_starts_with_its_clock_stopped(store) -> None:
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    store.claim()
    store.worker("r1", "ready", {"start_at": "n"})
    store.call("run.pause", {"run_id": "r1"}, 1001.0)  # while the worker runs the node before the checkpoint
    asked = store.worker("r1", "interaction_request", {"node_id": "n", "attempt_id": "att1", "kind": "checkpoint",
                                                       "contract": CONTRACTS["checkpoint"], "after_s": 10}, 1002.0)
    request_id = asked["value"]["request_id"]
    assert _clock(store, request_id) == ("pending", None, 10.0)
    assert store.call("interaction.expire", {}, 6000.0) == {"expired": {}}
    store.call("run.resume", {"run_id": "r1"}, 6500.0)
    assert _clock(store, request_id) == ("pending", 6510.0, None)


def test_a_deadline_already_passed_when_the_run_is_paused_keeps_nothing_left(store) -> None:
    """The host was down past the deadline (wall-clock time counts then) and a pause came first."""
    request_id = _waiting(store, "checkpoint", 1000.0)
    store.call("run.pause", {"run_id": "r1"}, 1050.0)
    assert _clock(store, request_id) == ("pending", None, 0.0)
    store.call("run.resume", {"run_id": "r1"}, 2000.0)
    assert store.call("interaction.expire", {}, 2000.0) == {"expired": {request_id: "failed"}}


def test_answers_to_a_paused_run_are_refused_and_accepted_after_resume(store) -> None:
    request_id = _waiting(store, "checkpoint", 1000.0)
    store.call("run.pause", {"run_id": "r1"}, 1001.0)
    refused = store.raw("checkpoint.answer", {"request_id": request_id, "input": {"ok": 1}}, 1002.0)
    assert not refused.ok and "paused" in refused.error
    store.call("run.resume", {"run_id": "r1"}, 1003.0)
    store.call("checkpoint.answer", {"request_id": request_id, "input": {"ok": 1}}, 1004.0)
    assert _clock(store, request_id)[0] == "settled"
