"""What a decision channel adapter writes, each command fenced by the profile's adapter epoch.

Channel effects follow the side-effect rule of the design: a message a
channel sends or edits is recorded `applying` (`channel.effect_reserve`)
before the adapter attempts it, and settled after (`channel.effect_settle`):
`applied` with the channel's message reference, `failed` when it surely did
not happen (then it may be attempted again, at most three attempts in all),
or `ambiguous` when it may have happened. An ambiguous effect is never
attempted again unless a person says so (`channel.recover`). An adapter that
starts (`channel.adapter_start`) marks what an earlier adapter of its profile
left `applying` as ambiguous: that adapter died between the attempt and its
receipt.

Answers arrive as channel updates with increasing ids. Each update is
applied in the same transaction that moves the profile's cursor past it,
and an update below the cursor was applied already: a crash between the two
makes the channel deliver the update again, and it is then skipped.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import AdapterReplaced, NotFound, PiwfError, Rejected
from piwf_actors.ids import new_id
from piwf_actors.store.commands.idempotency import recorded
from piwf_actors.store.commands.interactions import answer_decision
from piwf_actors.store.commands.registry import WriteContext, command

#: Why an `applying` effect became ambiguous (stable codes, shown by channel.status).
HOST_RESTARTED = "host_restarted_without_receipt"
ADAPTER_EXITED = "adapter_exited_without_receipt"
#: Attempts of one effect made without a person asking (only after sure failures).
MAX_AUTOMATIC_ATTEMPTS = 3
PURPOSES = ("delivery", "settlement", "input_prompt")


def message_id(effect_id: str, attempt: int) -> str:
    """The stable id of one attempt of an effect (what `channel.status` lists and `channel.recover` names)."""
    return f"{effect_id}-{attempt}"


def _require_adapter(ctx: WriteContext, profile: str, adapter_epoch: str) -> None:
    row = ctx.conn.execute("SELECT adapter_epoch FROM channel_adapter WHERE profile = ?", (profile,)).fetchone()
    if row is None or row[0] != adapter_epoch:
        raise AdapterReplaced(profile)


def _cursor(ctx: WriteContext, profile: str) -> int:
    row = ctx.conn.execute("SELECT cursor FROM channel_cursor WHERE profile = ?", (profile,)).fetchone()
    return 0 if row is None else int(row[0])


def _advance(ctx: WriteContext, profile: str, cursor: int) -> int:
    ctx.conn.execute(
        """INSERT INTO channel_cursor (profile, cursor, updated_at) VALUES (?, ?, ?)
           ON CONFLICT (profile) DO UPDATE SET updated_at = excluded.updated_at,
               cursor = CASE WHEN excluded.cursor > channel_cursor.cursor THEN excluded.cursor
                             ELSE channel_cursor.cursor END""",
        (profile, cursor, ctx.now))
    ctx.changes.touch("channel_cursor")
    return _cursor(ctx, profile)


@command("channel.adapter_start")
def adapter_start(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """A new adapter takes over `profile` under `adapter_epoch`; what the previous one left
    `applying` becomes `ambiguous` (`args.reason`). Returns {cursor, ambiguous: [message ids]}."""
    profile, reason = args["profile"], args.get("reason") or ADAPTER_EXITED
    ctx.conn.execute(
        """INSERT INTO channel_adapter (profile, adapter_epoch, host_epoch, started_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (profile) DO UPDATE SET adapter_epoch = excluded.adapter_epoch,
               host_epoch = excluded.host_epoch, started_at = excluded.started_at""",
        (profile, args["adapter_epoch"], ctx.host_epoch, ctx.now))
    left = ctx.conn.execute(
        "UPDATE channel_effect SET status = 'ambiguous', error = ?, updated_at = ? "
        "WHERE profile = ? AND status = 'applying' RETURNING effect_id, attempt",
        (reason, ctx.now, profile)).fetchall()
    if left:
        ctx.changes.touch("channel_effect")
    return {"cursor": _cursor(ctx, profile), "ambiguous": [message_id(e, a) for e, a in left]}


def _request_state(ctx: WriteContext, request_id: str) -> tuple[str, str] | None:
    row = ctx.conn.execute("SELECT kind, status FROM interactive_request WHERE request_id = ?",
                           (request_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def _reservable(ctx: WriteContext, profile: str, purpose: str, request_id: str, chat_id: int) -> str | None:
    """Why this effect must not be attempted now, or None."""
    state = _request_state(ctx, request_id)
    if state is None or state[0] != "decision":
        return "no such decision"
    open_ = state[1] in ("pending", "presenting")
    if purpose in ("delivery", "input_prompt") and not open_:
        return "the decision is no longer open"
    if purpose == "settlement":
        if open_:
            return "the decision is still open"
        delivered = ctx.conn.execute(
            "SELECT 1 FROM channel_effect WHERE profile = ? AND purpose = 'delivery' AND request_id = ? "
            "AND chat_id = ? AND status = 'applied' AND result IS NOT NULL", (profile, request_id, chat_id)).fetchone()
        if delivered is None:
            return "nothing was delivered to settle"
    return None


@command("channel.effect_reserve")
def effect_reserve(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Record an attempt `applying` before the adapter makes it.

    args: {profile, adapter_epoch, purpose, request_id, chat_id, key_extra?, detail?}. Returns
    {effect_id, attempt, message_id} to go ahead, or {skip: reason} when the effect is done,
    ambiguous (waiting for a person), out of automatic attempts, or no longer wanted.
    """
    profile, purpose, request_id, chat_id = args["profile"], args["purpose"], args["request_id"], int(args["chat_id"])
    _require_adapter(ctx, profile, args["adapter_epoch"])
    if purpose not in PURPOSES:
        raise Rejected(f"unknown channel effect purpose {purpose!r}")
    key = "|".join([profile, purpose, request_id, str(chat_id), *([str(args["key_extra"])] if args.get("key_extra")
                                                                  else [])])
    row = ctx.conn.execute("SELECT effect_id, attempt, status, manual_retries FROM channel_effect WHERE effect_key = ?",
                           (key,)).fetchone()
    if row is not None:
        effect_id, attempt, status, manual = row
        if status != "failed":
            return {"skip": status}
        if attempt >= MAX_AUTOMATIC_ATTEMPTS + manual:
            return {"skip": "out of attempts"}
    reason = _reservable(ctx, profile, purpose, request_id, chat_id)
    if reason is not None:
        return {"skip": reason}
    if row is None:
        effect_id, attempt = new_id("chf", ctx.now), 1
        ctx.conn.execute(
            """INSERT INTO channel_effect (effect_id, profile, purpose, request_id, chat_id, effect_key, attempt,
                   status, manual_retries, adapter_epoch, detail, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, 1, 'applying', 0, ?, ?, ?, ?)""",
            (effect_id, profile, purpose, request_id, chat_id, key, args["adapter_epoch"],
             None if args.get("detail") is None else canonical_json(args["detail"]), ctx.now, ctx.now))
    else:
        attempt += 1
        ctx.conn.execute("UPDATE channel_effect SET attempt = ?, status = 'applying', adapter_epoch = ?, error = NULL, "
                         "updated_at = ? WHERE effect_id = ?", (attempt, args["adapter_epoch"], ctx.now, effect_id))
    ctx.changes.touch("channel_effect")
    return {"effect_id": effect_id, "attempt": attempt, "message_id": message_id(effect_id, attempt)}


@command("channel.effect_settle")
def effect_settle(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """The adapter's receipt for an attempt: {profile, adapter_epoch, effect_id, attempt,
    outcome: applied | failed | ambiguous, result?, error?}. Only the attempt still
    `applying` under this adapter is settled; anything else is refused as stale."""
    outcome = args["outcome"]
    if outcome not in ("applied", "failed", "ambiguous"):
        raise Rejected(f"unknown channel effect outcome {outcome!r}")
    _require_adapter(ctx, args["profile"], args["adapter_epoch"])
    row = ctx.conn.execute(
        "UPDATE channel_effect SET status = ?, result = ?, error = ?, updated_at = ?, settled_at = ? "
        "WHERE effect_id = ? AND attempt = ? AND status = 'applying' AND adapter_epoch = ? "
        "RETURNING purpose, request_id",
        (outcome, None if args.get("result") is None else canonical_json(args["result"]),
         (args.get("error") or None) and str(args["error"])[:1000], ctx.now, ctx.now, args["effect_id"],
         args["attempt"], args["adapter_epoch"])).fetchone()
    if row is None:
        raise Rejected(f"channel effect {message_id(args['effect_id'], args['attempt'])} is not in flight")
    # Shown somewhere now: the request is `presenting` (its revision stays: answers bound to it hold).
    if outcome == "applied" and row[0] == "delivery" and ctx.conn.execute(
            "UPDATE interactive_request SET status = 'presenting', updated_at = ? WHERE request_id = ? "
            "AND status = 'pending'", (ctx.now, row[1])).rowcount:
        ctx.changes.touch("interactive_request")
    ctx.changes.touch("channel_effect")
    return {"effect_id": args["effect_id"], "attempt": args["attempt"], "status": outcome}


@command("channel.answer")
def channel_answer(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """An answer taken from a channel update, applied once per update id.

    args: {profile, adapter_epoch, channel, update_id, request_id, expected_revision, response,
    user_id, chat_id}. The adapter checked the user and chat against its allow-lists. The
    cursor moves past the update whatever the answer's fate, in the same transaction.
    Returns {status: accepted | refused | seen, error?, choice?}.
    """
    profile, update_id = args["profile"], int(args["update_id"])
    _require_adapter(ctx, profile, args["adapter_epoch"])
    if update_id < _cursor(ctx, profile):
        return {"status": "seen"}
    provenance = {"kind": "channel", "channel": args.get("channel", "telegram"), "profile": profile,
                  "user_id": args["user_id"], "chat_id": args["chat_id"], "update_id": update_id}
    answer = {"request_id": args["request_id"], "expected_revision": args.get("expected_revision"),
              "response": args["response"], "idempotency_key": f"channel:{profile}:{update_id}"}
    ctx.conn.execute("SAVEPOINT channel_answer")
    try:
        receipt = answer_decision(ctx, answer, provenance, f"channel.answer ({profile})")
    except PiwfError as err:
        ctx.conn.execute("ROLLBACK TO channel_answer")
        ctx.conn.execute("RELEASE channel_answer")
        result: dict[str, Any] = {"status": "refused", "error": err.one_line(200)}
    else:
        ctx.conn.execute("RELEASE channel_answer")
        result = {"status": "accepted", "choice": receipt["choice"], "run_id": receipt["run_id"]}
    _advance(ctx, profile, update_id + 1)
    return result


@command("channel.cursor")
def channel_cursor(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Move the profile's cursor past updates that needed nothing written: {profile, adapter_epoch, cursor}."""
    _require_adapter(ctx, args["profile"], args["adapter_epoch"])
    return {"cursor": _advance(ctx, args["profile"], int(args["cursor"]))}


@command("channel.recover")
def channel_recover(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """A person settles an ambiguous delivery: {profile, message_id, action: confirm | retry}.

    `confirm`: it reached the chat, treat it as delivered (with no message reference, so its
    buttons cannot be removed later). `retry`: send it again (one more attempt, whatever the
    automatic limit). Recorded for idempotency like every client command.
    """
    return recorded(ctx, args, "channel.recover", lambda: _recover(ctx, args))


def _recover(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    action, stable = args.get("action"), str(args["message_id"])
    if action not in ("confirm", "retry"):
        raise Rejected("channel.recover action must be confirm or retry")
    effect_id, _, attempt = stable.rpartition("-")
    row = ctx.conn.execute("SELECT status FROM channel_effect WHERE effect_id = ? AND attempt = ? AND profile = ?",
                           (effect_id, int(attempt) if attempt.isdigit() else -1, args["profile"])).fetchone()
    if row is None:
        raise NotFound("channel delivery", stable)
    if row[0] != "ambiguous":
        raise Rejected(f"channel delivery {stable} is {row[0]}, not ambiguous")
    if action == "confirm":
        ctx.conn.execute("UPDATE channel_effect SET status = 'applied', error = 'confirmed by a person', updated_at = ?, "
                         "settled_at = ? WHERE effect_id = ?", (ctx.now, ctx.now, effect_id))
        next_id = stable
    else:
        ctx.conn.execute("UPDATE channel_effect SET status = 'failed', error = 'retry asked by a person', "
                         "manual_retries = manual_retries + 1, updated_at = ? WHERE effect_id = ?", (ctx.now, effect_id))
        next_id = message_id(effect_id, int(attempt) + 1)
    ctx.changes.touch("channel_effect")
    return {"profile": args["profile"], "message_id": stable, "action": action, "next_message_id": next_id}
