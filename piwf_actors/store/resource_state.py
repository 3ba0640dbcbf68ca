"""Small helpers shared by the resource commands: rows, events, the queue, claims.

Every statement is portable SQL (`?` placeholders, `INSERT … SELECT`, `ON CONFLICT … DO`),
so the same text runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import NotFound
from piwf_actors.store.engines.base import Connection

if TYPE_CHECKING:  # the commands package imports this module while it loads
    from piwf_actors.store.commands.registry import WriteContext


def resource_row(conn: Connection, manager: str, key: str) -> dict[str, Any] | None:
    cursor = conn.execute("SELECT * FROM resource WHERE manager = ? AND resource_key = ?", (manager, key))
    row = cursor.fetchone()
    return None if row is None else dict(zip([d[0] for d in cursor.description], row, strict=True))


def require_resource(conn: Connection, manager: str, key: str) -> dict[str, Any]:
    row = resource_row(conn, manager, key)
    if row is None:
        raise NotFound("resource", f"{manager}/{key}")
    return row


def resource_view(row: dict[str, Any]) -> dict[str, Any]:
    """What `resource.get`, `resource.list` and the receipts show of a resource row."""
    return {
        "manager": row["manager"], "key": row["resource_key"], "uid": row["uid"],
        "project_path": row["project_path"], "manager_digest": row["manager_digest"],
        "spec": loads(row["spec_json"]), "status": loads(row["status_json"]),
        "finalizers": loads(row["finalizers_json"]), "generation": row["generation"],
        "resource_version": row["resource_version"], "observed_generation": row["observed_generation"],
        "deleting": row["deletion_requested_at"] is not None,
        "deletion_requested_at": row["deletion_requested_at"],
        "queued": row["available_at"] is not None, "available_at": row["available_at"],
        "reconciling": row["claim_token_hash"] is not None, "consecutive_errors": row["consecutive_errors"],
        "last_result": row["last_result"], "last_error": row["last_error"],
        "reconciled_at": row["reconciled_at"], "created_at": row["created_at"], "updated_at": row["updated_at"],
    }


def append_resource_event(ctx: WriteContext, manager: str, key: str, uid: str, kind: str,
                          payload: Any = None) -> int:
    """Append an event with the resource's next sequence number (per manager and key) and return it."""
    row = ctx.conn.execute(
        """INSERT INTO resource_event (manager, resource_key, seq, uid, kind, payload, created_at)
           SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?
           FROM resource_event WHERE manager = ? AND resource_key = ?
           RETURNING seq""",
        (manager, key, uid, kind, None if payload is None else canonical_json(payload), ctx.now, manager, key),
    ).fetchone()
    ctx.changes.touch("resource_event")
    return int(row[0])


def enqueue(ctx: WriteContext, manager: str, key: str, at: float | None = None) -> bool:
    """Make the resource due at `at` (default now), or sooner if it already was; a reconcile running
    now sees the new `queue_version` when it settles. False when there is no such resource."""
    at = ctx.now if at is None else at
    changed = ctx.conn.execute(
        """UPDATE resource SET available_at = CASE WHEN available_at IS NULL OR available_at > ? THEN ?
                                                  ELSE available_at END,
                               queue_version = queue_version + 1
           WHERE manager = ? AND resource_key = ?""", (at, at, manager, key)).rowcount
    if changed:
        ctx.changes.touch("resource")
    return bool(changed)


def enqueue_owner_of_run(ctx: WriteContext, run_id: str) -> None:
    """A run ended: if a resource owns it, that resource is reconciled again (in the same transaction
    as the run's end, so no crash can lose the wake-up)."""
    owner = ctx.conn.execute("SELECT manager, resource_key FROM resource_run WHERE run_id = ?", (run_id,)).fetchone()
    if owner is not None:
        enqueue(ctx, owner[0], owner[1])


def release_resource_claim(ctx: WriteContext, manager: str, key: str) -> None:
    ctx.conn.execute(
        """UPDATE resource SET claim_token_hash = NULL, claim_queue_version = NULL, claim_launch_id = NULL,
               claim_host_epoch = NULL, claimed_at = NULL, claim_expires_at = NULL
           WHERE manager = ? AND resource_key = ?""", (manager, key))
    ctx.changes.touch("resource")


def make_applying_ambiguous(ctx: WriteContext, row: dict[str, Any]) -> list[str]:
    """Effects a reconcile that is gone left `applying`: nobody knows whether they happened, so they
    become `ambiguous` (never run again by themselves). Returns their ids."""
    ids = [effect_id for (effect_id,) in ctx.conn.execute(
        "UPDATE resource_effect SET status = 'ambiguous' WHERE uid = ? AND status = 'applying' RETURNING effect_id",
        (row["uid"],)).fetchall()]
    for effect_id in ids:
        key = ctx.conn.execute("SELECT effect_key FROM resource_effect WHERE effect_id = ?", (effect_id,)).fetchone()[0]
        append_resource_event(ctx, row["manager"], row["resource_key"], row["uid"], "effect_ambiguous",
                              {"effect_id": effect_id, "effect_key": key})
    if ids:
        ctx.changes.touch("resource_effect")
    return ids
