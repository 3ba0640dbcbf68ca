"""What a decision channel adapter writes about the updates it reads: answers, and where the
bot's update stream stands. Fenced by the profile's adapter epoch like its effects.

Answers arrive as updates, per bot (a *stream*: `<channel type>:<fingerprint
of the token>`, so another bot under the same profile name starts its own
count). Each update is applied in the same transaction that moves the
stream's cursor past it, and an update the cursor confirms was applied
already: a crash between the two makes the channel deliver the update again,
and it is then skipped. The cursor and the update ids are opaque text: which
updates a cursor confirms and where it moves is asked of the channel type's
`UpdateOrder` (`channels/base.py`; Telegram's in `channels/telegram_updates.py`),
never computed here.

A service's ids can restart (Telegram picks a new random start after a week
without updates; a local Bot API server starts again). The adapter notices —
the channel type's `BatchReader` says so — and re-bases the cursor
(`channel.cursor_rebase`), which counts a new `generation`. The generation is
part of every answer's idempotency key, so an update id used again after a
reset is a new update, not a replay.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.channels.base import UpdateOrder
from piwf_actors.errors import PiwfError
from piwf_actors.store.commands.channels import order_of, record_found, require_adapter, stream_of, stream_position
from piwf_actors.store.commands.interactions import answer_checkpoint, answer_decision
from piwf_actors.store.commands.registry import WriteContext, command


def _advance(ctx: WriteContext, order: UpdateOrder, profile: str, stream: str, cursor: str) -> str:
    """Move the stream's cursor forward to `cursor` (never back: `order.later`). Returns where it stands."""
    stored = stream_position(ctx, stream)[0]
    moved = cursor if stored is None else order.later(stored, cursor)
    ctx.conn.execute(
        """INSERT INTO channel_stream (stream, profile, cursor, generation, updated_at) VALUES (?, ?, ?, 0, ?)
           ON CONFLICT (stream) DO UPDATE SET updated_at = excluded.updated_at, profile = excluded.profile,
               cursor = excluded.cursor""",
        (stream, profile, moved, ctx.now))
    ctx.changes.touch("channel_stream")
    return moved


def _seen(ctx: WriteContext, order: UpdateOrder, stream: str, update_id: str) -> tuple[str, int] | None:
    """(cursor, generation) of the stream, or None when its cursor confirms `update_id` (applied before)."""
    stored, generation = stream_position(ctx, stream)
    cursor = order.start if stored is None else stored
    return None if order.confirms(cursor, update_id) else (cursor, generation)


@command("channel.answer")
def channel_answer(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """An answer taken from a channel update, applied once per update id.

    args: {profile, adapter_epoch, stream, channel (the type), update_id, request_id, expected_revision,
    response, user_id, chat_id, found?} for a decision; with kind "checkpoint", `input` instead
    of `response` (a reply's text, made the checkpoint's answer). The adapter checked the user
    and chat against its allow-lists. `found` ({effect_id, chat_id, message_id}) is the delivery the tapped message
    belongs to, when its reference was not known. The cursor moves past the update whatever the
    answer's fate, in the same transaction. Returns {status: accepted | refused | seen, error?, choice?}.
    """
    profile, update_id, stream, order = args["profile"], str(args["update_id"]), stream_of(args), order_of(args)
    require_adapter(ctx, profile, args["adapter_epoch"])
    position = _seen(ctx, order, stream, update_id)
    if position is None:
        return {"status": "seen"}
    cursor, generation = position
    if args.get("found"):
        record_found(ctx, profile, args["found"])
    channel = str(args.get("channel") or stream.partition(":")[0])
    provenance = {"kind": "channel", "channel": channel, "profile": profile,
                  "user_id": str(args["user_id"]), "chat_id": str(args["chat_id"]), "update_id": update_id}
    provenance.update({key: args[key] for key in ("name", "username") if isinstance(args.get(key), str) and args[key]})
    answer = {"request_id": args["request_id"], "expected_revision": args.get("expected_revision"),
              "idempotency_key": f"channel:{stream}:{generation}:{update_id}"}
    checkpoint = args.get("kind") == "checkpoint"
    ctx.conn.execute("SAVEPOINT channel_answer")
    try:
        if checkpoint:
            receipt = answer_checkpoint(ctx, {**answer, "input": args["input"]}, provenance,
                                        f"channel.answer ({profile})")
        else:
            receipt = answer_decision(ctx, {**answer, "response": args["response"]}, provenance,
                                      f"channel.answer ({profile})")
    except PiwfError as err:
        ctx.conn.execute("ROLLBACK TO channel_answer")
        ctx.conn.execute("RELEASE channel_answer")
        result: dict[str, Any] = {"status": "refused", "error": err.one_line(200)}
    else:
        ctx.conn.execute("RELEASE channel_answer")
        result = {"status": "accepted", "choice": receipt.get("choice"), "run_id": receipt["run_id"]}
    _advance(ctx, order, profile, stream, order.past(cursor, update_id))
    return result


@command("channel.effect_found")
def effect_found(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """A tap that answers nothing (an old copy, a closed decision) still shows where a delivery's
    message is: {profile, adapter_epoch, stream, channel, update_id, found: {effect_id, chat_id, message_id}}.
    Recorded, and the cursor moves past the update, in one transaction. Returns {found: bool}."""
    profile, update_id, stream, order = args["profile"], str(args["update_id"]), stream_of(args), order_of(args)
    require_adapter(ctx, profile, args["adapter_epoch"])
    position = _seen(ctx, order, stream, update_id)
    if position is None:
        return {"found": False, "status": "seen"}
    changed = record_found(ctx, profile, args["found"])
    _advance(ctx, order, profile, stream, order.past(position[0], update_id))
    return {"found": changed}


@command("channel.cursor")
def channel_cursor(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Move the stream's cursor past updates that needed nothing written: {profile, adapter_epoch, stream,
    channel, cursor}."""
    require_adapter(ctx, args["profile"], args["adapter_epoch"])
    return {"cursor": _advance(ctx, order_of(args), args["profile"], stream_of(args), str(args["cursor"]))}


@command("channel.cursor_rebase")
def channel_cursor_rebase(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """The service's update ids restarted below the cursor: {profile, adapter_epoch, stream, channel,
    cursor, expected}. Sets the cursor back to `cursor` and starts a new generation, only while the
    stored cursor is still `expected` (a stale re-base changes nothing) and `cursor` is behind it.
    Returns {cursor, generation, rebased}."""
    profile, stream, order = args["profile"], stream_of(args), order_of(args)
    require_adapter(ctx, profile, args["adapter_epoch"])
    stored, generation = stream_position(ctx, stream)
    cursor, rebase_to = order.start if stored is None else stored, str(args["cursor"])
    if stored is None or stored != str(args["expected"]) or order.later(rebase_to, stored) == rebase_to:
        return {"cursor": cursor, "generation": generation, "rebased": False}
    ctx.conn.execute("UPDATE channel_stream SET cursor = ?, generation = generation + 1, updated_at = ? "
                     "WHERE stream = ?", (rebase_to, ctx.now, stream))
    ctx.changes.touch("channel_stream")
    return {"cursor": rebase_to, "generation": generation + 1, "rebased": True}
