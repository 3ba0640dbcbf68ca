"""What events start: the event keeper's commands (actors/event_keeper.py).

- `event.subscriptions` records the `on_event` workflows the keeper found. A subscription seen for
  the first time (or whose event name changed) starts at the newest event then: it is not backfilled.
- `event.deliver` applies one subscription's decisions for the events after its cursor, and moves the
  cursor past them, in one transaction: each event gets one `event_delivery` row (started, batched,
  filtered, failed). A started run's id derives from (event, workflow), so a keeper that decides
  again after a crash, or an emit resent, never starts a second run; the cursor fence (`from_seq` must
  be the stored cursor) makes a late or repeated command change nothing.
- A batched event joins its key's open batch (one is opened when there is none); the batch that
  reaches `max_items` starts its run in the same transaction, with its events as input. The keeper
  sends `event.batches_due` for batches whose `max_wait_s` passed. Every batched event is in exactly
  one batch (its delivery row names it) and every batch starts one run (status `open` → `started`).

The keeper builds each run's spec (workflow resolved, snapshot) on its user-code thread; a batch's
spec is a template whose input the writer fills with the batch's events (workflows/events.py
`batch_input`).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import Rejected
from piwf_actors.ids import derived_id
from piwf_actors.store.commands.events import EVENT_COLUMNS, event_value
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.commands.runs import insert_run
from piwf_actors.workflows.events import batch_input


def event_run_id(event_id: str, subscription: str, emitted_at: float) -> str:
    """The run an event starts for a subscriber: the same (event, workflow) always names the same run."""
    return derived_id("run", canonical_json(["event", event_id, subscription]), emitted_at)


def batch_run_id(batch_id: str, opened_at: float) -> str:
    return derived_id("run", canonical_json(["batch", batch_id]), opened_at)


@command("event.subscriptions")
def sync_subscriptions(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Record each subscription ({name, event_name, summary}); returns their cursors by name."""
    newest = int(ctx.conn.execute("SELECT coalesce(max(seq), 0) FROM event").fetchone()[0])
    cursors = {}
    for item in args.get("subscriptions") or []:
        name, event_name = str(item["name"]), str(item["event_name"])
        row = ctx.conn.execute("SELECT event_name, cursor_seq FROM event_subscription WHERE name = ?",
                               (name,)).fetchone()
        summary = canonical_json(item.get("summary") or {})
        if row is None:
            ctx.conn.execute("INSERT INTO event_subscription (name, event_name, cursor_seq, summary, created_at, "
                             "updated_at) VALUES (?, ?, ?, ?, ?, ?)", (name, event_name, newest, summary, ctx.now,
                                                                     ctx.now))
            cursors[name] = newest
        elif row[0] != event_name:
            ctx.conn.execute("UPDATE event_subscription SET event_name = ?, cursor_seq = ?, summary = ?, "
                             "updated_at = ? WHERE name = ?", (event_name, newest, summary, ctx.now, name))
            cursors[name] = newest
        else:
            ctx.conn.execute("UPDATE event_subscription SET summary = ?, updated_at = ? WHERE name = ?",
                             (summary, ctx.now, name))
            cursors[name] = int(row[1])
    ctx.changes.touch("event_subscription")
    return {"cursors": cursors}


def _start(ctx: WriteContext, spec: dict[str, Any], run_id: str) -> bool:
    """Insert the run unless it exists (a decision made again after a crash); True if inserted."""
    if ctx.conn.execute("SELECT 1 FROM run WHERE run_id = ?", (run_id,)).fetchone():
        return False
    insert_run(ctx, {**spec, "run_id": run_id}, check_id=False)
    return True


