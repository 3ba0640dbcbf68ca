"""Timers of held runs: a rate limit's next allowed start, a debounce's quiet window (schema v20).

Runs held by a rate limit or a debounce hold nothing but rows, like sleepers: one `flow_timer` row per
what holds them (`run.held_by`) says when to let them go, and `waits.wake` — sent by the housekeeper
for the nearest wake-up of a wait or a timer, and at a host's start for those that passed while no
host ran — lets go the runs of every timer that has passed (`wake_flow_timers`), in the transaction
that the time made true. Nothing polls: a held key costs one row and one index entry.

- Rate (`rate_key:<key>`): the claim that holds a key's fresh runs sets the timer to the time its
  next start is allowed (`arm_rate_timer`). At that time as many held runs as the window then has
  room for go back to the queue, in priority and queue order; the claim counts their starts. If some
  stay held, the timer moves to the time the next start would be allowed if those just let go start
  now — never earlier than a real token, and corrected by the claim that holds them again if they
  start later (then the timer is read from the recorded starts).
- Debounce (`debounce:<key>`): `run.start` of a debounced workflow (`debounce_start`) makes the run
  held, or joins the one held for its key: the joined run takes the new input (or appends it), and
  the timer moves to `seconds` after this start, never past `max_wait_s` after the first. At that
  time the run goes to the queue and the timer row goes: the next start makes a new run.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store import rates
from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import QUEUE_FRESH, QUEUE_HELD, bump_revision, wake_waiting
from piwf_actors.store.slots import Block, waiting_fresh
from piwf_actors.store.values import get_value, put_value

#: Timers one `waits.wake` lets go at most (the housekeeper sends another for the rest).
TIMER_BATCH = 200


def arm_rate_timer(ctx: WriteContext, block: Block, maximum: int, per_s: float) -> None:
    """Wake the runs `block` (a rate limit's, with its `wake_at`) just held when their next start is allowed."""
    assert block.wake_at is not None
    arm_timer(ctx, f"rate_key:{block.key}", "rate", rates.limiter_name(block.key), block.wake_at, maximum, per_s)


def arm_timer(ctx: WriteContext, held_by: str, kind: str, name: str, wake_at: float, maximum: int,
              per_s: float) -> None:
    """Set (or move) the rate timer of the runs `held_by` holds."""
    ctx.conn.execute(
        """INSERT INTO flow_timer (held_by, kind, name, wake_at, rate_max, rate_per_s) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (held_by) DO UPDATE SET wake_at = excluded.wake_at, rate_max = excluded.rate_max,
               rate_per_s = excluded.rate_per_s""",
        (held_by, kind, name, wake_at, int(maximum), float(per_s)))
    ctx.changes.touch("flow_timer")


def wake_flow_timers(ctx: WriteContext) -> dict[str, Any]:
    """Let go the runs of every timer that has passed (timer time); returns {held_by: runs let go}."""
    now = ctx.timer_now
    woken: dict[str, int] = {}
    rows = ctx.conn.execute(
        "SELECT held_by, kind, run_id, rate_max, rate_per_s FROM flow_timer WHERE wake_at IS NOT NULL "
        "AND wake_at <= ? ORDER BY wake_at LIMIT ?", (now, TIMER_BATCH)).fetchall()
    for held_by, kind, run_id, maximum, per_s in rows:
        if kind == "debounce":
            woken[held_by] = _fire_debounce(ctx, held_by, run_id)
        else:
            woken[held_by] = _let_go_rate(ctx, held_by, kind, int(maximum), float(per_s), now)
    if woken:
        ctx.changes.touch("run")
        ctx.changes.touch("flow_timer")
    return {"timers": woken, "more": len(rows) == TIMER_BATCH}


#: The runs a rate timer holds: fresh runs held back from the claim, or runs parked before a node.
_HELD = {"rate": f"status = 'queued' AND queue_class = {QUEUE_HELD}", "rate_node": "status = 'parked' AND park_reason = 'waiting'"}


def _let_go_rate(ctx: WriteContext, held_by: str, kind: str, maximum: int, per_s: float, now: float) -> int:
    rate_key = held_by.split(":", 1)[1]
    held = _HELD[kind]
    used, _next = rates.window(ctx.conn, rate_key, maximum, per_s, now)
    free = maximum - used - (waiting_fresh(ctx.conn, "rate_key", rate_key) if kind == "rate" else 0)
    released = 0
    if free > 0:
        chosen = [row[0] for row in ctx.conn.execute(
            f"SELECT run_id FROM run WHERE held_by = ? AND {held} ORDER BY priority DESC, queued_at LIMIT ?",
            (held_by, free))]
        for run_id in chosen:
            if kind == "rate":
                ctx.conn.execute(f"UPDATE run SET queue_class = {QUEUE_FRESH}, held_by = NULL WHERE run_id = ?",
                                 (run_id,))
            else:  # back to the queue (or cancelled, or parked paused) as any woken wait
                ctx.conn.execute("UPDATE run SET held_by = NULL WHERE run_id = ?", (run_id,))
                wake_waiting(ctx, run_id, "rate")
        released = len(chosen)
    remaining = ctx.conn.execute(f"SELECT 1 FROM run WHERE held_by = ? AND {held} LIMIT 1", (held_by,)).fetchone()
    if remaining is None:
        ctx.conn.execute("DELETE FROM flow_timer WHERE held_by = ?", (held_by,))
        return released
    # As if those let go started now: the earliest the next start can be allowed.
    _used, next_at = rates.window(ctx.conn, rate_key, maximum, per_s, now, starting_now=released)
    if next_at is None or next_at <= now:
        next_at = now + per_s  # waiting fresh runs fill the window: the claim that holds them sets it sooner
    ctx.conn.execute("UPDATE flow_timer SET wake_at = ? WHERE held_by = ?", (next_at, held_by))
    return released


# --- debounce ------------------------------------------------------------------------------------


def _fire_debounce(ctx: WriteContext, held_by: str, run_id: str | None) -> int:
    ctx.conn.execute("DELETE FROM flow_timer WHERE held_by = ?", (held_by,))
    if run_id is None:
        return 0
    released = ctx.conn.execute(
        f"UPDATE run SET queue_class = {QUEUE_FRESH}, held_by = NULL, queued_at = ? WHERE run_id = ? AND held_by = ? "
        f"AND status = 'queued' AND queue_class = {QUEUE_HELD}", (ctx.now, run_id, held_by)).rowcount
    if released:
        append_event(ctx.conn, run_id, "run_debounce_fired", ctx.now, payload={"key": held_by[len("debounce:"):]})
    return released


def debounce_start(ctx: WriteContext, spec: dict[str, Any],
                   insert: Any) -> dict[str, Any]:
    """`run.start` of a debounced workflow (`spec.debounce`: key, seconds, max_wait_s, inputs): join the
    run held for the key, or make it (`insert(spec, queue_class=…)`, store/commands/runs.py insert_run).
    The receipt of a start that joined names the run (`run_id`, `joined: true`)."""
    bounce = spec["debounce"]
    held_by = f"debounce:{bounce['key']}"
    now = ctx.timer_now
    row = ctx.conn.execute("SELECT run_id, first_at, joined FROM flow_timer WHERE held_by = ?", (held_by,)).fetchone()
    wake = now + float(bounce["seconds"])
    if row is not None:
        run_id, first_at, joined = row
        if bounce.get("max_wait_s") is not None:
            wake = min(wake, float(first_at) + float(bounce["max_wait_s"]))
        current = ctx.conn.execute("SELECT input_json, input_sha256 FROM run WHERE run_id = ? AND held_by = ?",
                                   (run_id, held_by)).fetchone()
        if current is not None:
            value = spec.get("input")
            if bounce.get("inputs") == "all":
                value = [*_stored_input(ctx, current), value]
            input_json, input_sha = put_value(ctx.conn, value, ctx.now)
            ctx.conn.execute("UPDATE run SET input_json = ?, input_sha256 = ? WHERE run_id = ?",
                             (input_json, input_sha, run_id))
            ctx.conn.execute("UPDATE flow_timer SET wake_at = ?, joined = joined + 1 WHERE held_by = ?",
                             (wake, held_by))
            append_event(ctx.conn, run_id, "run_debounced", ctx.now,
                         payload={"key": bounce["key"], "starts": int(joined) + 1, "wake_at": wake})
            revision = bump_revision(ctx, run_id)
            ctx.changes.touch("flow_timer")
            ctx.changes.touch("run", run_id)
            return {"run_id": run_id, "status": "queued", "revision": revision, "joined": True,
                    "debounce_starts": int(joined) + 1}
        ctx.conn.execute("DELETE FROM flow_timer WHERE held_by = ?", (held_by,))  # its run went (cancelled)
        wake = now + float(bounce["seconds"])
    first = {**spec, "held_by": held_by}
    if bounce.get("inputs") == "all":
        first["input"] = [spec.get("input")]
    receipt = insert(first, queue_class=QUEUE_HELD)
    ctx.conn.execute("INSERT INTO flow_timer (held_by, kind, name, wake_at, run_id, first_at, joined) "
                     "VALUES (?, 'debounce', ?, ?, ?, ?, 1)", (held_by, spec["workflow"], wake, receipt["run_id"], now))
    ctx.changes.touch("flow_timer")
    return {**receipt, "joined": False, "debounce_starts": 1}


def _stored_input(ctx: WriteContext, current: tuple[Any, Any]) -> list[Any]:
    value = get_value(ctx.conn, current[0], current[1])
    return value if isinstance(value, list) else [value]
