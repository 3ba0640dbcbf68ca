"""Reads of the event tables: what the event keeper starts runs from, and what `event.list` /
`event.get` (`piwf event list|show`) show: each event with what it started or woke."""

from __future__ import annotations

import json
from typing import Any

from piwf_actors.store.reader import StoreReader

_EVENT = ("event_id", "seq", "name", "key", "data", "emitted_at")


def _event(row: tuple[Any, ...]) -> dict[str, Any]:
    item = dict(zip(_EVENT, row, strict=True))
    item["data"] = json.loads(item["data"])
    return item


def subscription_cursors(reader: StoreReader) -> dict[str, dict[str, Any]]:
    """Every recorded subscription by name: {event_name, cursor_seq}."""
    return {name: {"event_name": event_name, "cursor_seq": int(cursor)} for name, event_name, cursor in
            reader.all("SELECT name, event_name, cursor_seq FROM event_subscription")}


def subscriptions(reader: StoreReader) -> list[dict[str, Any]]:
    """Every recorded subscription: {name, event_name, cursor_seq, summary} (where the workflow comes from,
    its filter and batch options), by name."""
    return [{"name": name, "event_name": event_name, "cursor_seq": int(cursor),
             "summary": json.loads(summary) if summary else {}}
            for name, event_name, cursor, summary in reader.all(
                "SELECT name, event_name, cursor_seq, summary FROM event_subscription ORDER BY name")]


def events_after(reader: StoreReader, name: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
    """Events `name` after `after_seq`, in emit order (at most `limit`)."""
    return [_event(row) for row in reader.all(
        f"SELECT {', '.join(_EVENT)} FROM event WHERE seq > ? AND name = ? ORDER BY seq LIMIT ?",
        (after_seq, name, limit))]


def newest_seq(reader: StoreReader) -> int:
    row = reader.one("SELECT coalesce(max(seq), 0) FROM event")
    return int(row[0]) if row else 0


def due_batches(reader: StoreReader, now: float) -> set[str]:
    """The subscriptions that have an open batch whose wait is over."""
    return {row[0] for row in reader.all("SELECT DISTINCT subscription FROM event_batch WHERE status = 'open' "
                                         "AND due_at <= ?", (now,))}


def list_events(reader: StoreReader, name: str | None = None, limit: int = 50,
                before_seq: int | None = None) -> list[dict[str, Any]]:
    """The newest events (of `name`), newest first, each with how many runs it started and woke."""
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    if name is not None:
        where.append("name = ?")
        params.append(name)
    if before_seq is not None:
        where.append("seq < ?")
        params.append(before_seq)
    items = []
    for row in reader.all(f"SELECT {', '.join(_EVENT)} FROM event WHERE {' AND '.join(where)} "
                          "ORDER BY seq DESC LIMIT ?", (*params, limit)):
        item = _event(row)
        counts = reader.one("SELECT (SELECT count(*) FROM event_delivery WHERE event_id = ? AND outcome IN "
                            "('started', 'batched')), (SELECT count(*) FROM event_take WHERE event_id = ?)",
                            (item["event_id"], item["event_id"]))
        item["started"], item["woke"] = (int(counts[0]), int(counts[1])) if counts else (0, 0)
        items.append(item)
    return items


def get_event(reader: StoreReader, event_id: str) -> dict[str, Any] | None:
    """One event with its deliveries (each subscriber: outcome, run, batch, error) and the waits it settled."""
    row = reader.one(f"SELECT {', '.join(_EVENT)} FROM event WHERE event_id = ?", (event_id,))
    if row is None:
        return None
    item = _event(row)
    item["deliveries"] = [
        {"subscription": sub, "outcome": outcome, "run_id": run_id or batch_run, "batch_id": batch_id, "error": error}
        for sub, outcome, run_id, batch_id, error, batch_run in reader.all(
            "SELECT d.subscription, d.outcome, d.run_id, d.batch_id, d.error, b.run_id FROM event_delivery d "
            "LEFT JOIN event_batch b ON b.batch_id = d.batch_id WHERE d.event_id = ? ORDER BY d.subscription",
            (event_id,))]
    item["woke"] = [{"run_id": run_id, "node_id": node_id, "wait_id": wait_id, "at": at} for run_id, node_id, wait_id, at
                    in reader.all("SELECT run_id, node_id, wait_id, created_at FROM event_take WHERE event_id = ? "
                                  "ORDER BY created_at", (event_id,))]
    return item
