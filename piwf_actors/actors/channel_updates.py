"""What one update from a channel means for a channel adapter: pure reads, no I/O, no actor.

`read_update` turns a tap or a reply into an `Outcome`: a notice for the
person who sent it, and the write that applies it, if any (an answer, a
located message, a prompt for text). A reply answers a prompt for text or a
checkpoint, by the message it replies to. The adapter (`actors/channel.py`)
sends the notice, submits the write, and moves the cursor past the update
once it is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from piwf_actors.actors.channel_plan import place_tap, resolve_chat
from piwf_actors.channels import text as channel_text
from piwf_actors.channels.base import Choice, Event, Presented, Reply, Tap
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.store import channel_queries
from piwf_actors.store.reader import StoreReader

log = logging.getLogger("piwf_actors.actors.channel")


@dataclass(frozen=True, slots=True)
class Prompt:
    """A choice needs text: ask `user_id` for it in `chat_id` (a message, so an effect)."""

    chat_id: str
    presented: Presented
    choice: Choice
    user_id: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to do about one update. `command` (name, args, correlation) is the write that applies
    it; without one the update needs nothing written. `notice` is told to its sender (for a
    prompt, once its reservation is written); `label` names the choice for "Recorded: …"."""

    notice: str | None = None
    command: tuple[str, dict[str, Any], str] | None = None
    label: str = ""
    prompt: Prompt | None = None


NOTHING = Outcome()


def allows(profile: ChannelProfile, moves: dict[str, str], user_id: str, chat_id: str) -> bool:
    """The allow-lists, with a moved chat standing for the chat it was."""
    if profile.allows(user_id, chat_id):
        return True
    return any(resolve_chat(moves, allowed) == chat_id and profile.allows(user_id, allowed)
               for allowed in profile.allowed_chat_ids)


def read_update(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], event: Event, *,
                text_limit: int) -> Outcome:
    if isinstance(event, Tap):
        return _tap(reader, profile, moves, event, text_limit)
    if isinstance(event, Reply) and event.reply_to is not None:
        return _reply(reader, profile, moves, event)
    return NOTHING


def _answer(profile: ChannelProfile, event: Tap | Reply, decision: dict[str, Any], response: dict[str, Any],
            found: dict[str, Any] | None) -> tuple[str, dict[str, Any], str]:
    return ("channel.answer", {"channel": profile.channel_type, "update_id": event.update_id,
                               "request_id": decision["request_id"], "expected_revision": decision["revision"],
                               "response": response, "found": found, **_who(event)},
            "answer")


def _who(event: Tap | Reply) -> dict[str, Any]:
    """Who answered, for the answer's provenance: the ids, and the name and username when the channel gave them."""
    name, username = event.person
    return {"user_id": event.user_id, "chat_id": event.chat_id, "name": name, "username": username}


def _tap(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], tap: Tap, text_limit: int) -> Outcome:
    if not allows(profile, moves, tap.user_id, tap.chat_id):
        log.info("channel %s: ignored a tap by user %s in chat %s (not allowed)", profile.profile, tap.user_id or "?",
                 tap.chat_id or "?")
        return Outcome("You may not answer decisions here.")
    parsed = channel_text.parse_button(tap.data)
    if parsed is None:
        return Outcome("This button is not one of this bot's decisions.")
    target = place_tap(reader, profile, parsed[0], tap.chat_id, tap.message_id)
    decision = target.decision
    if decision is None:
        notice = target.notice or "This decision is no longer open."
        if target.found is None:
            return Outcome(notice)
        # It answers nothing, but it shows where a message is: recorded, so the message can be edited.
        return Outcome(notice, ("channel.effect_found", {"update_id": tap.update_id, "found": target.found},
                                "found"))
    options = channel_text.choices(decision["contract"], parsed[0])
    if parsed[1] >= len(options):
        return Outcome("Unknown choice.")
    choice = options[parsed[1]]
    if choice.input is not None:
        presented = channel_text.presented(decision["request_id"], decision["revision"], decision["contract"],
                                           decision["deadline_at"], limit=text_limit)
        reserve = {"purpose": "input_prompt", "request_id": decision["request_id"], "chat_id": tap.chat_id,
                   "key_extra": f"{tap.user_id}:{choice.key}:{decision['revision']}",
                   "detail": {"choice": choice.key, "input_name": choice.input.get("name"), "user_id": tap.user_id,
                              "revision": decision["revision"], "label": choice.label}}
        return Outcome(None, ("channel.effect_reserve", reserve, "prompt"), choice.label,
                       Prompt(tap.chat_id, presented, choice, tap.user_id))
    return Outcome(None, _answer(profile, tap, decision, {"choice": choice.key},
                                 target.found), choice.label)


def _checkpoint_reply(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], reply: Reply) -> Outcome:
    """A reply to a delivered checkpoint: its text is the answer's input (`text.checkpoint_input`)."""
    assert reply.reply_to is not None
    checkpoint = channel_queries.checkpoint_for_reply(reader, profile.profile, reply.chat_id, reply.reply_to)
    if checkpoint is None:
        return NOTHING  # a reply to something else in the chat: not ours to answer
    if not allows(profile, moves, reply.user_id, reply.chat_id):
        log.info("channel %s: ignored a reply by user %s in chat %s (not allowed)", profile.profile, reply.user_id,
                 reply.chat_id)
        return Outcome("You may not answer here.")
    if not checkpoint["open"]:
        return Outcome("This checkpoint is no longer open.")
    value, problem = channel_text.checkpoint_input(reply.text)
    if problem is not None:
        return Outcome(problem)  # nothing written: the person may simply reply again
    return Outcome(None, ("channel.answer", {
        "channel": profile.channel_type, "update_id": reply.update_id, "kind": "checkpoint",
        "request_id": checkpoint["request_id"], "expected_revision": checkpoint["revision"], "input": value,
        **_who(reply)}, "answer"), "your answer")


def _reply(reader: StoreReader, profile: ChannelProfile, moves: dict[str, str], reply: Reply) -> Outcome:
    assert reply.reply_to is not None
    prompt = channel_queries.prompt_for_reply(reader, profile.profile, reply.chat_id, reply.reply_to)
    if prompt is None:
        return _checkpoint_reply(reader, profile, moves, reply)
    detail = prompt["detail"]
    if detail.get("user_id") != reply.user_id or not allows(profile, moves, reply.user_id, reply.chat_id):
        return Outcome("Not recorded: this question was asked of someone else.")
    decision = {"request_id": prompt["request_id"], "revision": detail.get("revision")}
    response = {"choice": detail["choice"], "input": {detail["input_name"]: reply.text}}
    return Outcome(None, _answer(profile, reply, decision, response, None),
                   str(detail.get("label") or detail["choice"]))
