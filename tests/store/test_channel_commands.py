"""The channel commands with a chosen `now`: at-most-once effects, adapter fencing, answers once per update."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_store_regressions import Store

from piwf_actors.channels import registry
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


def _reserve_at(store: Store, request_id: str, now: float, **extra) -> dict:
    return store.call("channel.effect_reserve", {"profile": "ops", "adapter_epoch": "a1", "purpose": "delivery",
                                                 "request_id": request_id, "chat_id": 2002, **extra}, now)


def _fail_at(store: Store, effect: dict, now: float, **extra) -> dict:
    return store.call("channel.effect_settle", {"profile": "ops", "adapter_epoch": "a1",
                                                "effect_id": effect["effect_id"], "attempt": effect["attempt"],
                                                "outcome": "failed", "error": "not sent: error 400: chat not found",
                                                **extra}, now)


def _listed(store: Store, key: str) -> list[dict]:
    from piwf_actors.store import channel_queries
    from piwf_actors.store.reader import StoreReader

    reader = StoreReader(store.location)
    try:
        return channel_queries.deliveries_status(reader)[key]
    finally:
        reader.close()


def test_a_send_that_surely_failed_is_tried_again_with_back_off_for_as_long_as_the_decision_is_open(store) -> None:
    """Issue 18: after three sure failures a delivery was failed for good and listed nowhere."""
    request_id = _decision(store)
    _start(store)
    now = 1000.0
    effect = _reserve_at(store, request_id, now)
    assert effect["attempt"] == 1 and effect["message_id"] == f"{effect['effect_id']}-1"
    assert _reserve_at(store, request_id, now) == {"skip": "applying"}  # one attempt in flight at a time
    pauses = []
    for attempt in range(1, 13):
        settled = _fail_at(store, effect, now)
        pauses.append(settled["retry_at"] - now)
        assert _reserve_at(store, request_id, settled["retry_at"] - 0.01)["skip"] == "not due yet"
        now = settled["retry_at"]
        effect = _reserve_at(store, request_id, now)
        assert (effect["attempt"], effect["message_id"].rpartition("-")[0]) == (attempt + 1, settled["effect_id"])
    assert pauses[:5] == [1.0, 2.0, 4.0, 8.0, 16.0] and max(pauses) == 300.0  # doubling, at most 5 minutes
    # The service asked for more: it gets it.
    settled = _fail_at(store, effect, now, retry_after=900)
    assert settled["retry_at"] == now + 900
    [waiting] = _listed(store, "undelivered")
    assert (waiting["attempts"], waiting["retry_at"], waiting["error"]) == (13, now + 900,
                                                                           "not sent: error 400: chat not found")
    # A person need not wait: recover retry makes the next attempt due now.
    store.call("channel.recover", {"profile": "ops", "message_id": waiting["message_id"], "action": "retry"}, now)
    assert _reserve_at(store, request_id, now)["attempt"] == 14
    _fail_at(store, effect | {"attempt": 14}, now)
    # Once the decision is settled elsewhere there is nothing to deliver, and nothing to list.
    store.call("decision.answer", {"request_id": request_id, "response": {"choice": "stop"}}, now)
    assert _reserve_at(store, request_id, now + 3600) == {"skip": "the decision is no longer open"}
    assert _listed(store, "undelivered") == []


def test_a_chat_that_moved_is_remembered_and_the_next_attempt_is_due_at_once(store) -> None:
    request_id = _decision(store)
    _start(store)
    effect = _reserve_at(store, request_id, 1000.0)
    settled = _fail_at(store, effect, 1000.0, moved_from=2002, moved_to=-1002002)
    assert settled["retry_at"] == 1000.0
    assert _start(store, "a1")["moves"] == {"2002": "-1002002"}
    assert [(m["chat_id"], m["moved_to"]) for m in _listed(store, "moved_chats")] == [("2002", "-1002002")]


def test_an_unknown_outcome_waits_for_a_person_and_a_retry_sends_a_new_copy(store) -> None:
    request_id = _decision(store)
    _start(store)
    effect = _reserve(store, request_id)
    _settle(store, effect, "ambiguous")
    assert _reserve(store, request_id) == {"skip": "ambiguous"}
    [listed] = _listed(store, "ambiguous")
    assert listed["message_id"] == effect["message_id"]
    recovered = store.call("channel.recover", {"profile": "ops", "message_id": effect["message_id"],
                                               "action": "retry"})
    assert recovered["receipt"]["next_message_id"] is None
    assert _status(store, effect["effect_id"])[0] == "replaced"
    assert _reserve_at(store, request_id, 1000.0) == {"skip": "replaced"}  # the first copy is done with
    assert _reserve_at(store, request_id, 1000.0, copy=2) == {"skip": "the earlier copy was not replaced"}
    copy = _reserve_at(store, request_id, 1000.0, copy=1)
    assert copy["effect_id"] != effect["effect_id"] and copy["copy"] == 1
    _settle(store, copy, "applied", result={"chat_id": 2002, "message_id": 9})
    assert _listed(store, "ambiguous") == []
    # The replaced copy may be in the chat with buttons that no longer answer: listed until found.
    [unsettled] = _listed(store, "unsettled")
    assert unsettled["message_id"] == effect["message_id"] and "tap" in unsettled["why"]
    found = store.call("channel.effect_found", {"profile": "ops", "adapter_epoch": "a1", "stream": "telegram:b",
                                                "update_id": 1000, "found": {"effect_id": effect["effect_id"],
                                                                             "chat_id": 2002, "message_id": 8}})
    assert found == {"found": True}
    assert _listed(store, "unsettled") == []
    # Found, it is edited (the decision is still open: to say it was sent again).
    settle = store.call("channel.effect_reserve", {
        "profile": "ops", "adapter_epoch": "a1", "purpose": "settlement", "request_id": request_id,
        "chat_id": 2002, "delivery_effect_id": effect["effect_id"]})
    assert settle["attempt"] == 1
    assert store.call("channel.effect_reserve", {
        "profile": "ops", "adapter_epoch": "a1", "purpose": "settlement", "request_id": request_id,
        "chat_id": 2002, "copy": 1, "delivery_effect_id": copy["effect_id"]}) == {"skip": "the decision is still open"}


def test_a_tap_on_an_ambiguous_delivery_proves_it_arrived(store) -> None:
    request_id = _decision(store)
    _start(store)
    effect = _reserve(store, request_id)
    _settle(store, effect, "ambiguous")
    accepted = store.call("channel.answer", {
        "profile": "ops", "adapter_epoch": "a1", "stream": "telegram:b", "update_id": 5, "request_id": request_id,
        "expected_revision": 1, "response": {"choice": "ship"}, "user_id": 1001, "chat_id": 2002,
        "found": {"effect_id": effect["effect_id"], "chat_id": 2002, "message_id": 3}})
    assert accepted["status"] == "accepted"
    assert _status(store, effect["effect_id"])[0] == "applied"
    assert _listed(store, "ambiguous") == [] and _listed(store, "unsettled") == []


def test_an_edit_whose_outcome_is_unknown_is_made_again(store) -> None:
    request_id = _decision(store)
    _start(store)
    delivery = _reserve(store, request_id)
    _settle(store, delivery, "applied", result={"chat_id": 2002, "message_id": 5})
    store.call("decision.answer", {"request_id": request_id, "response": {"choice": "stop"}})
    args = {"profile": "ops", "adapter_epoch": "a1", "purpose": "settlement", "request_id": request_id,
            "chat_id": 2002, "delivery_effect_id": delivery["effect_id"]}
    edit = store.call("channel.effect_reserve", args)
    assert _settle(store, edit, "ambiguous")["status"] == "failed"
    again = store.call("channel.effect_reserve", args, 1001.0)
    assert again["attempt"] == 2
    # Cut off by a restart: an edit is made again, not left for a person.
    assert _start(store, "a2")["ambiguous"] == []
    assert _status(store, edit["effect_id"])[0] == "failed"


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
    delivery = _reserve(store, request_id)
    settlement = {"profile": "ops", "adapter_epoch": "a1", "purpose": "settlement", "request_id": request_id,
                  "chat_id": 2002, "delivery_effect_id": delivery["effect_id"]}
    assert store.call("channel.effect_reserve", settlement) == {"skip": "nothing was delivered to settle"}
    _settle(store, delivery, "applied", result={"chat_id": 2002, "message_id": 5})
    assert store.call("channel.effect_reserve", settlement) == {"skip": "the decision is still open"}
    store.call("decision.answer", {"request_id": request_id, "response": {"choice": "stop"}})
    assert _reserve(store, request_id)["skip"] in ("applied", "the decision is no longer open")
    assert store.call("channel.effect_reserve", settlement)["attempt"] == 1


def _answer(store: Store, request_id: str, update_id: int, choice: str = "ship", revision: int = 1,
            stream: str = "telegram:bot-a") -> dict:
    return store.call("channel.answer", {"profile": "ops", "adapter_epoch": "a1", "update_id": update_id,
                                         "stream": stream, "request_id": request_id, "expected_revision": revision,
                                         "response": {"choice": choice}, "user_id": 1001, "chat_id": 2002})


def _cursor(store: Store, stream: str = "telegram:bot-a") -> str:
    return store.db.execute_sql("SELECT cursor FROM channel_stream WHERE stream = ?", (stream,)).fetchone()[0]


def test_an_answer_is_applied_once_per_update_and_the_cursor_only_grows(store) -> None:
    request_id = _decision(store)
    _start(store)
    assert _answer(store, request_id, 1000, "unknown")["status"] == "refused"  # refused, but read
    assert _cursor(store) == "1001"
    accepted = _answer(store, request_id, 1001)
    assert accepted["status"] == "accepted" and accepted["choice"] == "ship"
    assert _answer(store, request_id, 1001) == {"status": "seen"}  # redelivered after a crash
    assert _answer(store, request_id, 1002, "stop")["status"] == "refused"  # answered already
    assert _cursor(store) == "1003"
    store.call("channel.cursor", {"profile": "ops", "adapter_epoch": "a1", "stream": "telegram:bot-a",
                                  "cursor": 10})
    assert _cursor(store) == "1003"
    [(provenance,)] = store.db.execute_sql("SELECT provenance FROM interactive_submission").fetchall()
    assert json.loads(provenance) == {"kind": "channel", "channel": "telegram", "profile": "ops", "user_id": "1001",
                                      "chat_id": "2002", "update_id": "1001"}
    assert store.run("r1")[0] == "queued"


def test_the_cursor_is_kept_per_bot_and_re_based_when_the_ids_restart(store) -> None:
    """Issue 18: one cursor per profile name skipped the updates of another bot, and of a bot whose
    update ids restarted."""
    request_id = _decision(store)
    _start(store)
    assert _answer(store, request_id, 5000, "unknown")["status"] == "refused"
    assert _cursor(store) == "5001"
    # Another bot under the same profile name counts from its own start.
    assert _answer(store, request_id, 7, "unknown", stream="telegram:bot-b")["status"] == "refused"
    assert (_cursor(store, "telegram:bot-b"), _cursor(store)) == ("8", "5001")
    # The first bot's ids restart at 3: re-based (only from where the adapter saw the cursor) …
    rebase = {"profile": "ops", "adapter_epoch": "a1", "stream": "telegram:bot-a", "cursor": 3, "expected": 4000}
    assert store.call("channel.cursor_rebase", rebase)["rebased"] is False
    assert store.call("channel.cursor_rebase", rebase | {"expected": 5001}) == {"cursor": "3", "generation": 1,
                                                                                 "rebased": True}
    # … and update 3 of the new generation is a new update, although an update 3 may have been seen before.
    accepted = _answer(store, request_id, 3)
    assert accepted["status"] == "accepted"
    assert _answer(store, request_id, 3) == {"status": "seen"}
    assert _cursor(store) == "4"


def test_an_answer_for_an_older_revision_is_refused(store) -> None:
    request_id = _decision(store)
    _start(store)
    assert _answer(store, request_id, 1, revision=0)["status"] == "refused"
    assert store.run("r1")[0] == "parked"


def test_recover_rules(store) -> None:
    request_id = _decision(store)
    _start(store)
    effect = _reserve(store, request_id)
    with pytest.raises(Rejected, match="not ambiguous or failed"):
        store.call("channel.recover", {"profile": "ops", "message_id": effect["message_id"], "action": "confirm"})
    with pytest.raises(NotFound):
        store.call("channel.recover", {"profile": "ops", "message_id": "chf_nope-1", "action": "confirm"})
    _settle(store, effect, "ambiguous")
    args = {"profile": "ops", "message_id": effect["message_id"], "action": "confirm", "client_id": "cli",
            "idempotency_key": "k1"}
    assert store.call("channel.recover", args)["outcome"] == "accepted"
    assert store.call("channel.recover", args)["outcome"] == "adopted"
    assert _status(store, effect["effect_id"])[0] == "applied"
    other = _decision(store, "r2")
    failed = _reserve(store, other)
    _settle(store, failed, "failed")
    with pytest.raises(Rejected, match="surely was not sent"):
        store.call("channel.recover", {"profile": "ops", "message_id": failed["message_id"], "action": "confirm"})
    stale = _decision(store, "r3")
    lost = _reserve(store, stale)
    _settle(store, lost, "ambiguous")
    store.call("decision.answer", {"request_id": stale, "response": {"choice": "stop"}})
    with pytest.raises(Rejected, match="no longer open"):
        store.call("channel.recover", {"profile": "ops", "message_id": lost["message_id"], "action": "retry"})


def test_a_retry_of_a_failed_delivery_whose_decision_closed_is_refused_not_promised(store) -> None:
    """A delivery is reserved only while its decision is open: a person's `retry` of a failed one after
    the decision closed would name an attempt that never comes (`next_message_id`), so it is refused,
    as the retry of an ambiguous one is, and nothing changes."""
    request_id = _decision(store)
    _start(store)
    failed = _reserve(store, request_id)
    _settle(store, failed, "failed")
    store.call("decision.answer", {"request_id": request_id, "response": {"choice": "stop"}})
    before = _status(store, failed["effect_id"])
    with pytest.raises(Rejected, match="no longer open"):
        store.call("channel.recover", {"profile": "ops", "message_id": failed["message_id"], "action": "retry"})
    assert _status(store, failed["effect_id"]) == before
    assert "skip" in _reserve(store, request_id)  # (never attempted again)


#: A channel type whose events are named by time and sequence ("<ISO time>/<n>", later ones sorting after):
#: its cursor is the last event handled, which no integer arithmetic could move.
EVENT_ORDER_ADAPTER = """
CHANNEL_TYPE = "roomchat"


