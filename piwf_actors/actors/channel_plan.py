"""What a channel adapter does next, decided from the store: pure reads, no I/O, no actor.

`next_work` picks the one message an adapter should attempt now (deliveries,
then notifications, then edits, each only when it is due); `place_tap` says
what a tapped button belongs to. The adapter (`actors/channel.py`) reserves,
attempts and settles what these return.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from piwf_actors.channels import text as channel_text
from piwf_actors.channels.base import MessageRef, Presented
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.store import channel_queries
from piwf_actors.store.reader import StoreReader


@dataclass(frozen=True, slots=True)
class Work:
    """One message to attempt: `reserve` are the arguments of channel.effect_reserve."""

    kind: str  # present | announce (a notification) | settle
    chat_id: str  # where it goes (a moved chat's new id)
    reserve: dict[str, Any]
    presented: Presented | None = None
    ref: MessageRef | None = None
    text: str = ""

    @property
    def key(self) -> tuple[Any, ...]:
        """Which effect this is (what `deferred` names)."""
        return work_key(self.reserve)


def work_key(reserve: dict[str, Any]) -> tuple[Any, ...]:
    return (reserve["purpose"], reserve["request_id"], reserve["chat_id"], reserve.get("copy", 0))


def resolve_chat(moves: dict[str, str], chat_id: str) -> str:
    """Where a chat is now, following moves (a chain of them too, never in a circle)."""
    seen = {chat_id}
    while chat_id in moves and moves[chat_id] not in seen:
        chat_id = moves[chat_id]
        seen.add(chat_id)
    return chat_id


def _due(effect: dict[str, Any] | None, now: float) -> bool:
    if effect is None:
        return True
    if effect["status"] == "replaced":
        return True  # a person asked for a new copy
    return effect["status"] == "failed" and (effect["retry_at"] is None or effect["retry_at"] <= now)


def next_work(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], *, text_limit: int,
              now: float | None = None, deferred: set[tuple[Any, ...]] | frozenset[tuple[Any, ...]] = frozenset(),
              ) -> Work | None:
    """The next delivery, notification or edit that is due and not `deferred` (keys of `Work.key`), or None."""
    now = time.time() if now is None else now
    for plan in (_deliveries, _notifications, _settlements):
        for work in plan(reader, profile, moves, text_limit, now):
            if work.key not in deferred:
                return work
    return None


def _targets(profile: ChannelProfile, moves: dict[str, str]) -> dict[str, str]:
    """Where each configured chat's decisions go: target chat -> the configured chat that stands
    for it (two configured ids of one chat, the old one and the one it moved to, are one chat)."""
    targets: dict[str, str] = {}
    for chat_id in profile.allowed_chat_ids:
        targets.setdefault(resolve_chat(moves, chat_id), chat_id)
    return targets


def _deliveries(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], text_limit: int,
                now: float) -> Iterator[Work]:
    decisions = [d for d in channel_queries.open_decisions(reader) if profile.routes(d["audience"])]
    if not decisions:
        return
    delivered = channel_queries.effects(reader, profile.profile, "delivery")
    by_target: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for (request_id, chat_id), effect in delivered.items():
        # A delivery made under any id of the chat counts for the chat (also one no longer configured).
        by_target.setdefault((request_id, resolve_chat(moves, chat_id)), (chat_id, effect))
    for decision in decisions:
        for target, configured in _targets(profile, moves).items():
            chat_id, latest = by_target.get((decision["request_id"], target), (configured, None))
            if not _due(latest, now):
                continue
            copy = 0 if latest is None else latest["copy"] + (1 if latest["status"] == "replaced" else 0)
            presented = channel_text.presented(decision["request_id"], decision["revision"], decision["contract"],
                                               decision["deadline_at"], limit=text_limit, copy=copy)
            reserve = {"purpose": "delivery", "request_id": decision["request_id"], "chat_id": chat_id,
                       "copy": copy, "detail": {"revision": decision["revision"]}}
            yield Work("present", target, reserve, presented=presented)


def _notifications(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], text_limit: int,
                   now: float) -> Iterator[Work]:
    """Notifications for an audience the profile routes (a `"*"` profile: any audience; one without an
    audience stays in the outbox), written within the window, not yet sent to each chat, oldest first."""
    targets = _targets(profile, moves)
    # Read only what may need a send (the day's others would be read on every tick): the audiences
    # routed here, and notifications some chat lacks — an effect under any id of a chat counts for it.
    known = {*profile.allowed_chat_ids, *moves, *moves.values()}
    counted = {chat_id for chat_id in known if resolve_chat(moves, chat_id) in targets}
    for notice in channel_queries.addressed_notifications(
            reader, profile.profile, channel_queries.notifications_since(now),
            audiences=None if "*" in profile.audiences else profile.audiences, chats=(counted, len(targets))):
        if not profile.routes(notice["audience"]):
            continue
        by_target: dict[str, tuple[str, dict[str, Any]]] = {}
        for chat_id, effect in notice["effects"].items():  # sent under any id of the chat counts for the chat
            by_target.setdefault(resolve_chat(moves, chat_id), (chat_id, effect))
        for target, configured in targets.items():
            chat_id, latest = by_target.get(target, (configured, None))
            if not _due(latest, now):
                continue
            body = channel_queries.notification_body(reader, notice["message_id"])
            reserve = {"purpose": "notification", "request_id": notice["message_id"], "chat_id": chat_id}
            yield Work("announce", target, reserve,
                       text=channel_text.notification_text(body.get("message"), limit=text_limit))


def _settlements(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], text_limit: int,
                 now: float) -> Iterator[Work]:
    for item in channel_queries.decisions_to_settle(reader, profile.profile):
        if not _due(item["settlement"], now):
            continue
        message = item["message"] or {}
        ref = MessageRef(resolve_chat(moves, str(message["chat_id"])), str(message["message_id"]))
        if item["status"] in ("pending", "presenting"):  # a replaced copy of a decision still open
            text = channel_text.replaced_text(item["contract"], limit=text_limit)
        else:
            text = channel_text.outcome_text(item["contract"], item["status"], item["answer"], item["provenance"],
                                             limit=text_limit)
        reserve = {"purpose": "settlement", "request_id": item["request_id"], "chat_id": item["chat_id"],
                   "copy": item["copy"], "delivery_effect_id": item["delivery_effect_id"]}
        yield Work("settle", ref.chat_id, reserve, ref=ref, text=text)


@dataclass(frozen=True, slots=True)
class TapTarget:
    """What a tapped button belongs to. `decision` is set when the tap may answer it (the current
    copy of an open decision); `found` names a delivery whose message the tap just located."""

    decision: dict[str, Any] | None
    notice: str | None  # why the tap answers nothing, told to the person
    found: dict[str, Any] | None


def place_tap(reader: StoreReader, profile: ChannelProfile, token: str, chat_id: str,
              message_id: str) -> TapTarget:
    """Match a button's token against the decisions and copies the profile delivered."""
    decisions = {d["request_id"]: d for d in channel_queries.open_decisions(reader)
                 if profile.routes(d["audience"])}
    current = {key: effect["copy"] for key, effect in channel_queries.effects(reader, profile.profile,
                                                                               "delivery").items()}
    for copy in channel_queries.tappable_copies(reader, profile.profile):
        if channel_text.button_token(copy["request_id"], copy["revision"], copy["copy"]) != token:
            continue
        found = None if copy["known"] else {"effect_id": copy["effect_id"], "chat_id": chat_id,
                                            "message_id": message_id}
        decision = decisions.get(copy["request_id"])
        if decision is None or not copy["open"] or decision["revision"] != copy["revision"]:
            return TapTarget(None, "This decision is no longer open.", found)
        if copy["status"] == "replaced" or copy["copy"] != current.get((copy["request_id"], copy["chat_id"]), 0):
            return TapTarget(None, "This copy was sent again below: answer the newer message.", found)
        return TapTarget(decision, None, found)
    for decision in decisions.values():  # a first copy with no record of its own (sent before copies existed)
        if channel_text.button_token(decision["request_id"], decision["revision"]) == token:
            return TapTarget(decision, None, None)
    return TapTarget(None, "This decision is no longer open.", None)
