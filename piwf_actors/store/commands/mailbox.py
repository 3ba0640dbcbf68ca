"""A run's durable mailbox: `message.send` (a client), `message_send` (a node's `ctx.send_message`).

A message is a row of `run_message`, kept `pending` until a `wait_message` on its
topic takes it. Sending it and handing it to a waiting node happen in one
transaction: if the run is parked on a wait for that topic (and not paused), the
first pending message of the topic settles the wait and the run is queued. A
message sent before the run waits stays in the mailbox; the wait takes it when it
is created. Each message is consumed once (its status moves from `pending` to
`consumed` naming the wait, checked in the update), in send order per topic
(`seq`). A sender's key names the message (`message_id`), so a message sent
again under the same key is the one already there.
"""

from __future__ import annotations

import hashlib
from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import Rejected
from piwf_actors.ids import new_id
from piwf_actors.statuses import TERMINAL_STATUSES
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command, peer_provenance
from piwf_actors.store.commands.waits import settle, wait_row
from piwf_actors.store.commands.worker_ops import operation
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import run_row
from piwf_actors.store.values import get_value, put_value

MAX_TOPIC_CHARS = 200


def message_id_for(*key: Any) -> str:
    digest = hashlib.sha256(canonical_json(["message", *key]).encode()).hexdigest()
    return f"msg_{digest[:26]}"


def wait_topics_of(conn: Any, run_id: str) -> list[str] | None:
    """The topics run `run_id`'s workflow can wait for a message on, as the host stored them when it
    made the run (its `run_created` event: workflows/waits.py `wait_topics`); None when any topic could
    be (one is computed), or the run was made without them (by an older host) or does not exist."""
    row = conn.execute("SELECT payload FROM run_event WHERE run_id = ? AND kind = 'run_created' ORDER BY seq "
                       "LIMIT 1", (run_id,)).fetchone()
    created = loads(row[0]) if row is not None and row[0] else None
    topics = created.get("wait_topics") if isinstance(created, dict) else None
    return list(topics) if isinstance(topics, list) else None


def _paused(run: dict[str, Any]) -> bool:
    return bool(run["pause_requested"]) or (run["status"] == "parked" and run["park_reason"] == "paused")


def _receipt(ctx: WriteContext, message_id: str) -> dict[str, Any] | None:
    row = ctx.conn.execute("SELECT run_id, topic, seq, status, wait_id FROM run_message WHERE message_id = ?",
                           (message_id,)).fetchone()
    if row is None:
        return None
    return {"message_id": message_id, "run_id": row[0], "topic": row[1], "seq": row[2], "status": row[3],
            "consumed_by": row[4]}


def post(ctx: WriteContext, run_id: str, topic: Any, payload: Any, sender: dict[str, Any],
         message_id: str) -> dict[str, Any]:
    """Put a message into `run_id`'s mailbox and hand it to a wait on its topic if one is ready."""
    if not isinstance(topic, str) or not topic.strip() or len(topic) > MAX_TOPIC_CHARS:
        raise Rejected(f"a topic is a non-empty string of at most {MAX_TOPIC_CHARS} characters")
    seen = _receipt(ctx, message_id)
    if seen is not None:
        return {**seen, "replayed": True}
    run = run_row(ctx.conn, run_id)
    if run["status"] in TERMINAL_STATUSES:
        raise Rejected(f"run {run_id} is {run['status']}: a message to it would never be read")
    seq = ctx.conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM run_message WHERE run_id = ?",
                           (run_id,)).fetchone()[0]
    inline, sha = put_value(ctx.conn, payload, ctx.now)
    ctx.conn.execute(
        """INSERT INTO run_message (message_id, run_id, topic, seq, status, payload_json, payload_sha256, sender,
               created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?)""",
        (message_id, run_id, topic, seq, inline, sha, canonical_json(sender), ctx.now))
    append_event(ctx.conn, run_id, "message_received", ctx.now,
                 payload={"message_id": message_id, "topic": topic, "seq": seq, "from": sender.get("kind")})
    ctx.changes.touch("run_message", run_id)
    if not _paused(run):
        wait = wait_row(ctx, "run_id = ? AND kind = 'message' AND topic = ? AND status = 'pending' "
                             "ORDER BY created_at LIMIT 1", (run_id, topic))
        if wait is not None:
            deliver_waiting(ctx, wait)
    receipt = _receipt(ctx, message_id)
    assert receipt is not None
    return receipt