@command("event.deliver")
def deliver(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Apply a subscription's decisions for events (from_seq, to_seq] and move its cursor to to_seq.

    `deliveries`: [{event_id, outcome: started|filtered|failed|batched, spec? (started), key? (batched),
    error? (failed)}]; `batch`: {max_items, max_wait_s, template} of a batching subscription. Returns
    {stale} when the cursor is not `from_seq` any more (nothing is applied), else the runs started."""
    name = str(args["subscription"])
    row = ctx.conn.execute("SELECT cursor_seq FROM event_subscription WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise Rejected(f"event subscription {name} is not recorded")
    if int(row[0]) != int(args["from_seq"]):
        return {"stale": True, "cursor": int(row[0])}
    started: list[str] = []
    batching = args.get("batch")
    for item in args.get("deliveries") or []:
        event_id, outcome = str(item["event_id"]), str(item["outcome"])
        event = ctx.conn.execute("SELECT emitted_at FROM event WHERE event_id = ?", (event_id,)).fetchone()
        if event is None:
            continue  # pruned meanwhile
        run_id = batch_id = None
        if outcome == "started":
            run_id = event_run_id(event_id, name, float(event[0]))
            if _start(ctx, item["spec"], run_id):
                started.append(run_id)
        elif outcome == "batched":
            if not batching:
                raise Rejected(f"event subscription {name}: a batched event without batch options")
            batch_id, run_id = _add_to_batch(ctx, name, str(item.get("key") or ""), event_id, batching)
            if run_id is not None:
                started.append(run_id)
        inserted = ctx.conn.execute(
            "INSERT INTO event_delivery (event_id, subscription, outcome, run_id, batch_id, error, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (event_id, name, outcome, None if outcome == "batched" else run_id, batch_id,
             item.get("error"), ctx.now)).rowcount
        if not inserted:
            raise Rejected(f"event {event_id} was delivered to {name} already")  # the cursor fence prevents it
    ctx.conn.execute("UPDATE event_subscription SET cursor_seq = ?, updated_at = ? WHERE name = ?",
                     (int(args["to_seq"]), ctx.now, name))
    ctx.changes.touch("event")
    return {"stale": False, "started": started, "cursor": int(args["to_seq"])}


def _add_to_batch(ctx: WriteContext, name: str, key: str, event_id: str,
                  batching: dict[str, Any]) -> tuple[str, str | None]:
    """Put the event into its key's open batch (opening one); start the batch when it is full.
    Returns (batch id, the run started or None)."""
    row = ctx.conn.execute("SELECT batch_id, item_count, max_items FROM event_batch WHERE subscription = ? "
                           "AND batch_key = ? AND status = 'open'", (name, key)).fetchone()
    if row is None:
        batch_id = derived_id("bat", canonical_json([name, key, event_id]), ctx.now)
        max_items = int(batching["max_items"])
        ctx.conn.execute("INSERT INTO event_batch (batch_id, subscription, batch_key, status, item_count, max_items, "
                         "opened_at, due_at) VALUES (?, ?, ?, 'open', 1, ?, ?, ?)",
                         # due on timer time, as a sleep is (piwf_actors/clock.py: a test's clock skips it)
                         (batch_id, name, key, max_items, ctx.now, ctx.timer_now + float(batching["max_wait_s"])))
        count = 1
    else:
        batch_id, count, max_items = row[0], int(row[1]) + 1, int(row[2])
        ctx.conn.execute("UPDATE event_batch SET item_count = ? WHERE batch_id = ?", (count, batch_id))
    if count < max_items:
        return batch_id, None
    # The delivery row of this event is written after this call: the batch's events are its earlier
    # items plus this one.
    return batch_id, _start_batch(ctx, batch_id, batching["template"], extra_event=event_id)


def _start_batch(ctx: WriteContext, batch_id: str, template: dict[str, Any], extra_event: str | None = None) -> str:
    row = ctx.conn.execute("SELECT batch_key, opened_at FROM event_batch WHERE batch_id = ? AND status = 'open'",
                           (batch_id,)).fetchone()
    if row is None:
        raise Rejected(f"batch {batch_id} is not open")
    events = [event_value(item) for item in ctx.conn.execute(
        f"SELECT {', '.join('e.' + column for column in EVENT_COLUMNS)} FROM event e WHERE e.event_id IN "
        "(SELECT event_id FROM event_delivery WHERE batch_id = ?) OR e.event_id = ? ORDER BY e.seq",
        (batch_id, extra_event)).fetchall()]
    run_id = batch_run_id(batch_id, float(row[1]))
    _start(ctx, {**template, "input": batch_input(events, row[0])}, run_id)
    ctx.conn.execute("UPDATE event_batch SET status = 'started', run_id = ?, started_at = ?, item_count = ? "
                     "WHERE batch_id = ?", (run_id, ctx.now, len(events), batch_id))
    return run_id


@command("event.batches_due")
def batches_due(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Start every open batch of `subscription` whose `max_wait_s` has passed (`template`: the run spec)."""
    started = []
    for (batch_id,) in ctx.conn.execute("SELECT batch_id FROM event_batch WHERE subscription = ? AND "
                                        "status = 'open' AND due_at <= ? ORDER BY due_at",
                                        (str(args["subscription"]), ctx.timer_now)).fetchall():
        started.append(_start_batch(ctx, batch_id, args["template"]))
    if started:
        ctx.changes.touch("event")
    return {"started": started}


