"""State maintenance, read side: status, verify, backup and the prune plan.

Everything here reads through a read-only connection inside one read
transaction, so each answer describes a single consistent snapshot even while
the writer keeps committing (WAL). The only write is `backup`'s new file,
which is never the state database. Deleting pruned runs is the writer's job
(`state.prune` in `store/commands/maintenance.py`); it computes its plan with
the same `plan_prune` used here, inside its own transaction.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peewee as pw

from piwf_actors.errors import NotFound, Rejected, StoreError
from piwf_actors.statuses import LIVE_SQL, RUN_STATUSES, TERMINAL_SQL
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.schema import BLOB_PREFIX_CHARS, RUN_COUNT_TRIGGERS

#: Every column that points at a blob: (table, the row's own key column, blob column).
#: Prune frees a blob only when none of these references it any more; extend
#: this list when a new column starts to hold a sha256, and give the column a
#: digest-prefix index like those of `schema.V5_INDEXES` (prune looks it up).
BLOB_REFERENCES: tuple[tuple[str, str, str], ...] = (
    ("run", "run_id", "source_sha256"),
    ("run", "run_id", "input_sha256"),
    ("run", "run_id", "output_sha256"),
    ("node_attempt", "attempt_id", "output_sha256"),
    ("effect", "effect_id", "output_sha256"),
    ("interactive_request", "request_id", "contract_sha256"),
)

_AUTO_VACUUM_MODES = {0: "none", 1: "full", 2: "incremental"}
_SIDE_FILES = ("-journal", "-wal", "-shm")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


@contextmanager
def _snapshot(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection holding one read transaction (one WAL snapshot)."""
    if not Path(db_path).is_file():
        raise NotFound("state database", str(db_path))
    reader = StoreReader(Path(db_path))
    try:
        try:
            conn = reader.conn
            conn.execute("BEGIN")
        except (sqlite3.Error, pw.DatabaseError) as exc:
            raise StoreError(f"cannot read {db_path}: {_one_line(exc)}") from exc
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    finally:
        reader.close()


def _pragma(conn: sqlite3.Connection, name: str) -> Any:
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


# --- status -------------------------------------------------------------------


def state_status(db_path: Path) -> dict[str, Any]:
    """Sizes, page accounting, schema version and row counts of the state database.

    Returns {path, db_bytes, wal_bytes, page_size, page_count, freelist_count,
    auto_vacuum, schema_version, tables: {table: rows}, runs: {status: count},
    blob_count, blob_bytes}. `runs` always has every known status (0 if none) and
    comes from the `run_count` counters. `tables` are exact row counts: each costs
    a walk of the table's smallest b-tree, which is what this maintenance command
    is for (host.status never does it).
    """
    db_path = Path(db_path)
    with _snapshot(db_path) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        rows = {name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in tables}
        runs = dict.fromkeys(RUN_STATUSES, 0)
        # The counters the triggers keep (schema v5), as host.status reads them; `state verify`
        # compares them with a real count.
        for status, count in conn.execute("SELECT status, n FROM run_count"):
            if count:
                runs[status] = count
        blob_count, blob_bytes = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM blob").fetchone()
        status = {
            "path": str(db_path),
            "page_size": _pragma(conn, "page_size"),
            "page_count": _pragma(conn, "page_count"),
            "freelist_count": _pragma(conn, "freelist_count"),
            "auto_vacuum": _AUTO_VACUUM_MODES.get(_pragma(conn, "auto_vacuum"), "unknown"),
            "schema_version": _pragma(conn, "user_version"),
            "tables": rows,
            "runs": runs,
            "blob_count": blob_count,
            "blob_bytes": blob_bytes,
        }
    status["db_bytes"] = _file_size(db_path)
    status["wal_bytes"] = _file_size(Path(f"{db_path}-wal"))
    return status


# --- verify -------------------------------------------------------------------

