"""Schedule commands: what the schedule keeper and clients write about schedules.

A fire is recorded in `schedule_fire` under its key — `at:<fire time>` for
the clock's fires, `manual:…` for `schedule.trigger` — in the same
transaction as the run it starts, whose id derives from (schedule, key).
The insert is `ON CONFLICT DO NOTHING`: a key already there was fired
before, so a fire happens at most once, however often the keeper (or a
restarted host) asks. The clock's fires must also be at or after the
schedule's cursor (`schedule.next_fire_at`), which only moves forward, so a
fire already passed over is never started late.

Portable SQL only (the store also runs on PostgreSQL): `?` placeholders,
`INSERT … ON CONFLICT … DO NOTHING`, no rowid.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import NotFound, Rejected
from piwf_actors.store.commands.idempotency import Adopted, Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.commands.runs import insert_run

_CLOCK_KINDS = ("scheduled", "catch_up")


def _row(ctx: WriteContext, name: str) -> tuple[int, float | None] | None:
    """(paused, next_fire_at) of schedule `name`, or None."""
    return ctx.conn.execute("SELECT paused, next_fire_at FROM schedule WHERE name = ?", (name,)).fetchone()


@command("schedule.sync")
def sync_schedules(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Record the definitions the keeper loaded: args.schedules = [{name, digest, timing_key, summary,
    cursor}], `cursor` being the first fire time after now under that timing.

    A new schedule starts at `cursor` (nothing before its definition was seen fires). A known one keeps
    its cursor and pause flag, unless its timing changed (the old cursor belongs to another series of
    fire times) or it has none (just resumed): then it takes `cursor`.
    """
    changed = 0
    for item in args["schedules"]:
        name, timing_key, cursor = item["name"], item["timing_key"], item.get("cursor")
        summary = canonical_json(item.get("summary") or {})
        known = ctx.conn.execute("SELECT timing_key, next_fire_at FROM schedule WHERE name = ?", (name,)).fetchone()
        if known is None:
            ctx.conn.execute(
                """INSERT INTO schedule (name, definition_digest, timing_key, summary, paused, next_fire_at,
                       fire_count, skipped_count, created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, 0, 0, ?, ?)""",
                (name, item["digest"], timing_key, summary, cursor, ctx.now, ctx.now))
        else:
            fresh = known[0] != timing_key or known[1] is None
            ctx.conn.execute(
                """UPDATE schedule SET definition_digest = ?, timing_key = ?, summary = ?, next_fire_at = ?,
                       updated_at = ? WHERE name = ?""",
                (item["digest"], timing_key, summary, cursor if fresh else known[1], ctx.now, name))
        changed += 1
    if changed:
        ctx.changes.touch("schedule")
    return {"synced": changed}


def _record_fire(ctx: WriteContext, name: str, fire: dict[str, Any], run_id: str) -> bool:
    """Insert the fire and, when it has a run spec, its run; False if this fire key was used before."""
    fresh = ctx.conn.execute(
        """INSERT INTO schedule_fire (schedule, fire_key, fire_time, kind, run_id, error, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (schedule, fire_key) DO NOTHING""",
        (name, fire["fire_key"], fire["fire_time"], fire["kind"], run_id if fire.get("spec") else None,
         fire.get("error"), ctx.now)).rowcount
    if not fresh:
        return False
    ctx.changes.touch("schedule_fire")
    spec = fire.get("spec")
    if spec is not None and not ctx.conn.execute("SELECT 1 FROM run WHERE run_id = ?", (run_id,)).fetchone():
        insert_run(ctx, {**spec, "run_id": run_id})
    return True


