"""The channel commands for notifications with a chosen `now`, on both engines: a `notify` with an
audience is a session message that channels send as a channel effect (purpose `notification`) under
the same at-most-once rules as a decision's delivery; it is wanted for a day after it was written,
whatever became of its run; a pruned run takes its notifications' effects with it."""

from __future__ import annotations

import json
import os
import time

import pytest
from test_store_regressions import Store

from piwf_actors.actors.channel_plan import next_work
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.errors import Rejected
from piwf_actors.store import channel_queries, metrics_queries
from piwf_actors.store.reader import StoreReader


@pytest.fixture
def store(database):
    s = Store(database)
    # Now is the wall clock's (what `channel.status` lists is still wanted as of the wall clock), taken
    # when the test starts; a lease that spans every `now` used here (the store's own is taken at its
    # fixed test time).
    s.now = time.time()
    s.epoch = s.call("lease.acquire", {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(),
                                       "process_start_identity": "1", "lease_s": 100 * 86400},
                     s.now - 20 * 86400)["epoch"]
    yield s
    s.db.close()


def _notified(store: Store, run_id: str, audience: str | None, now: float | None = None, message: str = "done") -> str:
    """A run that finished on a notify node; returns the outbox message's id."""
    now = store.now if now is None else now
    store.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}}, now)
    store.claim(now)
    store.worker(run_id, "ready", {}, now)
    finished = {"node_id": "say", "outcome": "ok", "output": {"message": message}, "notification": message,
                "next": {"finish": True}}
    if audience is not None:
        finished["notification_audience"] = audience
    store.worker(run_id, "node_finished", finished, now)
    [(message_id, body, stored)] = store.db.execute_sql(
        "SELECT message_id, body, audience FROM session_message WHERE run_id = ?", (run_id,)).fetchall()
    assert stored == audience
    assert json.loads(body) == {"node_id": "say", "message": message, **({"audience": audience} if audience else {})}
    return str(message_id)


def _call(store: Store, name: str, now: float | None = None, **args) -> dict:
    return store.call(name, {"profile": "ops", "adapter_epoch": "a1", **args}, store.now if now is None else now)


def _reserve(store: Store, message_id: str, now: float | None = None) -> dict:
    return _call(store, "channel.effect_reserve", now, purpose="notification", request_id=message_id, chat_id=2002)


def _settle(store: Store, effect: dict, outcome: str, now: float | None = None) -> dict:
    return _call(store, "channel.effect_settle", now, effect_id=effect["effect_id"], attempt=effect["attempt"],
                 outcome=outcome, result={"chat_id": 2002, "message_id": 7} if outcome == "applied" else None,
                 error=None if outcome == "applied" else "x")


def _read(store: Store, read):
    reader = StoreReader(store.location)
    try:
        return read(reader)
    finally:
        reader.close()


def _listed(store: Store, key: str) -> list[dict]:
    return _read(store, lambda reader: channel_queries.deliveries_status(reader)[key])


def test_a_notification_is_sent_once_and_an_unknown_outcome_waits_for_a_person(store) -> None:
    now = store.now
    message_id = _notified(store, "r1", "operator")
    _call(store, "channel.adapter_start", reason="host_restarted_without_receipt")
    [notice] = _read(store, lambda r: channel_queries.addressed_notifications(r, "ops", now - 60))
    assert notice == {"message_id": message_id, "audience": "operator", "effects": {}}
    effect = _reserve(store, message_id)
    assert _reserve(store, message_id) == {"skip": "applying"}  # one attempt at a time
    # The host dies before the receipt: the next adapter finds it applying and makes it ambiguous.
    assert _call(store, "channel.adapter_start", adapter_epoch="a2",
                 reason="host_restarted_without_receipt")["ambiguous"] == [effect["message_id"]]
    assert store.call("channel.effect_reserve", {"profile": "ops", "adapter_epoch": "a2", "purpose": "notification",
                                                 "request_id": message_id, "chat_id": 2002}, now) == {
        "skip": "ambiguous"}  # never sent again by itself
    [waiting] = _listed(store, "ambiguous")
    assert (waiting["purpose"], waiting["request_id"]) == ("notification", message_id)
    assert _read(store, metrics_queries.ambiguous_channel_deliveries) == 1  # the gauge counts it too
    # A person's retry makes its next attempt due (no copies: a notification has no buttons to replace).
    receipt = store.call("channel.recover", {"profile": "ops", "message_id": waiting["message_id"],
                                             "action": "retry"}, now)
    assert receipt["receipt"]["next_message_id"] == f"{effect['effect_id']}-2"
    assert _listed(store, "ambiguous") == [] and [u["attempts"] for u in _listed(store, "undelivered")] == [1]
    assert (_read(store, metrics_queries.ambiguous_channel_deliveries),
            _read(store, metrics_queries.undelivered_channel_messages)) == (0, 1)
    again = store.call("channel.effect_reserve", {"profile": "ops", "adapter_epoch": "a2", "purpose": "notification",
                                                  "request_id": message_id, "chat_id": 2002}, now)
    assert (again["effect_id"], again["attempt"]) == (effect["effect_id"], 2)


