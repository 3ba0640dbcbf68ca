"""What a decision channel adapter writes about its messages, each command fenced by the
profile's adapter epoch (answers and the update cursor are in `channel_answers.py`).

Channel effects follow the side-effect rule of the design: a message a
channel sends or edits is recorded `applying` (`channel.effect_reserve`)
before the adapter attempts it, and settled after (`channel.effect_settle`):

- `applied`, with the channel's message reference;
- `failed` when it surely did not happen: it is attempted again from
  `retry_at`, 1 s after the first failure, doubling to 5 minutes, or later
  when the service asked (a 429's retry_after), for as long as the decision
  is open. A chat the service says has moved (a Telegram group that became a
  supergroup) is remembered (`channel_chat_move`) and the next attempt goes
  there at once;
- `ambiguous` when it may have happened. An ambiguous delivery is never
  attempted again unless a person says so (`channel.recover`); an ambiguous
  *edit* is simply made again (editing a message to the text it already
  shows changes nothing), so a settlement is never ambiguous; a prompt for
  text (failed or ambiguous) is asked again when the person taps the choice
  again — their tap is their word, and a second prompt is harmless.

An adapter that starts (`channel.adapter_start`) marks what an earlier
adapter of its profile left `applying` ambiguous (edits: failed, to be made
again): that adapter died between the attempt and its receipt.

Chat, user and message ids are text, as the channel names them (a number in a
command's arguments is taken as its decimal text); the store compares them
for equality only.

A notification (`notify(…, audience=…)`, purpose `notification`: a plain message, no buttons,
its request_id the outbox message's id) follows the same rules. It is wanted — sent, and tried
again after a sure failure — for a day after it was written (`channel_queries.NOTIFICATION_WINDOW_S`),
whatever became of its run; an ambiguous one is sent again only at a person's `retry` (the same
row, its next attempt).

When a person asks to send an ambiguous delivery again, the first copy
becomes `replaced` and the next copy is a row of its own (`detail.copy`),
whose buttons carry a token of their own: the earlier copy, if it arrived,
no longer answers the decision, and it is edited to say so once its message
is known (`channel.effect_found`: a tap on a message proves where it is).
"""

from __future__ import annotations

import json
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.channels.base import UpdateOrder
from piwf_actors.channels.registry import update_order
from piwf_actors.errors import AdapterReplaced, NotFound, Rejected
from piwf_actors.ids import new_id
from piwf_actors.store import channel_queries
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command

#: Why an `applying` effect became ambiguous (stable codes, shown by channel.status).
HOST_RESTARTED = "host_restarted_without_receipt"
ADAPTER_EXITED = "adapter_exited_without_receipt"
PURPOSES = ("delivery", "settlement", "input_prompt", "notification")
#: The pause after a sure failure: FIRST_RETRY_S, doubling per attempt, at most MAX_RETRY_S.
FIRST_RETRY_S = 1.0
MAX_RETRY_S = 300.0
_OPEN = ("pending", "presenting")


def message_id(effect_id: str, attempt: int) -> str:
    """The stable id of one attempt of an effect (what `channel.status` lists and `channel.recover` names)."""
    return f"{effect_id}-{attempt}"


def retry_delay(attempt: int, retry_after: float | None = None) -> float:
    """Seconds to wait after the `attempt`-th sure failure of one effect."""
    backoff = min(FIRST_RETRY_S * 2 ** max(attempt - 1, 0), MAX_RETRY_S)
    return max(backoff, float(retry_after or 0.0))


def require_adapter(ctx: WriteContext, profile: str, adapter_epoch: str) -> None:
    row = ctx.conn.execute("SELECT adapter_epoch FROM channel_adapter WHERE profile = ?", (profile,)).fetchone()
    if row is None or row[0] != adapter_epoch:
        raise AdapterReplaced(profile)


def stream_of(args: dict[str, Any]) -> str:
    """The bot update stream a command names (`<type>:<token fingerprint>`; callers without one,
    such as tests of a single bot, read the profile's own)."""
    return str(args.get("stream") or f"profile:{args['profile']}")


def order_of(args: dict[str, Any]) -> UpdateOrder:
    """The update order of the channel type a command names (`channel`, else the type its stream key
    starts with: `<type>:<fingerprint>`): the adapter's code, the only reader of its cursors."""
    channel_type = str(args.get("channel") or str(args.get("stream") or "").partition(":")[0])
    try:
        return update_order(channel_type)
    except LookupError as exc:
        raise Rejected(f"a channel command for {channel_type or 'no channel type'!r}: {exc.args[0]}") from None