# Each check is (code, SQL yielding (run_id, detail)). Stable codes: they are
# shown to users and matched by scripts.
_CHECKS: tuple[tuple[str, str], ...] = (
    ("claim_on_inactive_run",
     """SELECT c.run_id, printf('run %s is claimed (generation %d) but is %s',
               c.run_id, c.generation, coalesce(r.status, 'missing'))
        FROM run_claim c LEFT JOIN run r ON r.run_id = c.run_id
        WHERE r.status IS NULL OR r.status NOT IN ('starting', 'running')"""),
    ("active_run_without_claim",
     """SELECT r.run_id, printf('run %s is %s but has no claim', r.run_id, r.status) FROM run r
        WHERE r.status IN ('starting', 'running')
          AND NOT EXISTS (SELECT 1 FROM run_claim c WHERE c.run_id = r.run_id)"""),
    ("terminal_run_without_event",
     f"""SELECT t.run_id, printf('run %s is %s but has no %s event', t.run_id, t.status, t.kind)
         FROM (SELECT run_id, status, CASE status WHEN 'done' THEN 'run_finished'
                      WHEN 'failed' THEN 'run_failed' ELSE 'run_cancelled' END AS kind
               FROM run WHERE status IN {TERMINAL_SQL}) t
         WHERE NOT EXISTS (SELECT 1 FROM run_event e WHERE e.run_id = t.run_id AND e.kind = t.kind)"""),
    ("attempt_of_missing_run",
     """SELECT a.run_id, printf('attempt %s belongs to missing run %s', a.attempt_id, a.run_id)
        FROM node_attempt a WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = a.run_id)"""),
    ("event_of_missing_run",
     """SELECT e.run_id, printf('%d events belong to missing run %s', count(*), e.run_id)
        FROM run_event e WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = e.run_id)
        GROUP BY e.run_id"""),
    ("effect_of_missing_run",
     """SELECT f.run_id, printf('effect %s belongs to missing run %s', f.effect_id, f.run_id)
        FROM effect f WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = f.run_id)"""),
    ("request_of_missing_run",
     """SELECT q.run_id, printf('interactive request %s belongs to missing run %s', q.request_id, q.run_id)
        FROM interactive_request q WHERE NOT EXISTS (SELECT 1 FROM run r WHERE r.run_id = q.run_id)"""),
    ("event_sequence_gap",
     """SELECT e.run_id, printf('run %s has %d events numbered %d..%d', e.run_id, count(*), min(e.seq), max(e.seq))
        FROM run_event e WHERE EXISTS (SELECT 1 FROM run r WHERE r.run_id = e.run_id)
        GROUP BY e.run_id HAVING min(e.seq) != 1 OR max(e.seq) != count(*)"""),
    ("output_without_success",
     # A failed attempt may keep its output (a shell's exit code and stderr, for routing).
     """SELECT run_id, printf('attempt %s has an output but is %s', attempt_id, status)
        FROM node_attempt WHERE (output_sha256 IS NOT NULL OR output_json IS NOT NULL)
        AND status NOT IN ('succeeded', 'failed')"""),
    ("value_stored_twice",
     """SELECT run_id, printf('attempt %s has its output both inline and as a blob', attempt_id)
        FROM node_attempt WHERE output_sha256 IS NOT NULL AND output_json IS NOT NULL"""),
    ("parked_without_reason",
     "SELECT run_id, printf('run %s is parked without a park_reason', run_id) FROM run "
     "WHERE status = 'parked' AND park_reason IS NULL"),
    # The counters host.status reads (run_count, kept by triggers since schema v5) against a real count.
    ("run_count_mismatch",
     """SELECT NULL, printf('run_count says %d runs are %s but the run table holds %d',
               coalesce(c.n, 0), s.status, coalesce(r.n, 0))
        FROM (SELECT status FROM run_count UNION SELECT status FROM run) s
        LEFT JOIN run_count c ON c.status = s.status
        LEFT JOIN (SELECT status, count(*) AS n FROM run GROUP BY status) r ON r.status = s.status
        WHERE coalesce(c.n, 0) != coalesce(r.n, 0)"""),
    ("run_count_trigger_missing",
     f"""SELECT NULL, printf('trigger %s is missing: run_count no longer follows the run table', t.name)
        FROM (SELECT value AS name FROM json_each('{json.dumps(sorted(RUN_COUNT_TRIGGERS))}')) t
        WHERE NOT EXISTS (SELECT 1 FROM sqlite_master m WHERE m.type = 'trigger' AND m.name = t.name)"""),
    ("two_accepted_submissions",
     """SELECT q.run_id, printf('interactive request %s has %d accepted submissions', s.request_id, count(*))
        FROM interactive_submission s LEFT JOIN interactive_request q ON q.request_id = s.request_id
        WHERE s.outcome = 'accepted' GROUP BY s.request_id HAVING count(*) > 1"""),
) + tuple(
    ("missing_blob",
     f"""SELECT t.run_id, printf('{table}.{column} of %s references missing blob %s', t.{key}, t.{column})
         FROM {table} t WHERE t.{column} IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM blob b WHERE b.sha256 = t.{column})""")
    for table, key, column in BLOB_REFERENCES
)


