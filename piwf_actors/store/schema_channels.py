"""The tables of the chat channels (schemas v3 and v12: messages sent, update cursors, streams,
moved chats, adapter epochs). Listed in store/schema.py with every other table.

Chat ids, message references and cursors are text, as the channel names them (schema v17: before,
they were Telegram's integers, which the migration turned into their decimal text)."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class ChannelEffect(Base):
    """One message a channel sends or edits (schema v3), recorded before it is attempted.

    At most once: `applying` is committed before the attempt; the attempt's
    outcome settles it `applied` (with the channel's message reference in
    `result`), `failed` (surely not sent: tried again with back-off, `retry_at`,
    for as long as it is wanted) or `ambiguous` (maybe sent: never re-sent
    unless a person says so with `channel.recover`). The stable message id of an attempt is
    `<effect_id>-<attempt>`.
    """

    effect_id = pw.TextField(primary_key=True)
    profile = pw.TextField()
    purpose = pw.TextField()  # delivery | settlement | input_prompt | notification (request_id: its outbox message)
    request_id = pw.TextField()
    chat_id = pw.TextField()  # as the channel names the chat (text since schema v17)
    effect_key = pw.TextField(unique=True)  # profile, purpose, request, chat (and the asking user for a prompt)
    attempt = pw.IntegerField()
    status = pw.TextField()  # applying | applied | failed | ambiguous | replaced
    manual_retries = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    adapter_epoch = pw.TextField()
    detail = pw.TextField(null=True)  # JSON: what the effect is about (a prompt's choice and user id)
    result = pw.TextField(null=True)  # JSON: {chat_id, message_id} (text) once applied
    error = pw.TextField(null=True)
    created_at = pw.FloatField()
    updated_at = pw.FloatField()
    settled_at = pw.FloatField(null=True)
    retry_at = pw.FloatField(null=True)  # failed: the earliest next attempt (schema v12)

    class Meta:
        table_name = "channel_effect"
        indexes = ((("profile", "status"), False), (("request_id",), False))


class ChannelCursor(Base):
    """Before schema v12: a cursor per profile name (replaced by `ChannelStream`, per bot)."""

    profile = pw.TextField(primary_key=True)
    cursor = pw.IntegerField()
    updated_at = pw.FloatField()

    class Meta:
        table_name = "channel_cursor"


class ChannelStream(Base):
    """Where one bot's update stream stands (schema v12): its cursor, text that only the channel
    type's `UpdateOrder` reads (Telegram's: the next update id to ask for; text since schema v17).

    Keyed by the stream (`<channel type>:<fingerprint of the bot token>`), not the profile:
    another bot under the same profile name has update ids of its own. `generation` counts
    the times the service's ids restarted below the cursor (the cursor was re-based); an
    answer's idempotency key carries it, so a reused update id is a new update.
    """

    stream = pw.TextField(primary_key=True)
    profile = pw.TextField()
    cursor = pw.TextField()
    generation = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    updated_at = pw.FloatField()

    class Meta:
        table_name = "channel_stream"


class ChannelChatMove(Base):
    """A chat the service moved (schema v12): a Telegram group that became a supergroup has a
    new id; the profile's deliveries and answers follow it until channels.toml names the new id."""

    profile = pw.TextField()
    chat_id = pw.TextField()
    moved_to = pw.TextField()
    moved_at = pw.FloatField()

    class Meta:
        table_name = "channel_chat_move"
        primary_key = pw.CompositeKey("profile", "chat_id")


class ChannelAdapterEpoch(Base):
    """The adapter epoch currently allowed to write for a profile: a replaced adapter is fenced off."""

    profile = pw.TextField(primary_key=True)
    adapter_epoch = pw.TextField()
    host_epoch = pw.IntegerField()
    started_at = pw.FloatField()

    class Meta:
        table_name = "channel_adapter"
