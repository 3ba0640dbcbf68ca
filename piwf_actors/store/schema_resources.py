"""The tables of resource managers (schema v9, docs/resource-managers.md). Listed in store/schema.py
with every other table."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class Resource(Base):
    """A resource a resource manager owns (schema v9): its spec, status and finalizers, and its place in
    the reconcile queue with the claim of the reconcile running now.

    `generation` grows when the spec changes; `resource_version` on every change of spec, status,
    finalizers or deletion (never for queue or claim bookkeeping). Queued: `available_at` is the time
    it is due (NULL: not queued); `queue_version` grows with every enqueue, so a reconcile can tell
    that it was enqueued again while it ran. Claimed: `claim_token_hash` and `claim_generation` (grows
    with every claim) fence what the reconcile's worker writes, like a run's claim.
    """

    manager = pw.TextField()
    resource_key = pw.TextField()
    uid = pw.TextField(unique=True)
    project_path = pw.TextField()
    manager_path = pw.TextField()
    manager_digest = pw.TextField()
    spec_json = pw.TextField()
    status_json = pw.TextField()
    finalizers_json = pw.TextField()
    generation = pw.IntegerField()
    resource_version = pw.IntegerField()
    observed_generation = pw.IntegerField(default=0)
    deletion_requested_at = pw.FloatField(null=True)
    created_at = pw.FloatField()
    updated_at = pw.FloatField()
    available_at = pw.FloatField(null=True)
    queue_version = pw.IntegerField(default=0)
    consecutive_errors = pw.IntegerField(default=0)
    last_result = pw.TextField(null=True)
    last_error = pw.TextField(null=True)
    reconciled_at = pw.FloatField(null=True)
    claim_token_hash = pw.TextField(null=True)
    claim_generation = pw.IntegerField(default=0)
    claim_queue_version = pw.IntegerField(null=True)
    claim_launch_id = pw.TextField(null=True)
    claim_host_epoch = pw.IntegerField(null=True)
    claimed_at = pw.FloatField(null=True)
    claim_expires_at = pw.FloatField(null=True)

    class Meta:
        table_name = "resource"
        primary_key = pw.CompositeKey("manager", "resource_key")
        indexes = ((("available_at",), False), (("claim_expires_at",), False))


class ResourceEvent(Base):
    """What happened to a resource (schema v9), numbered per (manager, key); kept after the resource
    is deleted (its `uid` tells a recreated resource's events from the old one's)."""

    manager = pw.TextField()
    resource_key = pw.TextField()
    seq = pw.IntegerField()
    uid = pw.TextField()
    kind = pw.TextField()
    payload = pw.TextField(null=True)
    created_at = pw.FloatField()

    class Meta:
        table_name = "resource_event"
        primary_key = pw.CompositeKey("manager", "resource_key", "seq")


class ResourceEffect(Base):
    """An at-most-once effect of a reconcile (`ctx.effect(key, fn)`, schema v9): `applying` before fn
    runs, then `applied` (with its result) or `failed`; one left `applying` by a reconcile that died is
    `ambiguous` until a person resolves it (`effect.resolve`)."""

    effect_id = pw.TextField(primary_key=True)
    uid = pw.TextField()
    manager = pw.TextField()
    resource_key = pw.TextField()
    effect_key = pw.TextField()
    status = pw.TextField()  # applying | applied | failed | ambiguous | replaced
    result_json = pw.TextField(null=True)
    error = pw.TextField(null=True)
    resolution = pw.TextField(null=True)  # confirmed | retry, when a person settled it
    attempts = pw.IntegerField(default=1)
    generation = pw.IntegerField()  # the resource's generation when it was reserved
    claim_generation = pw.IntegerField()
    reserved_at = pw.FloatField()
    settled_at = pw.FloatField(null=True)

    class Meta:
        table_name = "resource_effect"
        indexes = ((("uid", "effect_key"), True), (("status",), False))


class ResourceRun(Base):
    """A run a resource owns (`ctx.workflows.ensure`, schema v9): when it ends, its resource is enqueued."""

    run_id = pw.TextField(primary_key=True)
    manager = pw.TextField()
    resource_key = pw.TextField()
    uid = pw.TextField()
    ensure_key = pw.TextField()
    created_at = pw.FloatField()

    class Meta:
        table_name = "resource_run"
        indexes = ((("manager", "resource_key"), False),)


#: The tables of resource managers (schema v9).
RESOURCE_MODELS: tuple[type[Base], ...] = (Resource, ResourceEvent, ResourceEffect, ResourceRun)
