"""Events: `event.emit` records an event and hands it, in the same transaction, to every run waiting
for it (`wait_event`); a waiting run's wait takes an event emitted earlier when it starts.

An event is a row of `event` (schema v21), recorded once per (name, key) when a key is given: an emit
again under the same key is the event already there (`adopted_event` in the receipt), whoever sends
it. Without a key every emit is a new event, but a client that resends its request under the same
idempotency key gets the first receipt back (the command is recorded), so a resent emit never
records two.

A `wait_event` wait (`run_wait.kind = 'event'`, its `topic` the event name, its `detail` the match
and the look-back) takes the first event, in emit order, whose data matches and that its run has not
taken before (`event_take`, one row per (event, run)); the match is data the worker computed (a map of
dotted data paths to values), compared here: no user code runs in the writer. Starting the
subscribers of an event (`on_event`) is the event keeper's work (store/commands/event_starts.py).
"""

from __future__ import annotations

import math
from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import Rejected
from piwf_actors.ids import new_id
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command, peer_provenance
from piwf_actors.store.commands.waits import WAIT_COLUMNS, settle, wait_row
from piwf_actors.workflows.events import check_event_name
from piwf_actors.workflows.limit_keys import key_text

#: An event's data is at most this many bytes of JSON: events are notifications (a large value goes
#: by reference, e.g. a content digest or a path), and the `event` row keeps it inline.
MAX_DATA_BYTES = 64 * 1024
#: A key is at most this many characters.
MAX_KEY_CHARS = 500
EVENT_COLUMNS = ("event_id", "seq", "name", "key", "data", "emitted_at")
_SELECT = f"SELECT {', '.join(EVENT_COLUMNS)} FROM event"


def event_value(row: tuple[Any, ...] | dict[str, Any]) -> dict[str, Any]:
    """An event as runs, filters and clients see it: {event_id, name, key, data, emitted_at}."""
    item = row if isinstance(row, dict) else dict(zip(EVENT_COLUMNS, row, strict=True))
    data = item["data"]
    return {"event_id": item["event_id"], "name": item["name"], "key": item["key"],
            "data": loads(data) if isinstance(data, str) else data, "emitted_at": item["emitted_at"]}


def matches(match: dict[str, Any] | None, data: Any) -> bool:
    """Whether each dotted path of `match` leads, in `data`, to a value equal to its own (as JSON)."""
    for path, expected in (match or {}).items():
        value = data
        for part in path.split("."):
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        if key_text(value) != key_text(expected):  # one JSON value's text: 7 and 7.0 are one number
            return False
    return True


def check_emit(name: Any, key: Any, data: Any) -> str:
    """The event's data as canonical JSON; Rejected (one line) for a bad name, key or data."""
    problem = check_event_name(name)
    if problem is not None:
        raise Rejected(problem)
    if key is not None and (not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS or "\0" in key):
        raise Rejected(f"an event key is a non-empty string of at most {MAX_KEY_CHARS} characters")
    try:
        text = canonical_json(data)
    except (TypeError, ValueError) as exc:
        raise Rejected(f"event data must be JSON: {exc}") from None
    if len(text.encode()) > MAX_DATA_BYTES:
        raise Rejected(f"event data is {len(text.encode())} bytes of JSON, more than {MAX_DATA_BYTES}: "
                       "send a reference to large content instead")
    return text