@command("schedule.fire")
def fire_schedule(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """Start the clock's fires of one schedule and move its cursor.

    args: name; fires = [{fire_key, fire_time, kind (scheduled | catch_up), run_id, spec | error}]
    (spec: the run.start spec; error: why no run could be built); cursor, the next fire time after
    them; skipped, how many missed fires the catch-up policy dropped. A paused schedule fires
    nothing; a fire before the stored cursor or with a used key is left out (it was handled).
    """
    name = args["name"]
    row = _row(ctx, name)
    if row is None:
        raise NotFound("schedule", name)
    paused, stored_cursor = row
    if paused:
        return {"name": name, "paused": True, "fired": [], "skipped": 0}
    fired: list[dict[str, Any]] = []
    last_error: str | None = None
    for fire in args["fires"]:
        if fire["kind"] not in _CLOCK_KINDS:
            raise Rejected(f"schedule.fire: kind {fire['kind']!r} is not a clock fire")
        if stored_cursor is not None and fire["fire_time"] < stored_cursor:
            continue
        if _record_fire(ctx, name, fire, fire["run_id"]):
            fired.append({"fire_time": fire["fire_time"], "kind": fire["kind"],
                          "run_id": fire["run_id"] if fire.get("spec") else None, "error": fire.get("error")})
            last_error = fire.get("error")
    cursor = args.get("cursor")
    if cursor is None or (stored_cursor is not None and cursor < stored_cursor):
        cursor = stored_cursor  # the cursor only moves forward
    skipped = int(args.get("skipped") or 0)
    last_fire = max((item["fire_time"] for item in fired), default=None)
    ctx.conn.execute(
        """UPDATE schedule SET next_fire_at = ?, fire_count = fire_count + ?, skipped_count = skipped_count + ?,
               updated_at = ? WHERE name = ?""", (cursor, len(fired), skipped, ctx.now, name))
    if last_fire is not None:
        ctx.conn.execute("UPDATE schedule SET last_fire_at = ?, last_error = ? WHERE name = ? AND "
                         "(last_fire_at IS NULL OR last_fire_at < ?)", (last_fire, last_error, name, last_fire))
    ctx.changes.touch("schedule")
    return {"name": name, "paused": False, "fired": fired, "skipped": skipped}


@command("schedule.trigger")
def trigger_schedule(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """A manual fire now (paused or not), recorded under the client's idempotency key.

    args: name, fire = {fire_key (`manual:<client>:<key>`), fire_time, kind: manual, run_id, spec}. The run's id
    derives from the fire key, so the same trigger request never starts two runs, under any key.
    """

    def apply() -> dict[str, Any] | Adopted:
        name, fire = args["name"], args["fire"]
        if _row(ctx, name) is None:
            raise NotFound("schedule", name)
        if fire.get("kind") != "manual" or not fire.get("spec"):
            raise Rejected("schedule.trigger needs a manual fire with a run spec")
        receipt = {"name": name, "run_id": fire["run_id"], "fire_time": fire["fire_time"], "status": "queued",
                   "revision": 1}
        if not _record_fire(ctx, name, fire, fire["run_id"]):
            # The recorded fire's run: its id has the time of that fire, not of this replay.
            earlier = ctx.conn.execute("SELECT fire_time, run_id FROM schedule_fire WHERE schedule = ? AND "
                                       "fire_key = ?", (name, fire["fire_key"])).fetchone()
            return Adopted({**receipt, "fire_time": earlier[0], "run_id": earlier[1] or fire["run_id"]})
        ctx.conn.execute("UPDATE schedule SET fire_count = fire_count + 1, updated_at = ? WHERE name = ?",
                         (ctx.now, name))
        ctx.conn.execute("UPDATE schedule SET last_fire_at = ?, last_error = NULL WHERE name = ? AND "
                         "(last_fire_at IS NULL OR last_fire_at < ?)", (fire["fire_time"], name, fire["fire_time"]))
        ctx.changes.touch("schedule")
        return receipt

    return recorded(ctx, args, apply)


@command("schedule.pause")
def pause_schedule(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Stop a schedule's clock fires until `schedule.resume` (manual triggers still work)."""

    def apply() -> dict[str, Any]:
        name = args["name"]
        row = _row(ctx, name)
        if row is None:
            raise NotFound("schedule", name)
        if row[0]:
            raise Rejected(f"schedule {name} is already paused")
        ctx.conn.execute("UPDATE schedule SET paused = 1, updated_at = ? WHERE name = ?", (ctx.now, name))
        ctx.changes.touch("schedule")
        return {"name": name, "paused": True}

    return recorded(ctx, args, apply)


@command("schedule.resume")
def resume_schedule(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Fire again from the next fire time after now: fires that fell into the pause are not caught up."""

    def apply() -> dict[str, Any]:
        name = args["name"]
        row = _row(ctx, name)
        if row is None:
            raise NotFound("schedule", name)
        if not row[0]:
            raise Rejected(f"schedule {name} is not paused")
        ctx.conn.execute("UPDATE schedule SET paused = 0, next_fire_at = NULL, updated_at = ? WHERE name = ?",
                         (ctx.now, name))
        ctx.changes.touch("schedule")
        return {"name": name, "paused": False}

    return recorded(ctx, args, apply)
