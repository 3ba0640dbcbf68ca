"""The clocks of a run's open requests and message waits: a deadline counts only while someone could answer.

A checkpoint's or agent step's `timeout_s` and a decision's `on_timeout.after_s` become the
request's `deadline_at` when it is created. Answers to a paused run are refused, so while the run
is paused (a pause requested, or parked `paused`) its requests' clocks stand still: the time left
moves to `paused_remaining_s` and `deadline_at` is cleared (so `interaction.expire` and the
housekeeper's next-deadline read, which look only at `deadline_at`, skip it without a further test);
`run.resume` sets `deadline_at` to now + what was left. A request created while a pause is
requested starts with its clock stopped.

Host downtime is not a pause: a deadline is a time on the wall clock, and one that passed while no
host ran is applied when the next host starts (`interaction.expire` runs right after recovery), the
same for every kind of request — as a durable timer would fire.

Deadlines and what is left of them are timer time (`ctx.timer_now`, piwf_actors/clock.py), which is
the wall clock but under a test's clock; `updated_at` stays host time.
"""

from __future__ import annotations

from piwf_actors.store.commands.registry import WriteContext

_OPEN = "status IN ('pending', 'presenting')"


def stop_request_clocks(ctx: WriteContext, run_id: str) -> int:
    """The run is being paused: keep each open request's time left and stop its deadline."""
    changed = ctx.conn.execute(
        f"""UPDATE interactive_request
               SET paused_remaining_s = CASE WHEN deadline_at > ? THEN deadline_at - ? ELSE 0 END,
                   deadline_at = NULL, updated_at = ?
            WHERE run_id = ? AND {_OPEN} AND deadline_at IS NOT NULL""",
        (ctx.timer_now, ctx.timer_now, ctx.now, run_id)).rowcount
    if changed:
        ctx.changes.touch("interactive_request", run_id)
    # A message wait's timeout stands still too (a sleep's wake-up time does not: it is a time).
    if ctx.conn.execute(
            """UPDATE run_wait SET paused_remaining_s = CASE WHEN wake_at > ? THEN wake_at - ? ELSE 0 END,
                   wake_at = NULL
               WHERE run_id = ? AND kind IN ('message', 'event') AND status = 'pending' AND wake_at IS NOT NULL""",
            (ctx.timer_now, ctx.timer_now, run_id)).rowcount:
        ctx.changes.touch("run_wait", run_id)
    return int(changed)


def restart_request_clocks(ctx: WriteContext, run_id: str) -> int:
    """The run is resumed: each stopped deadline goes on from what was left."""
    changed = ctx.conn.execute(
        f"""UPDATE interactive_request SET deadline_at = ? + paused_remaining_s, paused_remaining_s = NULL,
                   updated_at = ?
            WHERE run_id = ? AND {_OPEN} AND paused_remaining_s IS NOT NULL""",
        (ctx.timer_now, ctx.now, run_id)).rowcount
    if changed:
        ctx.changes.touch("interactive_request", run_id)
    if ctx.conn.execute(
            """UPDATE run_wait SET wake_at = ? + paused_remaining_s, paused_remaining_s = NULL
               WHERE run_id = ? AND kind IN ('message', 'event') AND status = 'pending' AND paused_remaining_s IS NOT NULL""",
            (ctx.timer_now, run_id)).rowcount:
        ctx.changes.touch("run_wait", run_id)
    return int(changed)
