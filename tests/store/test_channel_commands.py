"""The channel commands with a chosen `now`: at-most-once effects, adapter fencing, answers once per update."""

from __future__ import annotations

import json

import pytest
from test_store_regressions import Store

from piwf_actors.errors import AdapterReplaced, NotFound, Rejected

DECISION = {"kind": "decision", "audience": "operator", "title": "Ship?", "summary": "", "blocks": [],
            "choices": {"ship": {"label": "Ship it", "input": None}, "stop": {"label": "Stop", "input": None}},
            "default_response": None, "timeout_s": None}


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


def _decision(store: Store, run_id: str = "r1") -> str:
    store.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
    store.claim()
    store.worker(run_id, "ready", {"start_at": "approve"})
    asked = store.worker(run_id, "interaction_request", {"node_id": "approve", "attempt_id": f"att-{run_id}",
                                                         "kind": "decision", "contract": DECISION})
    return asked["value"]["request_id"]


def _start(store: Store, epoch: str = "a1", reason: str = "host_restarted_without_receipt") -> dict:
    return store.call("channel.adapter_start", {"profile": "ops", "adapter_epoch": epoch, "reason": reason})


def _reserve(store: Store, request_id: str, purpose: str = "delivery", epoch: str = "a1") -> dict:
    return store.call("channel.effect_reserve", {"profile": "ops", "adapter_epoch": epoch, "purpose": purpose,
                                                 "request_id": request_id, "chat_id": 2002})


def _settle(store: Store, effect: dict, outcome: str, epoch: str = "a1", result: dict | None = None) -> dict:
    return store.call("channel.effect_settle", {"profile": "ops", "adapter_epoch": epoch,
                                                "effect_id": effect["effect_id"], "attempt": effect["attempt"],
                                                "outcome": outcome, "result": result, "error": "x"})


def _status(store: Store, effect_id: str) -> tuple:
    return store.db.execute_sql("SELECT status, attempt, error FROM channel_effect WHERE effect_id = ?",
                                (effect_id,)).fetchone()


def test_an_effect_is_attempted_at_most_three_times_and_never_after_an_unknown_outcome(store) -> None:
    request_id = _decision(store)
    _start(store)
    first = _reserve(store, request_id)
    assert first["attempt"] == 1 and first["message_id"] == f"{first['effect_id']}-1"
    assert _reserve(store, request_id) == {"skip": "applying"}  # one attempt in flight at a time
    _settle(store, first, "failed")
    second = _reserve(store, request_id)
    assert (second["effect_id"], second["attempt"]) == (first["effect_id"], 2)
    _settle(store, second, "failed")
    third = _reserve(store, request_id)
    _settle(store, third, "failed")
    assert _reserve(store, request_id) == {"skip": "out of attempts"}

    other = _decision(store, "r2")
    effect = _reserve(store, other)
    _settle(store, effect, "ambiguous")
    assert _reserve(store, other) == {"skip": "ambiguous"}
    # A person says: send it again. One more attempt, beyond the automatic ones if need be.
    recovered = store.call("channel.recover", {"profile": "ops", "message_id": effect["message_id"],
                                               "action": "retry"})
    assert recovered["receipt"]["next_message_id"] == f"{effect['effect_id']}-2"
    again = _reserve(store, other)
    assert again["attempt"] == 2
    _settle(store, again, "applied", result={"chat_id": 2002, "message_id": 7})
    assert _reserve(store, other) == {"skip": "applied"}
    assert store.db.execute_sql("SELECT status FROM interactive_request WHERE request_id = ?",
                                (other,)).fetchone()[0] == "presenting"


