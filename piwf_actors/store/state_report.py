"""`state.status` and `state.verify`: what the state database holds and whether it keeps its invariants.

Both read through one read snapshot (`store/snapshot.py`), so each answer
describes a single consistent state even while the writer keeps committing;
neither writes. They run in the caller's thread (the gateway's, the CLI's,
a test's) and read every table on purpose: that is what these maintenance
reads are for (host.status never does it).

What each engine does its own way is its engine's answer (`store/engines/`):
the storage fields of `state_status` (SQLite's pages and WAL file; PostgreSQL's
database size), the integrity check of `verify` (SQLite's `PRAGMA
integrity_check`; on PostgreSQL the schema's presence and version, the pages
being the server's to check), how its tables and triggers are listed.
"""

from __future__ import annotations

import hashlib
from typing import Any

from piwf_actors.paths import DatabaseLocation
from piwf_actors.statuses import RUN_STATUSES, TERMINAL_SQL
from piwf_actors.store.engines.base import engine_of, one_line
from piwf_actors.store.engines.registry import engine_for
from piwf_actors.store.prune_plan import BLOB_REFERENCES
from piwf_actors.store.schema import RUN_COUNT_TRIGGERS
from piwf_actors.store.snapshot import as_location, read_snapshot, row_counts

# --- status -------------------------------------------------------------------


def state_status(database: DatabaseLocation, *, counts: bool = True) -> dict[str, Any]:
    """Sizes, page accounting, schema version and row counts of the state database.

    Returns {path, db_bytes, wal_bytes, page_size, page_count, freelist_count,
    auto_vacuum, schema_version, tables: {table: rows}, runs: {status: count},
    blob_count, blob_bytes}. `runs` always has every known status (0 if none) and
    comes from the `run_count` counters. `tables` are exact row counts: each costs
    a walk of the table's smallest b-tree, which is what this maintenance command
    is for (host.status never does it); `counts=False` leaves them out (`tables` is then
    absent), which makes the call cheap. `engine` names the engine; on PostgreSQL
    `db_bytes` is the database's size on the server, and the page and WAL fields
    are None (PostgreSQL's own).
    """
    database = as_location(database)
    engine = engine_for(database)
    with read_snapshot(database) as conn:
        blob_count, blob_bytes = _blob_totals(conn)
        return {
            "engine": engine.name, "path": str(database),
            **engine.storage_status(conn, database),
            "schema_version": engine.schema_version(conn),
            **({"tables": row_counts(conn)} if counts else {}),
            # The counters the triggers keep (schema v5), as host.status reads them; `state verify`
            # compares them with a real count.
            "runs": _run_counters(conn),
            "blob_count": blob_count, "blob_bytes": blob_bytes,
        }


def _blob_totals(conn: Any) -> tuple[int, int]:
    # int(): PostgreSQL's sum of BIGINTs is NUMERIC, which arrives as a Decimal.
    count, size = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM blob").fetchone()
    return int(count), int(size)


def _run_counters(conn: Any) -> dict[str, int]:
    runs = dict.fromkeys(RUN_STATUSES, 0)
    for status, count in conn.execute("SELECT status, CAST(sum(n) AS BIGINT) FROM run_count GROUP BY status"):
        if count:
            runs[status] = int(count)
    return runs


# --- verify -------------------------------------------------------------------

