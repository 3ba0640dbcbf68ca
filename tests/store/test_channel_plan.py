"""What a channel adapter attempts next (actors/channel_plan.py), read from a real store."""

from __future__ import annotations

import pytest
from test_channel_commands import _decision, _start  # noqa: F401  (helpers of the store tests)
from test_store_regressions import Store

from piwf_actors.actors.channel_plan import next_work
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.store.reader import StoreReader

PROFILE = ChannelProfile("ops", "ops_bot", frozenset({"1001"}), ("2002",), frozenset({"operator"}))


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


def _work(store: Store, profile: ChannelProfile = PROFILE, **kwargs):
    reader = StoreReader(store.location)
    try:
        return next_work(reader, profile, kwargs.pop("moves", {}), text_limit=4096, **kwargs)
    finally:
        reader.close()


def test_work_the_store_said_is_not_due_is_passed_over_so_the_rest_moves(store) -> None:
    """Seen in review: with the database's clock behind the host's, the first failed delivery looked
    due, the store said "not due yet", and every tick picked it again: nothing behind it moved."""
    first, second = _decision(store, "r1"), _decision(store, "r2")
    _start(store)
    work = _work(store)
    assert work.reserve["request_id"] == first
    assert _work(store, deferred={work.key}).reserve["request_id"] == second


def test_a_moved_chat_configured_under_both_ids_gets_one_copy(store) -> None:
    """Seen in review: after a move, adding the new id to allowed_chat_ids (as the docs say) sent
    every open decision to the new chat a second time; so did putting it in place of the old one."""
    request_id = _decision(store)
    _start(store)
    effect = store.call("channel.effect_reserve", {"profile": "ops", "adapter_epoch": "a1", "purpose": "delivery",
                                                   "request_id": request_id, "chat_id": 2002})
    store.call("channel.effect_settle", {"profile": "ops", "adapter_epoch": "a1", "effect_id": effect["effect_id"],
                                         "attempt": 1, "outcome": "applied",
                                         "result": {"chat_id": -1002002, "message_id": 1}})
    moves = {"2002": "-1002002"}
    both = ChannelProfile("ops", "ops_bot", frozenset({"1001"}), ("2002", "-1002002"), frozenset({"operator"}))
    only_new = ChannelProfile("ops", "ops_bot", frozenset({"1001"}), ("-1002002",), frozenset({"operator"}))
    assert _work(store, both, moves=moves) is None
    assert _work(store, only_new, moves=moves) is None
    assert _work(store, only_new) is not None  # without the move it is another chat
