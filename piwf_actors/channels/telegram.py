"""Telegram as a decision channel: the `ChannelIO` of a `[telegram.<profile>]` profile.

Decisions go out with `sendMessage` (plain text, at most 4,096 characters,
one inline button per choice), notifications as plain messages without
buttons; a choice that needs text is asked for with a
`force_reply` message, and so is a checkpoint (answered by a reply); answers come in by long polling `getUpdates`
(`callback_query` for taps, `message` for replies); a settled decision's
messages are edited to show the outcome without buttons. Every tap is
acknowledged with `answerCallbackQuery`, or the person's app keeps spinning
(also a tap on an inline-mode message, which never answers a decision); a
text reply to a prompt is answered with a reply message.

Ids are Telegram's integers, as their decimal text at the seam (`base.py`):
`allowed_user_ids` and `allowed_chat_ids` are integers in channels.toml
(`PROFILE_SECTION`), the Bot API's ids are turned into text as they come in and
back into integers as they go out. The cursor is the next update id to ask
for (`telegram_updates.py`, `UPDATE_ORDER`).

The Bot API base is `https://api.telegram.org` unless the host's options for
Telegram (`HostConfig(channel_options={"telegram": {"api_base": …}})`, see
`options`) or `PIWF_TELEGRAM_API_BASE` name another, e.g. a fake on 127.0.0.1.
How each call ended is told in the seam's terms: `NotDelivered` when
Telegram surely did nothing (no connection, or it refused), `DeliveryUnknown`
when it may have (a timeout after sending, a lost answer).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from piwf_actors.channels.base import (
    Choice,
    DeliveryUnknown,
    Event,
    MessageRef,
    NotDelivered,
    Other,
    PollResult,
    Presented,
    ProfileSection,
    Reply,
    StreamTaken,
    Tap,
)
from piwf_actors.channels.config import Secret, TelegramProfile
from piwf_actors.channels.telegram_api import BotApi, NotSent, OutcomeUnknown
from piwf_actors.channels.telegram_updates import UPDATE_ORDER

log = logging.getLogger(__name__)

CHANNEL_TYPE = "telegram"
DEFAULT_API_BASE = "https://api.telegram.org"
#: Telegram's limit on a message's text, in characters.
TEXT_LIMIT = 4096
__all__ = ["CHANNEL_TYPE", "PROFILE_SECTION", "TEXT_LIMIT", "UPDATE_ORDER", "TelegramIO", "TelegramOptions",
           "open_channel", "options"]

_BOT_TOKEN = re.compile(r"[0-9]+:\S+")


def _integer_id(value: object, *, negative: bool) -> str | None:
    """A Telegram id from channels.toml (an integer; bools are refused although Python counts them as
    ints) as its decimal text. User ids are positive; group and channel chat ids are negative."""
    if isinstance(value, bool) or not isinstance(value, int) or value == 0 or (value < 0 and not negative):
        return None
    return str(value)


def _bot_token_problem(value: str) -> str | None:
    return None if _BOT_TOKEN.fullmatch(value) else "does not look like a bot token ('<digits>:<secret>', no whitespace)"


#: `[telegram.<profile>]`: ids are Telegram's integers; the credential is a bot token.
PROFILE_SECTION = ProfileSection(
    user_id=lambda value: _integer_id(value, negative=False),
    chat_id=lambda value: _integer_id(value, negative=True),
    user_ids="positive integers",
    chat_ids="non-zero integers",
    credential=_bot_token_problem,
)


@dataclass(frozen=True, slots=True)
class TelegramOptions:
    """What a host tells its Telegram adapters (`HostConfig.channel_options["telegram"]`)."""

    api_base: str | None = None  # None: $PIWF_TELEGRAM_API_BASE, else api.telegram.org
    request_timeout_s: float = 10.0


def options(settings: Mapping[str, Any]) -> TelegramOptions:
    """`settings` (a plain mapping of TelegramOptions' fields) as TelegramOptions; ValueError for an
    unknown key or a value of the wrong type."""
    known = {field.name for field in fields(TelegramOptions)}
    unknown = sorted(key for key in settings if key not in known)
    if unknown:
        raise ValueError(f"unknown Telegram option {', '.join(map(repr, unknown))} (known: {', '.join(sorted(known))})")
    api_base = settings.get("api_base")
    if api_base is not None and not (isinstance(api_base, str) and api_base):
        raise ValueError("the Telegram option api_base must be a non-empty string (an http or https URL)")
    timeout = settings.get("request_timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError("the Telegram option request_timeout_s must be a positive number of seconds")
    return TelegramOptions(api_base=api_base, request_timeout_s=float(timeout))


def open_channel(profile: TelegramProfile, token: Secret, options: TelegramOptions | None = None) -> TelegramIO:
    options = options or TelegramOptions()
    base = options.api_base or os.environ.get("PIWF_TELEGRAM_API_BASE") or DEFAULT_API_BASE
    return TelegramIO(BotApi(token.reveal(), base, timeout_s=options.request_timeout_s))


def _buttons(choices: tuple[Choice, ...]) -> dict[str, Any]:
    return {"inline_keyboard": [[{"text": choice.label[:64] + (" ✎" if choice.input else ""),
                                  "callback_data": choice.data}] for choice in choices]}


class TelegramIO:
    """`ChannelIO` over the Bot API. `poll`/`abort` come from the poller thread and the
    actor's stop; everything else from the sender thread (BotApi is safe for both)."""

    def __init__(self, api: BotApi) -> None:
        self._api = api

    def __repr__(self) -> str:
        return f"TelegramIO({self._api!r})"

    def _do(self, method: str, call: Any) -> Any:
        try:
            return call()
        except NotSent as exc:
            if exc.error_code == 400 and "message is not modified" in exc.description:
                return None  # an edit that is already in place did what it was for
            moved_to = None if exc.migrate_to_chat_id is None else str(exc.migrate_to_chat_id)
            raise NotDelivered(str(exc), exc.retry_after, moved_to) from None
        except OutcomeUnknown as exc:
            raise DeliveryUnknown(str(exc)) from None
        except Exception as exc:  # a bug or an unforeseen failure: we cannot know what happened
            detail = self._api.redact(f"{type(exc).__name__}: {exc}")[:300]
            log.warning("telegram %s raised %s", method, detail)
            raise DeliveryUnknown(f"telegram {method}: outcome unknown: {detail}") from None

    def present(self, chat_id: str, presented: Presented) -> MessageRef:
        # Without choices (a checkpoint) a reply answers it: the app opens a reply to it at once.
        markup = _buttons(presented.choices) if presented.choices else {
            "force_reply": True, "input_field_placeholder": "your answer"}
        message = self._do("sendMessage", lambda: self._api.send_message(_number(chat_id), presented.text,
                                                                         reply_markup=markup))
        return MessageRef(chat_id, str(message["message_id"]))

    def ask_text(self, chat_id: str, presented: Presented, choice: Choice, user_id: str) -> MessageRef:
        field = choice.input or {}
        title = presented.text.split("\n", 1)[0]
        prompt = (f"{title}\n\n{choice.label}: {field.get('prompt') or field.get('name') or 'your text'}\n"
                  "Reply to this message with your text.")[:TEXT_LIMIT]
        message = self._do("sendMessage", lambda: self._api.send_message(
            _number(chat_id), prompt, reply_markup={"force_reply": True, "selective": True,
                                                    "input_field_placeholder": str(field.get("name") or "")[:64]}))
        return MessageRef(chat_id, str(message["message_id"]))

    def announce(self, chat_id: str, text: str) -> MessageRef:
        message = self._do("sendMessage", lambda: self._api.send_message(_number(chat_id), text[:TEXT_LIMIT]))
        return MessageRef(chat_id, str(message["message_id"]))

    def settle(self, ref: MessageRef, text: str) -> None:
        self._do("editMessageText", lambda: self._api.edit_message_text(_number(ref.chat_id), _number(ref.message_id),
                                                                        text[:TEXT_LIMIT]))

    def notice(self, event: Tap | Reply, text: str) -> None:
        if isinstance(event, Tap):
            if event.callback_id:
                self._do("answerCallbackQuery",
                         lambda: self._api.answer_callback_query(event.callback_id, text[:200]))
        elif event.chat_id:
            self._do("sendMessage", lambda: self._api.send_message(
                _number(event.chat_id), text[:TEXT_LIMIT],
                reply_to_message_id=_number(event.message_id) if event.message_id else None))

    def poll(self, cursor: str, timeout_s: float) -> PollResult:
        try:
            updates = self._api.get_updates(_number(cursor), timeout_s=max(0, int(timeout_s)))
        except NotSent as exc:
            if exc.error_code == 409:
                raise StreamTaken(str(exc)) from None
            raise NotDelivered(str(exc), exc.retry_after) from None
        except OutcomeUnknown as exc:  # harmless for a poll: unconfirmed updates come again
            raise DeliveryUnknown(str(exc)) from None
        return PollResult([_event(update) for update in updates if isinstance(update.get("update_id"), int)])

    def abort(self) -> None:
        self._api.abort()

    def close(self) -> None:
        self._api.close()


def _number(text: str) -> int:
    """An id of the seam (the decimal text of a Telegram integer) as the Bot API takes it."""
    return int(text)


def _id_at(value: Any, *keys: str) -> str:
    """`value[keys[0]][keys[1]]…` (a Telegram integer) as its decimal text, "" when any step is
    missing or not an integer."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return str(value) if isinstance(value, int) and not isinstance(value, bool) and value else ""


def _event(update: dict[str, Any]) -> Event:
    """One update as the actor sees it. Whatever its shape, a callback query becomes a Tap, so
    that it is acknowledged: one the channel cannot place (an inline-mode message, a malformed
    query) has chat and message "", which no allow-list admits."""
    update_id = str(int(update["update_id"]))
    callback = update.get("callback_query")
    if isinstance(callback, dict):
        data = callback.get("data")
        return Tap(update_id, _id_at(callback, "from", "id"), _id_at(callback, "message", "chat", "id"),
                   _id_at(callback, "message", "message_id"), data if isinstance(data, str) else "",
                   str(callback.get("id") or ""), _person(callback.get("from")))
    message = update.get("message")
    if isinstance(message, dict) and isinstance(message.get("text"), str):
        replied = message.get("reply_to_message")
        user_id, chat_id = _id_at(message, "from", "id"), _id_at(message, "chat", "id")
        if not user_id or not chat_id:
            return Other(update_id)
        return Reply(update_id, user_id, chat_id, message["text"],
                     _id_at(replied, "message_id") or None if isinstance(replied, dict) else None,
                     _id_at(message, "message_id"), _person(message.get("from")))
    return Other(update_id)


#: A name kept with an answer is at most this long (Telegram's own limits are 64 and 32 characters).
PERSON_CHARS = 64


def _person(sender: Any) -> tuple[str, str]:
    """(name, username) of an update's `from`: what `piwf show` names a Telegram answerer by besides the id."""
    if not isinstance(sender, dict):
        return ("", "")
    parts = [sender.get(key) for key in ("first_name", "last_name")]
    name = " ".join(part.strip() for part in parts if isinstance(part, str) and part.strip())
    username = sender.get("username")
    return (name[:PERSON_CHARS], username[:PERSON_CHARS] if isinstance(username, str) else "")
