"""Client commands of resource managers: apply, reconcile, delete; resolving a resource's effect;
and the host's recovery of reconciles an earlier host left running.

`resource.apply` creates a resource or changes its spec: `generation` grows
when the spec changes, `resource_version` on every change. The manager file's
digest was checked by the gateway against the client's before this command
was built (a mismatch is a `conflict` there); the command records it.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import Conflict, NotFound, Rejected
from piwf_actors.ids import new_id
from piwf_actors.resources.policy import MAX_KEY_CHARS
from piwf_actors.store.commands.idempotency import Recorded, recorded
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.resource_state import (
    append_resource_event,
    enqueue,
    make_applying_ambiguous,
    release_resource_claim,
    require_resource,
    resource_row,
    resource_view,
)
from piwf_actors.workflows.resource_manager import MANAGER_NAME


def _receipt(ctx: WriteContext, manager: str, key: str, **extra: Any) -> dict[str, Any]:
    view = resource_view(require_resource(ctx.conn, manager, key))
    return {**view, "revision": view["resource_version"], **extra}


def _check_ref(manager: Any, key: Any) -> None:
    if not isinstance(manager, str) or not MANAGER_NAME.fullmatch(manager):
        raise Rejected(f"resource manager name {manager!r} must match {MANAGER_NAME.pattern}")
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise Rejected(f"resource key must be 1 to {MAX_KEY_CHARS} characters")


@command("resource.apply")
def apply_resource(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Create the resource, or change its spec (args: manager, key, spec, initial_status, project_path,
    manager_path, manager_digest). A new or changed resource is due for a reconcile at once."""
    return recorded(ctx, args, lambda: _apply(ctx, args))