def _lease_violations(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    total, has_row_1 = conn.execute("SELECT count(*), count(*) FILTER (WHERE id = 1) FROM host_state").fetchone()
    found = []
    if not has_row_1:
        found.append({"code": "lease_row_missing", "detail": "host_state has no row with id 1"})
    if total > 1:
        found.append({"code": "lease_multiple_rows", "detail": f"host_state has {total} rows, expected exactly one"})
    return found


def _blob_violations(conn: sqlite3.Connection, limit: int) -> list[dict[str, Any]]:
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


def verify(db_path: Path, now: float, *, limit_per_code: int = 100) -> dict[str, Any]:
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

    with _snapshot(Path(db_path)) as conn:
        try:
            integrity = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        except sqlite3.DatabaseError as exc:
            integrity = [f"integrity_check failed: {_one_line(exc)}"]
        try:
            for item in _lease_violations(conn):
                add(item["code"], [item])
            lease = conn.execute("SELECT host_id, expires_at FROM host_state WHERE id = 1").fetchone()
        except sqlite3.DatabaseError as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"host_state: {_one_line(exc)}"}])
            lease = None
        for code, sql in _CHECKS:
            try:
                rows = conn.execute(f"{sql} LIMIT ?", (limit_per_code + 1,)).fetchall()
            except sqlite3.DatabaseError as exc:
                add("check_failed", [{"code": "check_failed", "detail": f"{code}: {_one_line(exc)}"}])
                continue
            add(code, [{"code": code, "detail": detail, **({"run_id": run_id} if run_id else {})}
                       for run_id, detail in rows])
        try:
            add("blob_digest_mismatch", _blob_violations(conn, limit_per_code))
        except sqlite3.DatabaseError as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"blob_digest_mismatch: {_one_line(exc)}"}])
    return {
        "ok": integrity == ["ok"] and not violations,
        "checked_at": now,
        "integrity": integrity,
        "violations": violations,
        "truncated": truncated,
        "lease_live": bool(lease and lease[0] is not None and (lease[1] or 0) > now),
    }


# --- backup -------------------------------------------------------------------


def _backup_target(destination: Any) -> Path:
    if not isinstance(destination, str) or not destination.strip():
        raise Rejected("backup destination must be a non-empty path")
    if "\x00" in destination:
        raise Rejected("backup destination contains a NUL byte")
    if not os.path.isabs(destination):
        raise Rejected(f"backup destination must be an absolute path, not {destination!r}")
    target = Path(destination)
    if not target.parent.is_dir():
        raise Rejected(f"backup destination directory {target.parent} does not exist")
    for path in (target, *(Path(f"{target}{suffix}") for suffix in _SIDE_FILES)):
        if os.path.lexists(path):
            raise Rejected(f"backup destination {path} already exists")
    return target


def _remove_partial(target: Path) -> None:
    for path in (target, *(Path(f"{target}{suffix}") for suffix in _SIDE_FILES)):
        with suppress(FileNotFoundError):
            path.unlink()


