"""The tables of schedules (schema v7): each schedule the host has seen and each of its fires.
Listed in store/schema.py with every other table."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class ScheduleRecord(Base):
    """A schedule the host has seen (schema v7): its pause flag and where its fires stand.

    `next_fire_at` is the cursor: the earliest fire time not yet handled (only grows while
    `timing_key` stays; NULL until the keeper computes one, e.g. after `schedule.resume`).
    The definition itself lives in the workflow file; `definition_digest`, `timing_key` and
    `summary` record what the keeper last loaded. `paused` is 0 or 1 (an integer, portable).
    """

    name = pw.TextField(primary_key=True)
    definition_digest = pw.TextField()
    timing_key = pw.TextField()
    summary = pw.TextField()  # JSON: workflow, timing, catch_up, source path, project
    paused = pw.IntegerField(default=0)
    last_fire_at = pw.FloatField(null=True)
    next_fire_at = pw.FloatField(null=True)
    fire_count = pw.IntegerField(default=0)
    skipped_count = pw.IntegerField(default=0)
    last_error = pw.TextField(null=True)
    created_at = pw.FloatField()
    updated_at = pw.FloatField()

    class Meta:
        table_name = "schedule"


class ScheduleFire(Base):
    """One fire of a schedule (schema v7), recorded in the transaction that inserts its run: a fire
    key is used once, so a fire happens at most once across crashes and restarts.

    `fire_key` is `at:<fire time>` for the clock's fires and `manual:<client>:<key>` for a
    `schedule.trigger`; `kind` is scheduled | catch_up | manual. `run_id` is NULL when the fire
    could not start a run (`error` says why: the workflow did not load, the input function raised).
    """

    schedule = pw.TextField()
    fire_key = pw.TextField()
    fire_time = pw.FloatField()
    kind = pw.TextField()
    run_id = pw.TextField(null=True)
    error = pw.TextField(null=True)
    created_at = pw.FloatField()

    class Meta:
        table_name = "schedule_fire"
        primary_key = pw.CompositeKey("schedule", "fire_key")
        indexes = ((("run_id",), False), (("schedule", "fire_time"), False))