# Each check is (code, SQL yielding (run_id, detail)). Stable codes: they are
# shown to users and matched by scripts. Details are built with `||`, which both
# engines read the same way (SQLite's printf has no PostgreSQL twin).
_CHECKS: tuple[tuple[str, str], ...] = (
    ("claim_on_inactive_run",
     """SELECT c.run_id, 'run ' || c.run_id || ' is claimed (generation ' || c.generation || ') but is '
               || coalesce(r.status, 'missing')
        FROM run_claim c LEFT JOIN run r ON r.run_id = c.run_id
        WHERE r.status IS NULL OR r.status NOT IN ('starting', 'running')"""),
    ("active_run_without_claim",
     """SELECT r.run_id, 'run ' || r.run_id || ' is ' || r.status || ' but has no claim' FROM run r
        WHERE r.status IN ('starting', 'running')
          AND NOT EXISTS (SELECT 1 FROM run_claim c WHERE c.run_id = r.run_id)"""),
    ("terminal_run_without_event",
     f"""SELECT t.run_id, 'run ' || t.run_id || ' is ' || t.status || ' but has no ' || t.kind || ' event'
         FROM (SELECT run_id, status, CASE status WHEN 'done' THEN 'run_finished'
                      WHEN 'failed' THEN 'run_failed' ELSE 'run_cancelled' END AS kind
               FROM run WHERE status IN {TERMINAL_SQL}) t
         WHERE NOT EXISTS (SELECT 1 FROM run_event e WHERE e.run_id = t.run_id AND e.kind = t.kind)"""),
    ("attempt_of_missing_run",
     """SELECT a.run_id, 'attempt ' || a.attempt_id || ' belongs to missing run ' || a.run_id
        FROM node_attempt a WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = a.run_id)"""),
    ("event_of_missing_run",
     """SELECT e.run_id, count(*) || ' events belong to missing run ' || e.run_id
        FROM run_event e WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = e.run_id)
        GROUP BY e.run_id"""),
    ("effect_of_missing_run",
     """SELECT f.run_id, 'effect ' || f.effect_id || ' belongs to missing run ' || f.run_id
        FROM effect f WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = f.run_id)"""),
    ("request_of_missing_run",
     """SELECT q.run_id, 'interactive request ' || q.request_id || ' belongs to missing run ' || q.run_id
        FROM interactive_request q WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = q.run_id)"""),
    ("event_sequence_gap",
     """SELECT e.run_id, 'run ' || e.run_id || ' has ' || count(*) || ' events numbered '
               || min(e.seq) || '..' || max(e.seq)
        FROM run_event e WHERE EXISTS (SELECT 1 FROM run r WHERE r.run_id = e.run_id)
        GROUP BY e.run_id HAVING min(e.seq) != 1 OR max(e.seq) != count(*)"""),
    ("output_without_success",
     # A failed attempt may keep its output (a shell's exit code and stderr, for routing).
     """SELECT run_id, 'attempt ' || attempt_id || ' has an output but is ' || status
        FROM node_attempt WHERE (output_sha256 IS NOT NULL OR output_json IS NOT NULL)
        AND status NOT IN ('succeeded', 'failed')"""),
    ("value_stored_twice",
     """SELECT run_id, 'attempt ' || attempt_id || ' has its output both inline and as a blob'
        FROM node_attempt WHERE output_sha256 IS NOT NULL AND output_json IS NOT NULL"""),
    ("parked_without_reason",
     "SELECT run_id, 'run ' || run_id || ' is parked without a park_reason' FROM run "
     "WHERE status = 'parked' AND park_reason IS NULL"),
    # The counters host.status reads (run_count, kept by triggers since schema v5) against a real count.
    ("run_count_mismatch",
     """SELECT NULL, 'run_count says ' || coalesce(c.n, 0) || ' runs are ' || s.status
               || ' but the run table holds ' || coalesce(r.n, 0)
        FROM (SELECT status FROM run_count UNION SELECT status FROM run) s
        LEFT JOIN (SELECT status, CAST(sum(n) AS BIGINT) AS n FROM run_count GROUP BY status) c ON c.status = s.status
        LEFT JOIN (SELECT status, count(*) AS n FROM run GROUP BY status) r ON r.status = s.status
        WHERE coalesce(c.n, 0) != coalesce(r.n, 0)"""),
    ("two_accepted_submissions",
     """SELECT q.run_id, 'interactive request ' || s.request_id || ' has ' || count(*) || ' accepted submissions'
        FROM interactive_submission s LEFT JOIN interactive_request q ON q.request_id = s.request_id
        WHERE s.outcome = 'accepted' GROUP BY s.request_id, q.run_id HAVING count(*) > 1"""),
) + tuple(
    ("missing_blob",
     f"""SELECT t.run_id, '{table}.{column} of ' || t.{key} || ' references missing blob ' || t.{column}
         FROM {table} t WHERE t.{column} IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM blob b WHERE b.sha256 = t.{column})""")
    for table, key, column in BLOB_REFERENCES
)