def _apply(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    manager, key = args["manager"], args["key"]
    _check_ref(manager, key)
    spec_json = canonical_json(args.get("spec"))
    existing = resource_row(ctx.conn, manager, key)
    if existing is None:
        status = args.get("initial_status")
        status = {} if status is None else status
        if not isinstance(status, dict):
            raise Rejected("initial_status must be a map (status patches are merged into it key by key)")
        uid = new_id("res", ctx.now)
        ctx.conn.execute(
            """INSERT INTO resource (manager, resource_key, uid, project_path, manager_path, manager_digest, spec_json,
                   status_json, finalizers_json, generation, resource_version, observed_generation, created_at,
                   updated_at, available_at, queue_version, consecutive_errors, claim_generation)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, '[]', 1, 1, 0, ?, ?, ?, 1, 0, 0)""",
            (manager, key, uid, args["project_path"], args["manager_path"], args["manager_digest"], spec_json,
             canonical_json(status), ctx.now, ctx.now, ctx.now))
        append_resource_event(ctx, manager, key, uid, "resource_created", {"generation": 1})
        ctx.changes.touch("resource")
        return _receipt(ctx, manager, key, changed=True)
    if existing["project_path"] != args["project_path"]:
        raise Conflict(f"resource {manager}/{key} belongs to project {existing['project_path']}, "
                       f"not {args['project_path']}")
    if existing["deletion_requested_at"] is not None:
        raise Rejected(f"resource {manager}/{key} is being deleted; apply it again once it is gone")
    spec_changed = existing["spec_json"] != spec_json
    manager_changed = existing["manager_digest"] != args["manager_digest"]
    if not spec_changed and not manager_changed:
        return _receipt(ctx, manager, key, changed=False)
    ctx.conn.execute(
        """UPDATE resource SET spec_json = ?, manager_path = ?, manager_digest = ?,
               generation = generation + ?, resource_version = resource_version + 1, updated_at = ?
           WHERE manager = ? AND resource_key = ?""",
        (spec_json, args["manager_path"], args["manager_digest"], int(spec_changed), ctx.now, manager, key))
    generation = existing["generation"] + int(spec_changed)
    if spec_changed:
        append_resource_event(ctx, manager, key, existing["uid"], "spec_changed", {"generation": generation})
    if manager_changed:
        append_resource_event(ctx, manager, key, existing["uid"], "manager_changed",
                              {"manager_digest": args["manager_digest"]})
    enqueue(ctx, manager, key)
    return _receipt(ctx, manager, key, changed=True)


@command("resource.reconcile")
def reconcile_now(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Make the resource due now (a reconcile running now is followed by another)."""

    def apply() -> dict[str, Any]:
        row = require_resource(ctx.conn, args["manager"], args["key"])
        enqueue(ctx, row["manager"], row["resource_key"])
        append_resource_event(ctx, row["manager"], row["resource_key"], row["uid"], "reconcile_requested")
        return _receipt(ctx, row["manager"], row["resource_key"])

    return recorded(ctx, args, apply)


@command("resource.delete")
def delete_resource(ctx: WriteContext, args: dict[str, Any]) -> Recorded:
    """Mark the resource deleting and make it due: it goes away after a `done` reconcile that leaves
    no finalizer (the manager's clean-up)."""

    def apply() -> dict[str, Any]:
        row = require_resource(ctx.conn, args["manager"], args["key"])
        manager, key = row["manager"], row["resource_key"]
        if row["deletion_requested_at"] is None:
            ctx.conn.execute(
                """UPDATE resource SET deletion_requested_at = ?, resource_version = resource_version + 1,
                       updated_at = ? WHERE manager = ? AND resource_key = ?""", (ctx.now, ctx.now, manager, key))
            append_resource_event(ctx, manager, key, row["uid"], "deletion_requested",
                                  {"finalizers": loads(row["finalizers_json"])})
        enqueue(ctx, manager, key)
        return _receipt(ctx, manager, key)

    return recorded(ctx, args, apply)


def resolve_resource_effect(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    """`effect.resolve` of a resource's ambiguous effect: `confirm` (it happened; later reconciles get
    `output` as its result) or `retry` (the next reconcile runs it again). The resource is due at once."""
    row = ctx.conn.execute("SELECT uid, manager, resource_key, status FROM resource_effect WHERE effect_id = ?",
                           (args["effect_id"],)).fetchone()
    if row is None:
        raise NotFound("effect", str(args["effect_id"]))
    uid, manager, key, status = row
    if status != "ambiguous":
        raise Rejected(f"effect {args['effect_id']} is {status}, not ambiguous")
    if args["action"] == "confirm":
        ctx.conn.execute("UPDATE resource_effect SET status = 'applied', resolution = 'confirmed', result_json = ?, "
                         "settled_at = ? WHERE effect_id = ?", (canonical_json(args.get("output")), ctx.now,
                                                               args["effect_id"]))
    else:
        ctx.conn.execute("UPDATE resource_effect SET status = 'failed', resolution = 'retry', settled_at = ? "
                         "WHERE effect_id = ?", (ctx.now, args["effect_id"]))
    append_resource_event(ctx, manager, key, uid, "effect_resolved",
                          {"effect_id": args["effect_id"], "action": args["action"]})
    enqueue(ctx, manager, key)
    ctx.changes.touch("resource_effect")
    return {"effect_id": args["effect_id"], "action": args["action"], "manager": manager, "key": key}


@command("resource.recover")
def recover_resources(ctx: WriteContext, _args: dict[str, Any]) -> dict[str, str]:
    """At start-up: reconciles an earlier host epoch left claimed are over (their workers were reaped).
    Their `applying` effects become `ambiguous`; each resource is due again at once (a host crash is
    not the manager's error: no back-off)."""
    recovered: dict[str, str] = {}
    for manager, key in ctx.conn.execute(
            # (A range on claim_expires_at rather than IS NOT NULL: the planner walks its index for it.)
            "SELECT manager, resource_key FROM resource WHERE claim_expires_at > 0 AND claim_host_epoch < ?",
            (ctx.host_epoch,)).fetchall():
        row = require_resource(ctx.conn, manager, key)
        ambiguous = make_applying_ambiguous(ctx, row)
        release_resource_claim(ctx, manager, key)
        append_resource_event(ctx, manager, key, row["uid"], "reconcile_interrupted",
                              {"reason": "host restarted", "ambiguous_effects": ambiguous})
        enqueue(ctx, manager, key)
        recovered[f"{manager}/{key}"] = "queued"
    return recovered