def test_a_notification_is_wanted_for_a_day_whatever_became_of_its_run(store) -> None:
    now = store.now
    old = _notified(store, "r-old", "operator", now=now - 86400 - 5)
    recent = _notified(store, "r-new", "operator", now=now - 86400 + 600)  # (a margin for a slow machine)
    plain = _notified(store, "r-plain", None)
    _call(store, "channel.adapter_start")
    found = _read(store, lambda r: channel_queries.addressed_notifications(r, "ops",
                                                                           channel_queries.notifications_since(now)))
    assert [n["message_id"] for n in found] == [recent]  # neither the old one nor one without an audience
    assert _reserve(store, old) == {"skip": "the notification is no longer wanted"}
    assert _reserve(store, plain) == {"skip": "the notification is no longer wanted"}
    effect = _reserve(store, recent)
    failed = _settle(store, effect, "failed")
    assert failed["retry_at"] == now + 1.0  # tried again with back-off, like a delivery
    assert [u["request_id"] for u in _listed(store, "undelivered")] == [recent]
    # Past its day it is no longer tried, nor listed.
    assert _reserve(store, recent, now=now + 700) == {"skip": "the notification is no longer wanted"}
    # A person's retry of it then is refused, not promised: its next attempt would never be made.
    with pytest.raises(Rejected, match="older than 24 h"):
        store.call("channel.recover", {"profile": "ops", "message_id": effect["message_id"], "action": "retry"},
                   now + 700)
    effect = _reserve(store, recent, now=now + 2)
    _settle(store, effect, "ambiguous", now=now + 2)
    with pytest.raises(Rejected, match="older than 24 h"):
        store.call("channel.recover", {"profile": "ops", "message_id": effect["message_id"], "action": "retry"},
                   now + 700)


def test_pruning_a_run_removes_what_channels_recorded_about_its_notifications(store) -> None:
    now = store.now
    message_id = _notified(store, "r1", "operator", now=now - 10 * 86400)
    kept = _notified(store, "r2", "operator")
    _call(store, "channel.adapter_start", now=now - 10 * 86400)
    _settle(store, _reserve(store, message_id, now=now - 10 * 86400), "applied", now=now - 10 * 86400)
    _settle(store, _reserve(store, kept), "applied")
    pruned = store.call("state.prune", {"before": now - 86400, "apply": True}, now)
    assert pruned["receipt"]["run_count"] == 1, pruned
    left = store.db.execute_sql("SELECT request_id FROM channel_effect").fetchall()
    assert [row[0] for row in left] == [kept]


class _CountingReader(StoreReader):
    """A real reader that counts the rows its queries return (what the planner had to go through)."""

    rows = 0

    def all(self, sql: str, params: tuple = ()) -> list[tuple]:
        found = super().all(sql, params)
        self.rows += len(found)
        return found


def test_planning_reads_only_the_notifications_that_may_still_need_a_send(store) -> None:
    """An adapter plans on every tick and every change of a channel effect: what it reads must not grow
    with the day's notifications already sent, nor with those for audiences it does not route. (Seen
    in review: a day of 100,000 notifications, every one sent, took half a second of each second's
    tick to plan nothing.)"""
    profile = ChannelProfile("ops", "ops_bot", frozenset({"1001"}), ("2002",), frozenset({"operator"}))
    _call(store, "channel.adapter_start")
    for index in range(30):
        _settle(store, _reserve(store, _notified(store, f"sent-{index}", "operator")), "applied")
    for index in range(15):
        _notified(store, f"other-{index}", "elsewhere")
    waiting = _notified(store, "waiting", "operator")
    reader = _CountingReader(store.location)
    try:
        work = next_work(reader, profile, {}, text_limit=4096, now=store.now)
    finally:
        reader.close()
    assert work is not None and work.reserve == {"purpose": "notification", "request_id": waiting, "chat_id": "2002"}
    assert reader.rows <= 3, reader.rows