def emit(ctx: WriteContext, name: Any, key: Any, data: Any, sender: dict[str, Any]) -> dict[str, Any]:
    """Record the event (or find the one recorded under (name, key)) and settle the waits it matches."""
    text = check_emit(name, key, data)
    if key is not None:
        row = ctx.conn.execute(f"{_SELECT} WHERE name = ? AND key = ?", (name, key)).fetchone()
        if row is not None:
            seen = dict(zip(EVENT_COLUMNS, row, strict=True))
            return {"event_id": seen["event_id"], "name": name, "key": key, "seq": seen["seq"],
                    "emitted_at": seen["emitted_at"], "adopted_event": True, "woke": []}
    seq = int(ctx.conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM event").fetchone()[0])
    event_id = new_id("evt", ctx.now)
    ctx.conn.execute("INSERT INTO event (event_id, seq, name, key, data, sender, emitted_at) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?)", (event_id, seq, name, key, text, canonical_json(sender), ctx.now))
    ctx.changes.touch("event")
    event = {"event_id": event_id, "seq": seq, "name": name, "key": key, "data": loads(text), "emitted_at": ctx.now}
    woke = []
    for row in ctx.conn.execute(f"SELECT {', '.join(WAIT_COLUMNS)} FROM run_wait WHERE kind = 'event' "
                                "AND topic = ? AND status = 'pending' ORDER BY created_at", (name,)).fetchall():
        wait = dict(zip(WAIT_COLUMNS, row, strict=True))
        if _paused(ctx, wait["run_id"]):
            continue  # taken when the run is resumed (deliver_resumed)
        detail = loads(wait["detail"] or "{}")
        if event["emitted_at"] >= float(detail.get("since") or 0) and matches(detail.get("match"), event["data"]) \
                and take(ctx, wait, event):
            woke.append(wait["run_id"])
    return {"event_id": event_id, "name": name, "key": key, "seq": seq, "emitted_at": ctx.now, "woke": woke}


def _paused(ctx: WriteContext, run_id: str) -> bool:
    run = ctx.conn.execute("SELECT pause_requested, status, park_reason FROM run WHERE run_id = ?",
                           (run_id,)).fetchone()
    return run is None or bool(run[0]) or (run[1] == "parked" and run[2] == "paused")


def take(ctx: WriteContext, wait: dict[str, Any], event: dict[str, Any]) -> bool:
    """The wait takes the event: once per (event, run), in the transaction that settles the wait."""
    taken = ctx.conn.execute(
        "INSERT INTO event_take (event_id, run_id, wait_id, node_id, created_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING", (event["event_id"], wait["run_id"], wait["wait_id"], wait["node_id"], ctx.now))
    if taken.rowcount != 1:
        return False
    ctx.changes.touch("event")
    return settle(ctx, wait, {"outcome": "ok", "output": event_value(event), "event_id": event["event_id"]},
                  reason="event")


def deliver_waiting(ctx: WriteContext, wait: dict[str, Any]) -> bool:
    """Give the pending event wait `wait` the first event already recorded that it matches (within its
    look-back, not taken by its run before), if any."""
    detail = loads(wait["detail"] or "{}")
    cursor = ctx.conn.execute(
        f"{_SELECT} WHERE name = ? AND emitted_at >= ? AND NOT EXISTS (SELECT 1 FROM event_take t "
        "WHERE t.event_id = event.event_id AND t.run_id = ?) ORDER BY seq",
        (wait["topic"], float(detail.get("since") or 0), wait["run_id"]))
    for row in cursor.fetchall():
        event = dict(zip(EVENT_COLUMNS, row, strict=True))
        event["data"] = loads(event["data"])
        if matches(detail.get("match"), event["data"]):
            return take(ctx, wait, event)
    return False


def deliver_resumed(ctx: WriteContext, run_id: str) -> None:
    """The run was resumed: its event waits take what came while it was paused."""
    for (wait_id,) in ctx.conn.execute("SELECT wait_id FROM run_wait WHERE run_id = ? AND kind = 'event' "
                                       "AND status = 'pending'", (run_id,)).fetchall():
        wait = wait_row(ctx, "wait_id = ?", (wait_id,))
        if wait is not None:
            deliver_waiting(ctx, wait)


def wait_detail(ctx: WriteContext, run: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    """The `detail` of a new event wait: its match, the earliest emit time it takes (`since`: the
    look-back before now; when none is given, the run's creation or, for a run an event started, that
    event's emit time if earlier: a payment emitted right after its order, before the keeper started
    the order's run, still counts) and what its timeout does."""
    lookback = payload.get("lookback_s")
    if lookback is None:
        started_by = ctx.conn.execute("SELECT min(e.emitted_at) FROM event_delivery d JOIN event e ON "
                                      "e.event_id = d.event_id WHERE d.run_id = ?", (run["run_id"],)).fetchone()
        since = min(float(run["created_at"]), float(started_by[0]) if started_by and started_by[0] else math.inf)
    else:
        since = ctx.now - float(lookback)
    match = payload.get("match") or {}
    if not isinstance(match, dict):
        raise Rejected("an event wait's match is a map of data paths to values")
    return {"match": match, "since": since, "timeout_s": payload.get("timeout_s"),
            "has_default": "on_timeout" in payload, "on_timeout": payload.get("on_timeout")}


# --- the client's command ----------------------------------------------------------------------


@command("event.emit")
def event_emit(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Record event `name` with `data` (and `key`), recorded under the client's idempotency key; the
    receipt names the event, its `seq`, and the runs whose wait it settled (`woke`)."""

    def apply() -> dict[str, Any]:
        sender: dict[str, Any] = {"kind": "client", "client_id": args.get("client_id")}
        sender.update(peer_provenance(args.get("peer")))
        return emit(ctx, args.get("name"), args.get("key"), args.get("data"), sender)

    return recorded(ctx, args, apply)


def prune_events(ctx: WriteContext, before: float) -> int:
    """Delete events emitted before `before` with what they started or woke (the runs stay: they are
    pruned by their own rule), but for events in a batch not yet started and the newest event (its
    `seq` is what the next event's follows, and subscriptions' cursors stand on it). Returns how many."""
    doomed = ("emitted_at < ? AND seq < (SELECT max(seq) FROM event) AND NOT EXISTS (SELECT 1 FROM event_delivery d "
              "JOIN event_batch b ON b.batch_id = d.batch_id WHERE d.event_id = event.event_id AND b.status = 'open')")
    for table in ("event_delivery", "event_take"):
        ctx.conn.execute(f"DELETE FROM {table} WHERE event_id IN (SELECT event_id FROM event WHERE {doomed})",
                         (before,))
    count = ctx.conn.execute(f"DELETE FROM event WHERE {doomed}", (before,)).rowcount
    ctx.conn.execute("DELETE FROM event_batch WHERE status = 'started' AND started_at < ?", (before,))
    if count:
        ctx.changes.touch("event")
    return int(count)