def stream_position(ctx: WriteContext, stream: str) -> tuple[str | None, int]:
    """(cursor, generation) of a bot's update stream (`channel_answers.py`); (None, 0) for one never
    read (its channel type's `UpdateOrder.start`)."""
    row = ctx.conn.execute("SELECT cursor, generation FROM channel_stream WHERE stream = ?", (stream,)).fetchone()
    return (None, 0) if row is None else (str(row[0]), int(row[1]))


def chat_moves(ctx: WriteContext, profile: str) -> dict[str, str]:
    return {str(chat): str(moved) for chat, moved in ctx.conn.execute(
        "SELECT chat_id, moved_to FROM channel_chat_move WHERE profile = ?", (profile,)).fetchall()}


@command("channel.adapter_start")
def adapter_start(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """A new adapter takes over `profile` under `adapter_epoch`; what the previous one left
    `applying` becomes `ambiguous` (`args.reason`), an edit becomes due again. Returns
    {cursor (None: its stream was never read), generation, ambiguous: [message ids],
    moves: {chat id: moved to}}."""
    profile, reason = args["profile"], args.get("reason") or ADAPTER_EXITED
    ctx.conn.execute(
        """INSERT INTO channel_adapter (profile, adapter_epoch, host_epoch, started_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (profile) DO UPDATE SET adapter_epoch = excluded.adapter_epoch,
               host_epoch = excluded.host_epoch, started_at = excluded.started_at""",
        (profile, args["adapter_epoch"], ctx.host_epoch, ctx.now))
    edits = ctx.conn.execute(
        "UPDATE channel_effect SET status = 'failed', error = ?, retry_at = ?, updated_at = ? "
        "WHERE profile = ? AND status = 'applying' AND purpose = 'settlement' RETURNING effect_id",
        (reason, ctx.now, ctx.now, profile)).fetchall()
    left = ctx.conn.execute(
        "UPDATE channel_effect SET status = 'ambiguous', error = ?, updated_at = ? "
        "WHERE profile = ? AND status = 'applying' RETURNING effect_id, attempt",
        (reason, ctx.now, profile)).fetchall()
    if left or edits:
        ctx.changes.touch("channel_effect")
    cursor, generation = stream_position(ctx, stream_of(args))
    return {"cursor": cursor, "generation": generation, "ambiguous": [message_id(e, a) for e, a in left],
            "moves": chat_moves(ctx, profile)}


def _request_state(ctx: WriteContext, request_id: str) -> tuple[str, str] | None:
    row = ctx.conn.execute("SELECT kind, status FROM interactive_request WHERE request_id = ?",
                           (request_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def _effect(ctx: WriteContext, where: str, params: tuple[Any, ...]) -> dict[str, Any] | None:
    row = ctx.conn.execute(
        f"SELECT effect_id, purpose, request_id, chat_id, effect_key, attempt, status, result, detail, retry_at, "
        f"profile FROM channel_effect WHERE {where}", params).fetchone()
    if row is None:
        return None
    keys = ("effect_id", "purpose", "request_id", "chat_id", "effect_key", "attempt", "status", "result", "detail",
            "retry_at", "profile")
    effect = dict(zip(keys, row, strict=True))
    effect["result"] = None if effect["result"] is None else json.loads(effect["result"])
    effect["detail"] = json.loads(effect["detail"]) if effect["detail"] else {}
    return effect


def _key(profile: str, purpose: str, request_id: str, chat_id: str, extra: str | None) -> str:
    return "|".join([profile, purpose, request_id, chat_id, *([extra] if extra else [])])


def _copy_extra(copy: int) -> str | None:
    """The key suffix of a delivery's copy (none for the first copy, as before copies existed)."""
    return f"copy{copy}" if copy else None


def notification_wanted(ctx: WriteContext, message_id: str) -> bool:
    """Whether a notification is still to be sent: it names an audience and was written less than
    `channel_queries.NOTIFICATION_WINDOW_S` ago (its run may have ended long since)."""
    row = ctx.conn.execute("SELECT created_at FROM session_message WHERE message_id = ? AND kind = 'notify' "
                           "AND audience IS NOT NULL", (message_id,)).fetchone()
    return row is not None and float(row[0]) >= channel_queries.notifications_since(ctx.now)


def _reservable(ctx: WriteContext, args: dict[str, Any], purpose: str, request_id: str) -> str | None:
    """Why this effect must not be attempted now, or None."""
    if purpose == "notification":
        return None if notification_wanted(ctx, request_id) else "the notification is no longer wanted"
    state = _request_state(ctx, request_id)
    # A checkpoint is delivered and settled like a decision; only a decision's choice asks for text.
    if state is None or state[0] not in (("decision",) if purpose == "input_prompt" else ("decision", "checkpoint")):
        return "no such decision"
    open_ = state[1] in _OPEN
    if purpose in ("delivery", "input_prompt") and not open_:
        return "the decision is no longer open"
    if purpose == "delivery" and int(args.get("copy") or 0) > 0:
        before = _effect(ctx, "effect_key = ?", (_key(args["profile"], "delivery", request_id, str(args["chat_id"]),
                                                      _copy_extra(int(args["copy"]) - 1)),))
        if before is None or before["status"] != "replaced":
            return "the earlier copy was not replaced"
    if purpose == "settlement":
        delivered = _effect(ctx, "effect_id = ?", (str(args.get("delivery_effect_id")),))
        if delivered is None or delivered["result"] is None or delivered["status"] not in ("applied", "replaced"):
            return "nothing was delivered to settle"
        if open_ and delivered["status"] != "replaced":
            return "the decision is still open"
    return None


@command("channel.effect_reserve")
def effect_reserve(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Record an attempt `applying` before the adapter makes it.

    args: {profile, adapter_epoch, purpose, request_id, chat_id, copy? (delivery), delivery_effect_id?
    (settlement), key_extra? (prompt), detail?}. Returns {effect_id, attempt, message_id, copy} to go
    ahead, or {skip: reason} when the effect is done, ambiguous (waiting for a person), not due yet
    after a failure, or no longer wanted.
    """
    profile, purpose, request_id, chat_id = args["profile"], args["purpose"], args["request_id"], str(args["chat_id"])
    require_adapter(ctx, profile, args["adapter_epoch"])
    if purpose not in PURPOSES:
        raise Rejected(f"unknown channel effect purpose {purpose!r}")
    copy = int(args.get("copy") or 0)
    extra = _copy_extra(copy) if purpose in ("delivery", "settlement") else args.get("key_extra")
    key = _key(profile, purpose, request_id, chat_id, str(extra) if extra else None)
    row = _effect(ctx, "effect_key = ?", (key,))
    # A prompt for text is asked again whenever the person taps the choice again, also after an
    # unknown outcome: the tap is their word, and a second prompt is harmless (a reply to either works).
    again = ("failed", "ambiguous") if purpose == "input_prompt" else ("failed",)
    if row is not None:
        if row["status"] not in again:
            return {"skip": row["status"]}
        if purpose != "input_prompt" and row["retry_at"] is not None and row["retry_at"] > ctx.now:
            return {"skip": "not due yet", "retry_at": row["retry_at"], "wait_s": row["retry_at"] - ctx.now}
    reason = _reservable(ctx, args, purpose, request_id)
    if reason is not None:
        return {"skip": reason}
    if row is None:
        effect_id, attempt = new_id("chf", ctx.now), 1
        detail = dict(args.get("detail") or {})
        if purpose in ("delivery", "settlement") and copy:
            detail["copy"] = copy
        if purpose == "settlement":
            detail["delivery"] = args["delivery_effect_id"]
        ctx.conn.execute(
            """INSERT INTO channel_effect (effect_id, profile, purpose, request_id, chat_id, effect_key, attempt,
                   status, manual_retries, adapter_epoch, detail, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, 1, 'applying', 0, ?, ?, ?, ?)""",
            (effect_id, profile, purpose, request_id, chat_id, key, args["adapter_epoch"],
             canonical_json(detail) if detail else None, ctx.now, ctx.now))
    else:
        effect_id, attempt = row["effect_id"], row["attempt"] + 1
        ctx.conn.execute("UPDATE channel_effect SET attempt = ?, status = 'applying', adapter_epoch = ?, error = NULL, "
                         "retry_at = NULL, updated_at = ? WHERE effect_id = ?",
                         (attempt, args["adapter_epoch"], ctx.now, effect_id))
    ctx.changes.touch("channel_effect")
    return {"effect_id": effect_id, "attempt": attempt, "message_id": message_id(effect_id, attempt), "copy": copy}


@command("channel.effect_settle")
def effect_settle(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """The adapter's receipt for an attempt: {profile, adapter_epoch, effect_id, attempt,
    outcome: applied | failed | ambiguous, result?, error?, retry_after?, moved_from?, moved_to?}.

    Only the attempt still `applying` under this adapter is settled; anything else is refused as
    stale. A failure is due again after `retry_delay`, at once when the chat moved (`moved_from`
    → `moved_to`, remembered for the profile). Returns {effect_id, attempt, status, retry_at?}.
    """
    outcome = args["outcome"]
    if outcome not in ("applied", "failed", "ambiguous"):
        raise Rejected(f"unknown channel effect outcome {outcome!r}")
    profile = args["profile"]
    require_adapter(ctx, profile, args["adapter_epoch"])
    effect = _effect(ctx, "effect_id = ? AND attempt = ? AND status = 'applying' AND adapter_epoch = ?",
                     (args["effect_id"], args["attempt"], args["adapter_epoch"]))
    if effect is None:
        raise Rejected(f"channel effect {message_id(args['effect_id'], args['attempt'])} is not in flight")
    error = (args.get("error") or None) and str(args["error"])[:1000]
    status, retry_at = outcome, None
    if outcome == "ambiguous" and effect["purpose"] == "settlement":
        # Editing a message to the text it already shows changes nothing: make it again.
        status, error = "failed", f"outcome unknown, the edit will be made again: {error}"[:1000]
    if status == "failed":
        moved_to = args.get("moved_to")
        if moved_to is not None and args.get("moved_from") is not None:
            _record_move(ctx, profile, str(args["moved_from"]), str(moved_to))
            retry_at = ctx.now
        elif effect["purpose"] != "input_prompt":  # a prompt is asked again when the person taps again
            retry_at = ctx.now + retry_delay(effect["attempt"], args.get("retry_after"))
    ctx.conn.execute(
        "UPDATE channel_effect SET status = ?, result = ?, error = ?, retry_at = ?, updated_at = ?, settled_at = ? "
        "WHERE effect_id = ?",
        (status, None if args.get("result") is None else canonical_json(args["result"]), error, retry_at, ctx.now,
         ctx.now, effect["effect_id"]))
    # Shown somewhere now: the request is `presenting` (its revision stays: answers bound to it hold).
    if status == "applied" and effect["purpose"] == "delivery":
        _presenting(ctx, effect["request_id"])
    ctx.changes.touch("channel_effect")
    settled: dict[str, Any] = {"effect_id": args["effect_id"], "attempt": args["attempt"], "status": status}
    if retry_at is not None:
        settled["retry_at"] = retry_at
    return settled


def _presenting(ctx: WriteContext, request_id: str) -> None:
    if ctx.conn.execute("UPDATE interactive_request SET status = 'presenting', updated_at = ? WHERE request_id = ? "
                        "AND status = 'pending'", (ctx.now, request_id)).rowcount:
        ctx.changes.touch("interactive_request")


def _record_move(ctx: WriteContext, profile: str, chat_id: str, moved_to: str) -> None:
    ctx.conn.execute(
        """INSERT INTO channel_chat_move (profile, chat_id, moved_to, moved_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (profile, chat_id) DO UPDATE SET moved_to = excluded.moved_to, moved_at = excluded.moved_at""",
        (profile, chat_id, moved_to, ctx.now))
    ctx.changes.touch("channel_chat_move")


def record_found(ctx: WriteContext, profile: str, found: dict[str, Any]) -> bool:
    """A tap on a message proved where a delivery's copy is ({effect_id, chat_id, message_id}):
    an ambiguous delivery arrived after all (`applied`), a confirmed or replaced one gets its
    reference, so its buttons can be removed. True when something changed."""
    effect = _effect(ctx, "effect_id = ? AND profile = ? AND purpose = 'delivery'", (found["effect_id"], profile))
    if effect is None or effect["result"] is not None or effect["status"] not in ("ambiguous", "applied", "replaced"):
        return False
    reference = {"chat_id": str(found["chat_id"]), "message_id": str(found["message_id"])}
    status = "applied" if effect["status"] == "ambiguous" else effect["status"]
    ctx.conn.execute("UPDATE channel_effect SET status = ?, result = ?, error = ?, updated_at = ?, "
                     "settled_at = coalesce(settled_at, ?) WHERE effect_id = ?",
                     (status, canonical_json(reference), "found: a person tapped it", ctx.now, ctx.now,
                      effect["effect_id"]))
    if effect["status"] == "ambiguous":
        _presenting(ctx, effect["request_id"])
    ctx.changes.touch("channel_effect")
    return True


@command("channel.recover")
def channel_recover(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """A person settles a delivery that is waiting: {profile, message_id, action: confirm | retry}.

    An ambiguous one: `confirm` says it reached the chat (its message is found, and its buttons
    removed, when someone taps it); `retry` sends it again, as a new copy whose buttons replace the
    first's (a notification, which has no buttons: its next attempt). A failed one (surely not sent, waiting for its next automatic attempt): `retry` makes
    that attempt now. Recorded for idempotency like every client command.
    """
    return recorded(ctx, args, lambda: _recover(ctx, args))


def _check_resendable(ctx: WriteContext, stable: str, effect: dict[str, Any]) -> None:
    """Refuse a person's `retry` of an attempt that `channel.effect_reserve` would never make again: a
    notification past its day, a delivery (or prompt) of a decision no longer open. (An edit is made
    after the decision closed: that is what it is for.)"""
    purpose = effect["purpose"]
    if purpose == "settlement":
        return
    if purpose == "notification":
        if not notification_wanted(ctx, effect["request_id"]):
            raise Rejected(f"channel delivery {stable}: the notification is older than "
                           f"{channel_queries.NOTIFICATION_WINDOW_S / 3600:g} h; it is no longer sent")
    elif (state := _request_state(ctx, effect["request_id"])) is None or state[1] not in _OPEN:
        raise Rejected(f"channel delivery {stable}: the decision is no longer open; nothing to send again")


def _recover(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    action, stable = args.get("action"), str(args["message_id"])
    if action not in ("confirm", "retry"):
        raise Rejected("channel.recover action must be confirm or retry")
    effect_id, _, attempt = stable.rpartition("-")
    effect = _effect(ctx, "effect_id = ? AND attempt = ? AND profile = ?",
                     (effect_id, int(attempt) if attempt.isdigit() else -1, args["profile"]))
    if effect is None:
        raise NotFound("channel delivery", stable)
    status, purpose = effect["status"], effect["purpose"]
    receipt = {"profile": args["profile"], "message_id": stable, "action": action, "status": status}
    if status == "failed":
        if action == "confirm":
            raise Rejected(f"channel delivery {stable} surely was not sent; nothing to confirm (retry sends it now)")
        _check_resendable(ctx, stable, effect)
        ctx.conn.execute("UPDATE channel_effect SET retry_at = ?, manual_retries = manual_retries + 1, updated_at = ? "
                         "WHERE effect_id = ?", (ctx.now, ctx.now, effect_id))
        ctx.changes.touch("channel_effect")
        return {**receipt, "next_message_id": message_id(effect_id, int(attempt) + 1)}
    if status != "ambiguous":
        raise Rejected(f"channel delivery {stable} is {status}, not ambiguous or failed")
    if action == "confirm":
        ctx.conn.execute("UPDATE channel_effect SET status = 'applied', error = 'confirmed by a person', updated_at = ?, "
                         "settled_at = ? WHERE effect_id = ?", (ctx.now, ctx.now, effect_id))
        if purpose == "delivery":
            _presenting(ctx, effect["request_id"])
        next_id: str | None = stable
    else:
        _check_resendable(ctx, stable, effect)
        if purpose == "delivery":
            # The copy that may be in the chat stops answering: its buttons carry the old copy's token.
            ctx.conn.execute("UPDATE channel_effect SET status = 'replaced', error = 'sent again at a person''s word', "
                             "manual_retries = manual_retries + 1, updated_at = ? WHERE effect_id = ?",
                             (ctx.now, effect_id))
            next_id = None
        else:
            ctx.conn.execute("UPDATE channel_effect SET status = 'failed', error = 'retry asked by a person', "
                             "retry_at = ?, manual_retries = manual_retries + 1, updated_at = ? WHERE effect_id = ?",
                             (ctx.now, ctx.now, effect_id))
            next_id = message_id(effect_id, int(attempt) + 1)
    ctx.changes.touch("channel_effect")
    return {**receipt, "next_message_id": next_id}