def _missing_triggers(conn: Any) -> list[dict[str, Any]]:
    """The run-count triggers that are gone (each engine lists its triggers its own way)."""
    present = engine_of(conn).trigger_names(conn)
    return [{"code": "run_count_trigger_missing",
             "detail": f"trigger {name} is missing: run_count no longer follows the run table"}
            for name in sorted(RUN_COUNT_TRIGGERS) if name not in present]


def _lease_violations(conn: Any) -> list[dict[str, Any]]:
    total, has_row_1 = conn.execute("SELECT count(*), count(*) FILTER (WHERE id = 1) FROM host_state").fetchone()
    found = []
    if not has_row_1:
        found.append({"code": "lease_row_missing", "detail": "host_state has no row with id 1"})
    if total > 1:
        found.append({"code": "lease_multiple_rows", "detail": f"host_state has {total} rows, expected exactly one"})
    return found


def _blob_violations(conn: Any, limit: int) -> list[dict[str, Any]]:
    """Blobs whose content no longer matches their key or recorded size (bit rot, bad edits)."""
    found = []
    for sha256, size, data in conn.execute("SELECT sha256, size, data FROM blob"):
        data = bytes(data) if data is not None else b""
        if hashlib.sha256(data).hexdigest() != sha256 or len(data) != size:
            found.append({"code": "blob_digest_mismatch",
                          "detail": f"blob {sha256} holds {len(data)} bytes that do not match its key or size"})
            if len(found) > limit:
                break
    return found


def _recover(conn: Any) -> None:
    """After a failed check, PostgreSQL refuses the rest of the transaction: start a new snapshot
    (the checks that follow read a slightly later one, which is all a failed check leaves)."""
    engine = engine_of(conn)
    if engine.aborts_transaction:
        conn.execute("ROLLBACK")
        conn.execute(engine.begin_read)


def verify(database: DatabaseLocation, now: float, *, limit_per_code: int = 100) -> dict[str, Any]:
    """PRAGMA integrity_check plus the project's invariants, on one snapshot.

    Returns {ok, checked_at, integrity: [lines], violations: [{code, detail,
    run_id?}], truncated: [codes with more than `limit_per_code` findings],
    lease_live}. `ok` is True only when integrity_check says "ok" and no
    invariant is broken. An expired, unreleased lease is not a violation (it
    is what a crashed host leaves behind); `lease_live` reports it instead.
    """
    violations: list[dict[str, Any]] = []
    truncated: list[str] = []

    def add(code: str, found: list[dict[str, Any]]) -> None:
        if len(found) > limit_per_code:
            truncated.append(code)
        violations.extend(found[:limit_per_code])

    database = as_location(database)
    with read_snapshot(database) as conn:
        driver_errors = engine_of(conn).driver_errors
        try:
            integrity = engine_of(conn).integrity(conn)
        except driver_errors as exc:
            integrity = [f"integrity_check failed: {one_line(exc)}"]
            _recover(conn)
        try:
            for item in _lease_violations(conn):
                add(item["code"], [item])
            lease = conn.execute("SELECT host_id, expires_at FROM host_state WHERE id = 1").fetchone()
        except driver_errors as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"host_state: {one_line(exc)}"}])
            _recover(conn)
            lease = None
        for code, sql in _CHECKS:
            try:
                rows = conn.execute(f"{sql} LIMIT ?", (limit_per_code + 1,)).fetchall()
            except driver_errors as exc:
                add("check_failed", [{"code": "check_failed", "detail": f"{code}: {one_line(exc)}"}])
                _recover(conn)
                continue
            add(code, [{"code": code, "detail": detail, **({"run_id": run_id} if run_id else {})}
                       for run_id, detail in rows])
        try:
            add("run_count_trigger_missing", _missing_triggers(conn))
        except driver_errors as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"run_count_trigger_missing: {one_line(exc)}"}])
            _recover(conn)
        try:
            add("blob_digest_mismatch", _blob_violations(conn, limit_per_code))
        except driver_errors as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"blob_digest_mismatch: {one_line(exc)}"}])
    return {
        "ok": integrity == ["ok"] and not violations,
        "checked_at": now,
        "integrity": integrity,
        "violations": violations,
        "truncated": truncated,
        "lease_live": bool(lease and lease[0] is not None and (lease[1] or 0) > now),
    }
