"""The seam between the `ChannelAdapter` actor and one kind of channel (Telegram, …).

The actor (`actors/channel.py`) owns everything durable and every decision:
which decision to deliver or settle, recording each message `applying`
before it is attempted and settling it after, applying answers once per
update, the allow-lists. A channel module only does the I/O, through an
object implementing `ChannelIO`, and says how each attempt ended:

- it returns normally: the message was sent (or edited) and here is its
  reference;
- it raises `NotDelivered`: the attempt surely had no effect (no
  connection was made, or the service refused it) — it may be tried again;
- it raises `DeliveryUnknown`: it may or may not have had an effect (a
  timeout after sending, a lost answer) — it is never repeated automatically.

Ids are opaque text: chats, people, messages and updates are named as the
channel names them (Telegram's integers as their decimal text, a Slack
channel as `C0123`), and compared only for equality outside the channel
module. So is the **cursor**, where the profile's update stream stands: the
actor and the store keep it, and only the channel module's `UpdateOrder`
reads it (which updates it confirms, what it becomes past one, which of two
cursors is further).

A channel module is `piwf_actors/channels/<type>.py` and exposes
`CHANNEL_TYPE = "<type>"`, `PROFILE_SECTION` (what its `[<type>.<profile>]`
tables of channels.toml hold), `UPDATE_ORDER`, `options(settings)` and
`open_channel(profile, token, options) -> ChannelIO`; one line of
`registry.py` names it. docs/channels.md walks through writing one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from piwf_actors.errors import PiwfError


class ChannelError(PiwfError):
    code = "channel_error"


class NotDelivered(ChannelError):
    """The attempt surely had no effect; `retry_after` says how long the service wants us to wait,
    `moved_to` the chat's new id when the service says the chat moved (a Telegram group that
    became a supergroup)."""

    code = "channel_not_delivered"

    def __init__(self, detail: str, retry_after: float | None = None, moved_to: str | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.moved_to = moved_to


class DeliveryUnknown(ChannelError):
    """The attempt may have had an effect; it must not be repeated without a person's word."""

    code = "channel_delivery_unknown"


class StreamTaken(ChannelError):
    """`poll` was refused because another program reads this bot's updates (Telegram's 409
    Conflict). Brief after a restart (the previous host's long poll is still open); lasting,
    it means a second host or program uses the same bot."""

    code = "channel_stream_taken"


@dataclass(frozen=True, slots=True)
class Choice:
    key: str
    label: str
    input: dict[str, Any] | None  # {name, prompt, min_length, max_length} when the choice takes text
    data: str  # what a tap on this choice's button carries back (opaque to the channel module)


@dataclass(frozen=True, slots=True)
class Presented:
    """A decision as a channel shows it: its text and one button per choice."""

    request_id: str
    text: str
    choices: tuple[Choice, ...]


@dataclass(frozen=True, slots=True)
class MessageRef:
    """Where a sent message lives, as the channel names it (stored with the effect)."""

    chat_id: str
    message_id: str

    def to_wire(self) -> dict[str, str]:
        return {"chat_id": self.chat_id, "message_id": self.message_id}


@dataclass(frozen=True, slots=True)
class Tap:
    """Someone pressed a button: `data` is the pressed choice's `Choice.data`. A button of a
    message the channel cannot place (Telegram's inline-mode messages) has chat_id and
    message_id "": never allowed to answer, but still acknowledged."""

    update_id: str
    user_id: str
    chat_id: str
    message_id: str
    data: str
    callback_id: str = ""
    person: tuple[str, str] = ("", "")  # (name, username) as the channel names who tapped; kept with the answer


@dataclass(frozen=True, slots=True)
class Reply:
    """Someone wrote a message; `reply_to` is the message it answers, if any."""

    update_id: str
    user_id: str
    chat_id: str
    text: str
    reply_to: str | None = None
    message_id: str = ""  # the person's message (a notice replies to it)
    person: tuple[str, str] = ("", "")  # (name, username) as the channel names the writer; kept with the answer


@dataclass(frozen=True, slots=True)
class Other:
    """An update that carries nothing for us (it only moves the cursor)."""

    update_id: str


Event = Tap | Reply | Other


