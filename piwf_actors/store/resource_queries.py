"""Reads for resource managers: what `resource.get`, `resource.list` and `resource.events` show, and
whether a reconcile is due (the scheduler's cheap look before asking the writer to claim one)."""

from __future__ import annotations

import json
from typing import Any

from piwf_actors.store.reader import StoreReader
from piwf_actors.store.resource_state import resource_row, resource_view


def reconcile_due(reader: StoreReader, now: float) -> bool:
    """Is a resource due for a reconcile and not claimed (or its claim ran out)?"""
    return reader.one("""SELECT 1 FROM resource WHERE available_at <= ?
                             AND (claim_expires_at IS NULL OR claim_expires_at <= ?) LIMIT 1""", (now, now)) is not None


def resource_get(reader: StoreReader, manager: str, key: str) -> dict[str, Any] | None:
    """The resource with its effects and the runs it owns, or None."""
    row = resource_row(reader.conn, manager, key)
    if row is None:
        return None
    view = resource_view(row)
    effect_keys = ("effect_id", "effect_key", "status", "result", "error", "resolution", "attempts", "reserved_at",
                   "settled_at")
    view["effects"] = [
        {**dict(zip(effect_keys, item, strict=True)), "result": None if item[3] is None else json.loads(item[3])}
        for item in reader.all(
            """SELECT effect_id, effect_key, status, result_json, error, resolution, attempts, reserved_at, settled_at
               FROM resource_effect WHERE uid = ? ORDER BY reserved_at""", (row["uid"],))]
    view["runs"] = [
        {"run_id": run_id, "ensure_key": ensure_key, "workflow": workflow, "status": status}
        for run_id, ensure_key, workflow, status in reader.all(
            """SELECT o.run_id, o.ensure_key, r.workflow, r.status FROM resource_run o
               LEFT JOIN run r ON r.run_id = o.run_id
               WHERE o.manager = ? AND o.resource_key = ? ORDER BY o.created_at""", (manager, key))]
    return view


def resource_list(reader: StoreReader, manager: str | None = None, limit: int = 500) -> list[dict[str, Any]]:
    """Resources by manager and key (of one manager when given)."""
    if manager is None:  # (two statements, not `? IS NULL OR …`: a NULL parameter has no type in PostgreSQL)
        cursor = reader.conn.execute("SELECT * FROM resource ORDER BY manager, resource_key LIMIT ?", (limit,))
    else:
        cursor = reader.conn.execute("SELECT * FROM resource WHERE manager = ? ORDER BY resource_key LIMIT ?",
                                     (manager, limit))
    names = [d[0] for d in cursor.description]
    return [resource_view(dict(zip(names, row, strict=True))) for row in cursor.fetchall()]


def resource_events(reader: StoreReader, manager: str, key: str, after: int = 0,
                    limit: int = 500) -> list[dict[str, Any]]:
    """The resource's events after `after` (its own and those of earlier resources of the same key)."""
    return [{"seq": seq, "uid": uid, "kind": kind, "payload": None if payload is None else json.loads(payload),
             "created_at": created_at}
            for seq, uid, kind, payload, created_at in reader.all(
                """SELECT seq, uid, kind, payload, created_at FROM resource_event
                   WHERE manager = ? AND resource_key = ? AND seq > ? ORDER BY seq LIMIT ?""",
                (manager, key, after, limit))]


def events_exist(reader: StoreReader, manager: str, key: str) -> bool:
    return reader.one("SELECT 1 FROM resource_event WHERE manager = ? AND resource_key = ? LIMIT 1",
                      (manager, key)) is not None