def test_a_new_adapter_fences_the_old_one_and_makes_its_in_flight_effects_ambiguous(store) -> None:
    request_id = _decision(store)
    _start(store, "a1")
    effect = _reserve(store, request_id)
    started = _start(store, "a2", "adapter_exited_without_receipt")
    assert started["ambiguous"] == [effect["message_id"]]
    assert _status(store, effect["effect_id"]) == ("ambiguous", 1, "adapter_exited_without_receipt")
    with pytest.raises(AdapterReplaced):
        _settle(store, effect, "applied", epoch="a1")
    with pytest.raises(AdapterReplaced):
        _reserve(store, request_id, epoch="a1")
    with pytest.raises(Rejected):  # the new adapter cannot settle what the old one started either
        _settle(store, effect, "applied", epoch="a2")


def test_settlement_only_for_a_delivered_decision_that_has_closed(store) -> None:
    request_id = _decision(store)
    _start(store)
    assert _reserve(store, request_id, "settlement") == {"skip": "the decision is still open"}
    delivery = _reserve(store, request_id)
    _settle(store, delivery, "applied", result={"chat_id": 2002, "message_id": 5})
    store.call("decision.answer", {"request_id": request_id, "response": {"choice": "stop"}})
    assert _reserve(store, request_id)["skip"] in ("applied", "the decision is no longer open")
    assert _reserve(store, request_id, "settlement")["attempt"] == 1


def _answer(store: Store, request_id: str, update_id: int, choice: str = "ship", revision: int = 1) -> dict:
    return store.call("channel.answer", {"profile": "ops", "adapter_epoch": "a1", "update_id": update_id,
                                         "request_id": request_id, "expected_revision": revision,
                                         "response": {"choice": choice}, "user_id": 1001, "chat_id": 2002})


def _cursor(store: Store) -> int:
    return store.db.execute_sql("SELECT cursor FROM channel_cursor WHERE profile = 'ops'").fetchone()[0]


def test_an_answer_is_applied_once_per_update_and_the_cursor_only_grows(store) -> None:
    request_id = _decision(store)
    _start(store)
    assert _answer(store, request_id, 1000, "unknown")["status"] == "refused"  # refused, but read
    assert _cursor(store) == 1001
    accepted = _answer(store, request_id, 1001)
    assert accepted["status"] == "accepted" and accepted["choice"] == "ship"
    assert _answer(store, request_id, 1001) == {"status": "seen"}  # redelivered after a crash
    assert _answer(store, request_id, 1002, "stop")["status"] == "refused"  # answered already
    assert _cursor(store) == 1003
    store.call("channel.cursor", {"profile": "ops", "adapter_epoch": "a1", "cursor": 10})
    assert _cursor(store) == 1003
    [(provenance,)] = store.db.execute_sql("SELECT provenance FROM interactive_submission").fetchall()
    assert json.loads(provenance) == {"kind": "channel", "channel": "telegram", "profile": "ops", "user_id": 1001,
                                      "chat_id": 2002, "update_id": 1001}
    assert store.run("r1")[0] == "queued"


def test_an_answer_for_an_older_revision_is_refused(store) -> None:
    request_id = _decision(store)
    _start(store)
    assert _answer(store, request_id, 1, revision=0)["status"] == "refused"
    assert store.run("r1")[0] == "parked"


def test_recover_rules(store) -> None:
    request_id = _decision(store)
    _start(store)
    effect = _reserve(store, request_id)
    with pytest.raises(Rejected, match="not ambiguous"):
        store.call("channel.recover", {"profile": "ops", "message_id": effect["message_id"], "action": "confirm"})
    with pytest.raises(NotFound):
        store.call("channel.recover", {"profile": "ops", "message_id": "chf_nope-1", "action": "confirm"})
    _settle(store, effect, "ambiguous")
    args = {"profile": "ops", "message_id": effect["message_id"], "action": "confirm", "client_id": "cli",
            "idempotency_key": "k1"}
    assert store.call("channel.recover", args)["outcome"] == "accepted"
    assert store.call("channel.recover", args)["outcome"] == "adopted"
    assert _status(store, effect["effect_id"])[0] == "applied"