@dataclass(frozen=True, slots=True)
class Restart:
    """The service's update ids restarted (`BatchReader.read` says so before the first update of the
    new generation): the adapter re-bases its stored cursor to `cursor` and counts a generation."""

    cursor: str


class BatchReader(Protocol):
    """What one adapter remembers of its update stream between polls. Called from the adapter actor's
    thread only."""

    def read(self, events: Sequence[Event], cursor: str) -> list[Event | Restart]:
        """The work of one poll's `events`, in order: the updates to handle (those the cursor confirms
        may be among them: the actor passes over them), with a `Restart` before each new generation's
        first. `cursor` is where the adapter stands now."""

    def handled(self, update_id: str) -> None:
        """The adapter is done with this update (applied it, or passed over it)."""


class UpdateOrder(Protocol):
    """How a channel type's update ids and its cursor relate: the only code that reads a cursor.
    Pure; called from the adapter actor's thread and from the store's writer (`channel.answer` skips
    an update its stream's cursor confirms, and moves the cursor past it)."""

    #: The cursor of a stream never read.
    start: str

    def confirms(self, cursor: str, update_id: str) -> bool:
        """Whether `cursor` is past `update_id` (the update was handled before)."""

    def past(self, cursor: str, update_id: str) -> str:
        """The cursor once `update_id` is handled: past it, and never behind `cursor`."""

    def later(self, cursor: str, other: str) -> str:
        """The further of two cursors (a cursor only moves forward, except by a `Restart`)."""

    def reader(self) -> BatchReader:
        """A new adapter's memory of the stream (nothing read yet)."""


@dataclass(frozen=True, slots=True)
class ProfileSection:
    """What a channel type's `[<type>.<profile>]` tables of channels.toml hold besides `credential` and
    `audiences`, which every type has (`channels/config.py` reads the tables and asks this).

    `user_id` and `chat_id` turn one item of `allowed_user_ids` / `allowed_chat_ids` into the id's
    text, or None when it is not an id of this type; `user_ids` and `chat_ids` say what a valid list
    holds, for the refusal ("allowed_user_ids must be a non-empty list of positive integers").
    `credential` says why a credential's value (from credentials.toml: never echo it) is not a token of
    this type, or None. `keys` are the type's own keys, each with its check (the problem, or None);
    their values reach the adapter as `ChannelProfile.settings`. Every function is pure.
    """

    user_id: Callable[[object], str | None]
    chat_id: Callable[[object], str | None]
    user_ids: str
    chat_ids: str
    credential: Callable[[str], str | None]
    keys: Mapping[str, Callable[[object], str | None]] = field(default_factory=dict)


@dataclass
class PollResult:
    events: list[Event] = field(default_factory=list)
    retry_after: float | None = None  # the service asked us to slow down


class ChannelIO(Protocol):
    """The I/O of one configured profile. Calls come from two threads owned by the
    actor: one that polls (`poll`, `abort`) and one that sends (everything else)."""

    def present(self, chat_id: str, presented: Presented) -> MessageRef:
        """Send the decision with one button per choice."""

    def ask_text(self, chat_id: str, presented: Presented, choice: Choice, user_id: str) -> MessageRef:
        """Ask `user_id` for the text `choice` needs (a reply to this message answers it)."""

    def announce(self, chat_id: str, text: str) -> MessageRef:
        """Send `text` as a plain message (a notification): no buttons, no reply asked for."""

    def settle(self, ref: MessageRef, text: str) -> None:
        """Replace a delivered decision's text with `text` and remove its buttons."""

    def notice(self, event: Tap | Reply, text: str) -> None:
        """Short feedback to the person who tapped or replied (best effort, not an effect)."""

    def poll(self, cursor: str, timeout_s: float) -> PollResult:
        """The events `cursor` does not confirm yet, in the service's order, waiting up to `timeout_s`
        for one (a service whose ids restarted may return ones the cursor seems to confirm: the
        module's `BatchReader` tells a restart). Raises `StreamTaken` when another program holds the
        bot's update stream."""

    def abort(self) -> None:
        """Make a blocked `poll` return soon (the actor is stopping)."""

    def close(self) -> None:
        """Release connections."""