def deliver_waiting(ctx: WriteContext, wait: dict[str, Any]) -> bool:
    """Give the pending message wait `wait` the first pending message of its topic, if any."""
    row = ctx.conn.execute(
        "SELECT message_id, payload_json, payload_sha256 FROM run_message WHERE run_id = ? AND topic = ? "
        "AND status = 'pending' ORDER BY seq LIMIT 1", (wait["run_id"], wait["topic"])).fetchone()
    if row is None:
        return False
    message_id = row[0]
    if ctx.conn.execute("UPDATE run_message SET status = 'consumed', wait_id = ?, consumed_at = ? "
                        "WHERE message_id = ? AND status = 'pending'",
                        (wait["wait_id"], ctx.now, message_id)).rowcount != 1:
        return False
    ctx.changes.touch("run_message", wait["run_id"])
    return settle(ctx, wait, {"outcome": "ok", "output": get_value(ctx.conn, row[1], row[2]),
                              "message_id": message_id}, reason="message")


def deliver_resumed(ctx: WriteContext, run_id: str) -> None:
    """The run was resumed: its message waits take what came while it was paused."""
    for (wait_id,) in ctx.conn.execute("SELECT wait_id FROM run_wait WHERE run_id = ? AND kind = 'message' "
                                       "AND status = 'pending'", (run_id,)).fetchall():
        wait = wait_row(ctx, "wait_id = ?", (wait_id,))
        if wait is not None:
            deliver_waiting(ctx, wait)


# --- senders ---------------------------------------------------------------------------------------


def _peer(args: dict[str, Any]) -> dict[str, Any]:
    sender: dict[str, Any] = {"kind": "client", "client_id": args.get("client_id")}
    sender.update(peer_provenance(args.get("peer")))
    return sender


@command("message.send")
def message_send(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Send `payload` to run `run_id` on `topic`; recorded (and so sent once) under the client's key.

    When the run's topics are known (`wait_topics_of`) the receipt lists them (`topics`), so a client
    can say that no node waits on this one; `strict` refuses such a message instead (nothing is sent)."""

    def apply() -> dict[str, Any]:
        run_id, topic = str(args["to_run_id"]), args.get("topic")
        topics = wait_topics_of(ctx.conn, run_id)
        if args.get("strict") and topics is not None and topic not in topics:
            said = ", ".join(repr(known) for known in topics)
            raise Rejected(f"no node of run {run_id}'s workflow waits for a message on {topic!r} "
                           f"({f'its topics: {said}' if topics else 'it has no wait_message node'}); nothing was sent")
        key = args.get("idempotency_key")
        # The target is part of the name: a key reused for another run (after its record was pruned)
        # is another message, never the first one's receipt.
        message_id = (message_id_for("client", args.get("client_id"), key, run_id)
                      if key and args.get("client_id") else new_id("msg", ctx.now))
        receipt = post(ctx, run_id, topic, args.get("message"), _peer(args), message_id)
        return receipt if topics is None else {**receipt, "topics": topics}

    return recorded(ctx, args, apply)


@operation("message_send", fenced=False)
def _node_message_send(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """A node's `ctx.send_message`: an effect-free write, idempotent by the node's attempt. Its key is
    (run, node, attempt number, n-th message of the attempt), which a node run again after a crash
    (the same attempt number: an unfinished attempt is not counted) sends again: the same message."""
    key = payload["key"]
    sender = {"kind": "run", "run_id": run["run_id"], "node_id": payload.get("node_id")}
    return post(ctx, str(payload["run_id"]), payload.get("topic"), payload.get("payload"), sender,
                message_id_for("run", run["run_id"], key))

