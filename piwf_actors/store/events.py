"""The append-only per-run trace. Every run state change appends one event."""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import NotFound
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.engines.base import Connection


def append_event(conn: Connection, run_id: str, kind: str, now: float, *,
                 node_id: str | None = None, attempt_id: str | None = None,
                 payload: Any = None, want_seq: bool = False) -> int | None:
    """Append an event with the run's next sequence number and return that number — or None inside
    a batch on PostgreSQL, which leaves the numbering to the insert (`BatchConnection`), unless
    `want_seq` asks for it (there a round trip of its own).

    One statement: the next number is max(seq) + 1 for the run, read under the
    writer's transaction, and the row is only inserted when the run exists.
    Events are deleted only together with their run (prune), so the sequence
    of a living run only grows. Inside a write batch (`BatchConnection`) the
    event is held back and inserted with the batch's other events.
    """
    encoded = None if payload is None else canonical_json(payload)
    if isinstance(conn, BatchConnection):
        return conn.append_event(run_id, kind, now, node_id, attempt_id, encoded, want_seq=want_seq)
    row = conn.execute(
        """INSERT INTO run_event (run_id, seq, kind, node_id, attempt_id, payload, created_at)
           SELECT run.run_id,
                  (SELECT coalesce(max(seq), 0) + 1 FROM run_event WHERE run_id = run.run_id),
                  ?, ?, ?, ?, ?
           FROM run WHERE run.run_id = ?
           RETURNING seq""",
        (kind, node_id, attempt_id, encoded, now, run_id),
    ).fetchone()
    if row is None:
        raise NotFound("run", run_id)
    return int(row[0])
