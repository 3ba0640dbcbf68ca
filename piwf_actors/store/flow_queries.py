"""Reads of waits, mailboxes, children and limits: what `run.get` shows of them, and `run.list --parent`.

- `waits`: the run's open waits (a sleep with its wake-up time, a message wait with its topic and
  timeout clock, a children wait with how many are still open);
- `mailbox`: pending messages per topic;
- `children`: counts per status and the first `CHILDREN_SHOWN` children in index order;
- `queue_reason`: why a queued run does not start (a full concurrency key or fan-out, a paused
  parent), read with the check the claim makes (store/slots.py).
"""

from __future__ import annotations

import time
from typing import Any

from piwf_actors.store.debounces import debounce_reason
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.run_parts import ALL_PARTS, RunParts
from piwf_actors.store.slots import SLOT_COLUMNS, blocked_by

#: Children `run.get` lists by name (the counts cover all of them).
CHILDREN_SHOWN = 100
CHILD_COLUMNS = ("run_id", "workflow", "status", "parent_node_id", "child_index", "copied_from", "created_at",
                 "finished_at", "error_code")


def flow_view(reader: StoreReader, run: dict[str, Any], now: float | None = None,
              parts: RunParts = ALL_PARTS) -> dict[str, Any]:
    """The keys `run.get` adds for `run` (a full row of `run`), read in the caller's snapshot; the waits'
    `remaining_s` count to `now` (timer time, piwf_actors/clock.py; default: the system clock). `parts`:
    which of the run's waits, mailbox and children have rows, read in the same snapshot (run_parts.py)."""
    run_id = run["run_id"]
    view: dict[str, Any] = {
        "priority": run["priority"], "parent_node_id": run["parent_node_id"], "child_index": run["child_index"],
        "copied_from": run["copied_from"], "concurrency_key": run["concurrency_key"],
        "queue_reason": queue_reason(reader, run, now), "waits": _waits(reader, run_id, now) if parts.waits else [],
        "mailbox": {topic: int(n) for topic, n in reader.all(
            "SELECT topic, count(*) FROM run_message WHERE run_id = ? AND status = 'pending' GROUP BY topic "
            "ORDER BY topic", (run_id,))} if parts.mailbox else {},
    }
    counts = {status: int(n) for status, n in reader.all(
        "SELECT status, count(*) FROM run WHERE parent_run_id = ? AND parent_node_id IS NOT NULL GROUP BY status",
        (run_id,))} if parts.children else {}
    if counts:
        view["children"] = {"total": sum(counts.values()), "by_status": counts,
                            "runs": children(reader, run_id, CHILDREN_SHOWN)}
    return view


def queue_reason(reader: StoreReader, run: dict[str, Any], now: float | None = None) -> str | None:
    if run["status"] != "queued":
        return None
    now = time.time() if now is None else now
    debounced = debounce_reason(reader.conn, run, now)
    if debounced is not None:
        return debounced
    block = blocked_by(reader.conn, {key: run[key] for key in SLOT_COLUMNS}, now)
    return None if block is None else block.reason


def children(reader: StoreReader, run_id: str, limit: int) -> list[dict[str, Any]]:
    """The child runs of `run_id` (not its restarts), by node and index."""
    return [dict(zip(CHILD_COLUMNS, row, strict=True)) for row in reader.all(
        f"""SELECT {', '.join(CHILD_COLUMNS)} FROM run WHERE parent_run_id = ? AND parent_node_id IS NOT NULL
            ORDER BY created_at, child_index LIMIT ?""", (run_id, limit))]


def _waits(reader: StoreReader, run_id: str, now: float | None = None) -> list[dict[str, Any]]:
    now = time.time() if now is None else now
    out = []
    for wait_id, node_id, kind, wake_at, paused_left, topic, total, open_ in reader.all(
            """SELECT wait_id, node_id, kind, wake_at, paused_remaining_s, topic, children_total, children_open
               FROM run_wait WHERE run_id = ? AND status = 'pending' ORDER BY created_at""", (run_id,)):
        wait: dict[str, Any] = {"wait_id": wait_id, "node_id": node_id, "kind": kind}
        if kind == "sleep":
            wait.update(wake_at=wake_at, remaining_s=None if wake_at is None else max(0.0, wake_at - now))
        elif kind in ("message", "event"):  # an event wait's topic is its event name
            clock = "paused" if paused_left is not None else "none" if wake_at is None else "running"
            wait.update(topic=topic, deadline_at=wake_at, clock=clock,
                        remaining_s=paused_left if paused_left is not None
                        else None if wake_at is None else max(0.0, wake_at - now))
        else:
            wait.update(children_total=int(total), children_open=int(open_))
        out.append(wait)
    return out