class EventOrder:
    start = ""

    def confirms(self, cursor, update_id):
        return update_id <= cursor

    def past(self, cursor, update_id):
        return max(cursor, update_id)

    def later(self, cursor, other):
        return max(cursor, other)


UPDATE_ORDER = EventOrder()
"""


@pytest.fixture
def roomchat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "roomchat_order.py").write_text(EVENT_ORDER_ADAPTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "ADAPTERS", {**registry.ADAPTERS, "roomchat": "roomchat_order"})
    yield "roomchat"
    sys.modules.pop("roomchat_order", None)


def test_the_store_keeps_a_cursor_it_does_not_read(roomchat, store) -> None:
    """The stream's cursor is whatever the adapter's order says; the store only keeps it and asks."""
    started = store.call("channel.adapter_start", {"profile": "team", "adapter_epoch": "e1",
                                                   "stream": "roomchat:ws", "channel": "roomchat"})
    assert started["cursor"] is None  # never read: the adapter starts from its order's `start`
    args = {"profile": "team", "adapter_epoch": "e1", "stream": "roomchat:ws", "channel": "roomchat"}
    assert store.call("channel.cursor", {**args, "cursor": "2026-12-06T10:00:00Z/7"}) == {
        "cursor": "2026-12-06T10:00:00Z/7"}
    # An earlier cursor never moves it back: the adapter's `later` says which is further.
    assert store.call("channel.cursor", {**args, "cursor": "2026-12-06T09:59:59Z/9"}) == {
        "cursor": "2026-12-06T10:00:00Z/7"}
    # An event the cursor confirms was applied before: seen, by the adapter's `confirms`.
    answer = {**args, "update_id": "2026-12-06T09:00:00Z/1", "request_id": "req_x", "expected_revision": 1,
              "response": {"choice": "ship"}, "user_id": "U1", "chat_id": "C1"}
    assert store.call("channel.answer", answer) == {"status": "seen"}
    # A type no adapter is listed for is refused in one line.
    with pytest.raises(Rejected, match="no channel adapter for type 'slack'"):
        store.call("channel.cursor", {**args, "channel": "slack", "cursor": "x"})