def _check_copy(target: Path, runs: int, schema_version: int) -> None:
    """Open the copy with a fresh connection: it must pass quick_check and hold what the source held."""
    conn = sqlite3.connect(str(target), isolation_level=None)
    try:
        check = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            raise StoreError(f"backup {target} failed its quick_check: {check[0]}")
        copied_runs = conn.execute("SELECT count(*) FROM run").fetchone()[0]
        if copied_runs != runs:
            raise StoreError(f"backup {target} holds {copied_runs} runs, the source held {runs}")
        if _pragma(conn, "user_version") != schema_version:
            raise StoreError(f"backup {target} has another schema version than its source")
    finally:
        conn.close()


def backup(db_path: Path, destination: str, progress: Callable[[int, int], None] | None = None, *,
           pages_per_step: int = 256) -> dict[str, Any]:
    """Copy the live database to `destination` with SQLite's online backup API, then verify the copy.

    `destination` must be an absolute path in an existing directory, and
    neither it nor its -journal/-wal/-shm may exist (Rejected otherwise). The
    file is created private (0600) before any page is written. The source is
    read inside one read transaction, so the copy is exactly the snapshot
    whose run count is recorded, however busy the writer is meanwhile.
    `progress(copied_pages, total_pages)` is called after each step. On any
    failure the partial copy is removed. Returns {destination, bytes, pages,
    runs, verified: True}.
    """
    target = _backup_target(destination)
    try:
        # O_EXCL closes the race with another creator; mode 0600 from the
        # first byte (umask can only narrow it), without touching the
        # process-wide umask that other threads rely on.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise Rejected(f"backup destination {target} already exists") from None
    except OSError as exc:
        raise Rejected(f"cannot create backup destination {target}: {exc.strerror}") from None
    try:
        os.fchmod(fd, 0o600)
        os.close(fd)

        def step(_status: int, remaining: int, total: int) -> None:
            if progress is not None:
                progress(total - remaining, total)

        with _snapshot(Path(db_path)) as source:
            runs = source.execute("SELECT count(*) FROM run").fetchone()[0]
            schema_version = _pragma(source, "user_version")
            copy = sqlite3.connect(str(target), isolation_level=None)
            try:
                source.backup(copy, pages=max(1, pages_per_step), progress=step)
                pages = _pragma(copy, "page_count")
            finally:
                copy.close()
        _check_copy(target, runs, schema_version)
        os.chmod(target, 0o600)
    except BaseException as exc:
        _remove_partial(target)
        if isinstance(exc, (sqlite3.Error, pw.DatabaseError)):
            raise StoreError(f"backup to {target} failed: {_one_line(exc)}") from exc
        raise
    return {"destination": str(target), "bytes": _file_size(target), "pages": pages, "runs": runs,
            "verified": True}


# --- prune plan ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """What pruning terminal runs finished before `before` would remove."""

    before: float
    run_ids: list[str]
    remaining: int  # eligible runs left for a later prune (beyond the limit)
    event_count: int
    event_bytes: int
    blob_shas: list[str]  # blobs that no surviving row references
    blob_bytes: int

    def summary(self, max_ids: int | None = None) -> dict[str, Any]:
        ids = self.run_ids if max_ids is None else self.run_ids[:max_ids]
        return {"before": self.before, "runs": ids, "run_count": len(self.run_ids), "remaining": self.remaining,
                "event_count": self.event_count, "blob_count": len(self.blob_shas), "bytes": self.blob_bytes,
                "bytes_freed_estimate": self.blob_bytes + self.event_bytes}


def check_prune_args(before: Any, limit: Any) -> tuple[float, int]:
    """Validate (before, limit); raises Rejected with a one-line reason."""
    if isinstance(before, bool) or not isinstance(before, (int, float)) or not math.isfinite(before):
        raise Rejected("prune needs `before` as a finite number of seconds since the epoch")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1_000_000:
        raise Rejected("prune limit must be an integer between 1 and 1000000")
    return float(before), limit


