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

A channel module is `piwf_actors/channels/<type>.py` and exposes
`CHANNEL_TYPE = "<type>"` and `open_channel(profile, token, options) ->
ChannelIO`; `[<type>.<profile>]` tables of channels.toml configure it.
docs/channels.md walks through writing one.
"""

from __future__ import annotations

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

    def __init__(self, detail: str, retry_after: float | None = None, moved_to: int | None = None) -> None:
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

    chat_id: int
    message_id: int

    def to_wire(self) -> dict[str, int]:
        return {"chat_id": self.chat_id, "message_id": self.message_id}


@dataclass(frozen=True, slots=True)
class Tap:
    """Someone pressed a button: `data` is the pressed choice's `Choice.data`. A button of a
    message the channel cannot place (Telegram's inline-mode messages) has chat_id and
    message_id 0: never allowed to answer, but still acknowledged."""

    update_id: int
    user_id: int
    chat_id: int
    message_id: int
    data: str
    callback_id: str = ""
    person: tuple[str, str] = ("", "")  # (name, username) as the channel names who tapped; kept with the answer


@dataclass(frozen=True, slots=True)
class Reply:
    """Someone wrote a message; `reply_to` is the message it answers, if any."""

    update_id: int
    user_id: int
    chat_id: int
    text: str
    reply_to: int | None = None
    message_id: int = 0  # the person's message (a notice replies to it)
    person: tuple[str, str] = ("", "")  # (name, username) as the channel names the writer; kept with the answer


@dataclass(frozen=True, slots=True)
class Other:
    """An update that carries nothing for us (it only moves the cursor)."""

    update_id: int


Event = Tap | Reply | Other


@dataclass
class PollResult:
    events: list[Event] = field(default_factory=list)
    retry_after: float | None = None  # the service asked us to slow down


class ChannelIO(Protocol):
    """The I/O of one configured profile. Calls come from two threads owned by the
    actor: one that polls (`poll`, `abort`) and one that sends (everything else)."""

    def present(self, chat_id: int, presented: Presented) -> MessageRef:
        """Send the decision with one button per choice."""

    def ask_text(self, chat_id: int, presented: Presented, choice: Choice, user_id: int) -> MessageRef:
        """Ask `user_id` for the text `choice` needs (a reply to this message answers it)."""

    def announce(self, chat_id: int, text: str) -> MessageRef:
        """Send `text` as a plain message (a notification): no buttons, no reply asked for."""

    def settle(self, ref: MessageRef, text: str) -> None:
        """Replace a delivered decision's text with `text` and remove its buttons."""

    def notice(self, event: Tap | Reply, text: str) -> None:
        """Short feedback to the person who tapped or replied (best effort, not an effect)."""

    def poll(self, cursor: int, timeout_s: float) -> PollResult:
        """Events with update ids >= `cursor`, waiting up to `timeout_s` for one (a service whose ids
        restarted may return lower ones: the actor re-bases). Raises `StreamTaken` when another
        program holds the bot's update stream."""

    def abort(self) -> None:
        """Make a blocked `poll` return soon (the actor is stopping)."""

    def close(self) -> None:
        """Release connections."""
