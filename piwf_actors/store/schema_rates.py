"""The tables of flow control by rate (schema v20): the starts a rate limit counts, and the timers of
runs held by a rate limit or a debounce (docs/durability.md "Flow control by rate"). Listed in
store/schema.py with every other table."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class RateStart(Base):
    """One start counted against a rate key: written in the transaction that spends it (the claim that
    starts a fresh run, `run_id` the run's; a node's `rate_take`, `run_id` the attempt's). A check
    counts the rows of the last `per_s` seconds and deletes the older ones of the key it reads, so a
    key keeps at most `max` rows; `left_at` (`started_at + per_s`) is when the row leaves its window,
    after which `state.prune` removes the rows of keys never read again."""

    rate_key = pw.TextField()
    run_id = pw.TextField()
    started_at = pw.FloatField()
    left_at = pw.FloatField()

    class Meta:
        table_name = "rate_start"
        primary_key = pw.CompositeKey("rate_key", "run_id")
        indexes = ((("rate_key", "started_at"), False), (("left_at",), False))


class FlowTimer(Base):
    """The time runs held by a rate limit or a debounce are let go, one row per what holds them
    (`held_by`: `rate_key:<key>`, `rate_node:<key>` or `debounce:<key>`, the value of `run.held_by`).

    `waits.wake` lets them go once `wake_at` has passed, as it wakes sleepers: the housekeeper reads
    only the nearest `wake_at`. A debounce's row also names the run the starts collapse into
    (`run_id`), its first start (`first_at`, for `max_wait_s`) and how many starts it joined."""

    held_by = pw.TextField(primary_key=True)
    kind = pw.TextField()  # rate (held fresh runs) | rate_node (runs parked before a node) | debounce
    name = pw.TextField()  # the limiter's (rate) or workflow's (debounce) name: the metrics label
    wake_at = pw.FloatField(null=True)
    run_id = pw.TextField(null=True)
    first_at = pw.FloatField(null=True)
    joined = pw.IntegerField(default=0, constraints=[pw.SQL("DEFAULT 0")])
    # A rate timer's budget (the limiter's, as the hold that set it last read it).
    rate_max = pw.IntegerField(null=True)
    rate_per_s = pw.FloatField(null=True)

    class Meta:
        table_name = "flow_timer"


FLOW_MODELS: tuple[type[Base], ...] = (RateStart, FlowTimer)