# Runs that may go: terminal, finished before the cutoff, no claim left on
# them (verify reports such a run; a worker might still write to it), and not
# the parent of a run that has not ended (its child may still report back).
# Read in finished_at order through its index: the unary + keeps SQLite from
# choosing the status index instead, which would read every finished run of
# the history to find the few old enough. The parents are looked up among the
# live runs (status index), never among all runs.
_ELIGIBLE = f"""
    FROM run r
    WHERE r.finished_at < ? AND +r.status IN {TERMINAL_SQL}
      AND NOT EXISTS (SELECT 1 FROM run_claim c WHERE c.run_id = r.run_id)
      AND r.run_id NOT IN (SELECT parent_run_id FROM run
                           WHERE status IN {LIVE_SQL} AND parent_run_id IS NOT NULL)"""

_DOOMED = "(SELECT value FROM json_each(?))"


def _blob_candidates() -> str:
    """A UNION of every blob reference of the doomed runs' rows (NULLs left out)."""
    return " UNION ".join(f"SELECT {column} FROM {table} WHERE run_id IN doomed AND {column} IS NOT NULL"
                          for table, _key, column in BLOB_REFERENCES)


def _referenced_elsewhere() -> str:
    """Conditions true when a row outside the doomed runs still references blob `b`. Each finds
    its rows through the column's digest-prefix index (schema v5), then compares the whole digest."""
    prefix = f"substr(b.sha256, 1, {BLOB_PREFIX_CHARS})"
    return " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} t WHERE t.{column} IS NOT NULL "
        f"AND substr(t.{column}, 1, {BLOB_PREFIX_CHARS}) = {prefix} "
        f"AND t.{column} = b.sha256 AND t.run_id NOT IN doomed)"
        for table, _key, column in BLOB_REFERENCES)


def plan_prune(conn: sqlite3.Connection, before: float, limit: int) -> PrunePlan:
    """The prune plan as seen by `conn`'s current transaction (a reader's snapshot or the writer's).

    Oldest finished first. A blob is freed only when no row outside the
    pruned runs references it, so a payload shared with a surviving run
    (the same input, a restarted run's snapshot) stays. What it reads grows
    with the runs pruned, not with the history kept.
    """
    run_ids = [row[0] for row in conn.execute(
        f"SELECT r.run_id {_ELIGIBLE} ORDER BY r.finished_at, r.run_id LIMIT ?", (before, limit))]
    # Counting every eligible run only matters when the limit may have cut the list.
    eligible = len(run_ids)
    if len(run_ids) == limit:
        eligible = conn.execute(f"SELECT count(*) {_ELIGIBLE}", (before,)).fetchone()[0]
    doomed = json.dumps(run_ids)
    event_count, event_bytes = conn.execute(
        f"SELECT count(*), coalesce(sum(length(payload)), 0) FROM run_event WHERE run_id IN {_DOOMED}",
        (doomed,)).fetchone()
    blobs: list[tuple[str, int]] = []
    if run_ids:
        blobs = conn.execute(
            f"""WITH doomed AS MATERIALIZED (SELECT value AS run_id FROM json_each(?))
                SELECT b.sha256, b.size FROM blob b
                WHERE b.sha256 IN ({_blob_candidates()}) AND NOT ({_referenced_elsewhere()})
                ORDER BY b.sha256""", (doomed,)).fetchall()
    return PrunePlan(before, run_ids, max(0, eligible - len(run_ids)), int(event_count), int(event_bytes),
                     [sha for sha, _size in blobs], sum(size for _sha, size in blobs))


def prune_plan(db_path: Path, before: float, limit: int = 1000) -> dict[str, Any]:
    """What `state.prune` with max_runs=`limit` would remove, read from one snapshot; changes nothing.

    Only terminal runs (done, failed, cancelled) with finished_at < before;
    never a queued, starting, running or parked run. Returns {before, runs:
    [ids], run_count, remaining, event_count, blob_count (blobs that would
    become unreferenced), bytes (their size), bytes_freed_estimate (blobs +
    event payloads)}.
    """
    before, limit = check_prune_args(before, limit)
    with _snapshot(Path(db_path)) as conn:
        return plan_prune(conn, before, limit).summary()
