"""Reads of the effects that wait for a person: `effect.list` (the console's effects page, `GET /api/v1/effects`).

One statement per page, whatever the size of the history: the ambiguous effects are found through
the partial index `effect_ambiguous` (schema v5: it holds only the rows `status = 'ambiguous'`, a
handful at any time, however many effects were ever applied), newest first, each joined with its run
and the attempt it was reserved by (primary keys). The status is spelled in the SQL, not bound:
SQLite uses a partial index only for a WHERE that names its condition literally.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.store.queries import bounded_json
from piwf_actors.store.reader import StoreReader

#: The statuses `effect.list` lists, each with the partial index that holds exactly its rows.
LISTED_STATUSES = ("ambiguous",)

_COLUMNS = ("effect_id", "run_id", "node_id", "attempt_id", "status", "idempotent", "error", "reserved_at",
            "workflow", "run_status", "park_reason", "park_detail", "run_revision", "input_json", "input_sha256",
            "attempt_no", "error_code", "error_message", "traceback", "executed_by")


def listed_effects(reader: StoreReader, status: str, limit: int,
                   before: tuple[float, str] | None = None) -> list[dict[str, Any]]:
    """The newest `limit` effects in `status` (one of LISTED_STATUSES), newest reservation first (by
    effect id within one instant); with `before` (reserved_at, effect_id of a page's last effect), those
    after it. Each: the effect, its run's {run_id, workflow, status, park_reason, park_detail, revision,
    input} and its attempt's {attempt_no, error, executed_by}."""
    if status not in LISTED_STATUSES:
        raise ValueError(f"effects in status {status!r} are not listed")
    page, params = "", []
    if before is not None:
        page = "AND (e.reserved_at < ? OR (e.reserved_at = ? AND e.effect_id < ?)) "
        params = [before[0], before[0], before[1]]
    rows = reader.all(
        f"""SELECT e.effect_id, e.run_id, e.node_id, e.attempt_id, e.status, e.idempotent, e.error, e.reserved_at,
                   r.workflow, r.status, r.park_reason, r.park_detail, r.revision, r.input_json, r.input_sha256,
                   a.attempt_no, a.error_code, a.error_message, a.traceback, a.executed_by
            FROM effect e JOIN run r ON r.run_id = e.run_id LEFT JOIN node_attempt a ON a.attempt_id = e.attempt_id
            WHERE e.status = '{status}' {page}ORDER BY e.reserved_at DESC, e.effect_id DESC LIMIT ?""",
        (*params, limit))
    found = []
    for row in rows:
        item = dict(zip(_COLUMNS, row, strict=True))
        error = None
        if item["error_message"]:
            error = {"code": item["error_code"], "message": item["error_message"],
                     **({"traceback": item["traceback"]} if item["traceback"] else {})}
        found.append({
            "effect_id": item["effect_id"], "node_id": item["node_id"], "attempt_id": item["attempt_id"],
            "status": item["status"], "idempotent": bool(item["idempotent"]), "error": item["error"],
            "reserved_at": item["reserved_at"],
            "run": {"run_id": item["run_id"], "workflow": item["workflow"], "status": item["run_status"],
                    "park_reason": item["park_reason"], "park_detail": item["park_detail"],
                    "revision": item["run_revision"],
                    "input": bounded_json(reader, item["input_sha256"], item["input_json"])},
            "attempt": {"attempt_no": item["attempt_no"], "error": error, "executed_by": item["executed_by"]},
        })
    return found
