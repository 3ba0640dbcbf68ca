"""The tables of events (schema v21): emitted events, what they started or woke, subscriptions' cursors
and open batches (docs/durability.md "Events and batches"). Listed in store/schema.py with every other
table."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class EventRecord(Base):
    """One emitted event (`event.emit`, `piwf emit`). `seq` grows with every event (the order the
    event keeper reads them in); (`name`, `key`) is unique when a key is given, so an emit again
    under the same key is the event already there (adopted). `data` is inline JSON (events are small:
    store/commands/events.py MAX_DATA_BYTES)."""

    event_id = pw.TextField(primary_key=True)
    seq = pw.IntegerField(unique=True)
    name = pw.TextField()
    key = pw.TextField(null=True)
    data = pw.TextField()
    sender = pw.TextField()  # JSON: who emitted it (a client and its process)
    emitted_at = pw.FloatField()

    class Meta:
        table_name = "event"
        indexes = ((("name", "key"), True), (("name", "seq"), False), (("emitted_at",), False))


class EventDelivery(Base):
    """What an event did for one subscriber (an `on_event` workflow): `started` a run (`run_id`, derived
    from the event and the workflow), `batched` into `batch_id`, `filtered` out, or `failed` (its
    filter, input or key function raised: `error`). One row per (event, subscription): written in the
    transaction that advances the subscription's cursor past the event, so no event is taken twice."""

    event_id = pw.TextField()
    subscription = pw.TextField()
    outcome = pw.TextField()  # started | batched | filtered | failed
    run_id = pw.TextField(null=True)
    batch_id = pw.TextField(null=True)
    error = pw.TextField(null=True)
    created_at = pw.FloatField()

    class Meta:
        table_name = "event_delivery"
        primary_key = pw.CompositeKey("event_id", "subscription")
        indexes = ((("batch_id",), False), (("run_id",), False))


class EventTake(Base):
    """A run's `wait_event` took this event (once per (event, run): a second wait of the same run never
    takes it again)."""

    event_id = pw.TextField()
    run_id = pw.TextField()
    wait_id = pw.TextField()
    node_id = pw.TextField()
    created_at = pw.FloatField()

    class Meta:
        table_name = "event_take"
        primary_key = pw.CompositeKey("event_id", "run_id")
        indexes = ((("run_id",), False),)


class EventSubscription(Base):
    """A workflow that declares `on_event(NAME)`, as the active host's event keeper found it: the events
    it has taken so far (`cursor_seq`: every event up to it has its delivery row). A subscription seen
    for the first time starts at the newest event then (no backfill of older events)."""

    name = pw.TextField(primary_key=True)  # the workflow's name
    event_name = pw.TextField()
    cursor_seq = pw.IntegerField()
    summary = pw.TextField(null=True)  # JSON: where the workflow comes from, its filter/batch options
    created_at = pw.FloatField()
    updated_at = pw.FloatField()

    class Meta:
        table_name = "event_subscription"


class EventBatch(Base):
    """The events of a batching subscription collected under one key: `open` until it holds `max_items`
    events or `max_wait_s` passed since it opened (`due_at`), then `started` with its run (in one
    transaction)."""

    batch_id = pw.TextField(primary_key=True)
    subscription = pw.TextField()
    batch_key = pw.TextField()
    status = pw.TextField()  # open | started
    item_count = pw.IntegerField()
    max_items = pw.IntegerField()
    opened_at = pw.FloatField()
    due_at = pw.FloatField()
    run_id = pw.TextField(null=True)
    started_at = pw.FloatField(null=True)

    class Meta:
        table_name = "event_batch"
        indexes = ((("subscription", "batch_key", "status"), False), (("status", "due_at"), False))


#: The tables of schema v21, in creation order.
EVENT_MODELS: tuple[type[Base], ...] = (EventRecord, EventDelivery, EventTake, EventSubscription, EventBatch)
