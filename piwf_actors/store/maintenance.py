"""State maintenance, read side: status, verify, backup and the prune plan, on either engine.

Everything here reads through a read-only connection inside one read
transaction, so each answer describes a single consistent snapshot even while
the writer keeps committing (SQLite's WAL; PostgreSQL's REPEATABLE READ). The
only write is `backup`'s new file, which is never the state database.
Deleting pruned runs is the writer's job (`state.prune` in
`store/commands/maintenance.py`); it computes its plan with the same
`plan_prune` used here, inside its own transaction.

What PostgreSQL does its own way: `state_status` reports the database's size
(no pages, no WAL file of ours); `verify` checks the schema's presence and
version where SQLite runs `PRAGMA integrity_check` (page-level checks are the
server's: data checksums, `pg_amcheck`); `backup` is refused with a pointer
to `pg_dump`, the tool made for a consistent copy of a live PostgreSQL
database (and `pg_restore` for the way back), which a copy of our own would
only imitate.
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
from piwf_actors.paths import DatabaseLocation, PostgresDatabase
from piwf_actors.statuses import LIVE_SQL, RUN_STATUSES, TERMINAL_SQL
from piwf_actors.store.dialect import dialect_of
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


def _location(database: DatabaseLocation | str) -> DatabaseLocation:
    return database if isinstance(database, PostgresDatabase) else Path(database)


def _is_postgres(database: DatabaseLocation) -> bool:
    return isinstance(database, PostgresDatabase)


@contextmanager
def _snapshot(database: DatabaseLocation) -> Iterator[Any]:
    """A read-only connection holding one read transaction (one snapshot)."""
    if not _is_postgres(database) and not Path(database).is_file():
        raise NotFound("state database", str(database))
    reader = StoreReader(database)
    errors = reader.dialect.driver_errors
    try:
        try:
            conn = reader.conn
            conn.execute(reader.dialect.begin_read)
        except errors as exc:
            raise StoreError(f"cannot read {database}: {_one_line(exc)}") from exc
        try:
            yield conn
        finally:
            with suppress(*errors):  # a dropped PostgreSQL connection has nothing to roll back
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
    finally:
        reader.close()


def _pragma(conn: Any, name: str) -> Any:
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


# --- status -------------------------------------------------------------------


def table_names(conn: Any) -> list[str]:
    """The state database's tables, sorted (SQLite's own and PostgreSQL's version table left out)."""
    if dialect_of(conn).name == "postgresql":
        from piwf_actors.store import pg_schema

        return [name for name in pg_schema.user_tables(conn) if name != pg_schema.VERSION_TABLE]
    return [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]


def row_counts(conn: Any) -> dict[str, int]:
    """Exact rows per table, in the connection's current transaction."""
    return {name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in table_names(conn)}


def state_status(database: DatabaseLocation) -> dict[str, Any]:
    """Sizes, page accounting, schema version and row counts of the state database.

    Returns {path, db_bytes, wal_bytes, page_size, page_count, freelist_count,
    auto_vacuum, schema_version, tables: {table: rows}, runs: {status: count},
    blob_count, blob_bytes}. `runs` always has every known status (0 if none) and
    comes from the `run_count` counters. `tables` are exact row counts: each costs
    a walk of the table's smallest b-tree, which is what this maintenance command
    is for (host.status never does it). On PostgreSQL, `engine` is "postgresql",
    `db_bytes` is the database's size on the server, and the page and WAL fields
    are None (PostgreSQL's own).
    """
    database = _location(database)
    if _is_postgres(database):
        return _pg_state_status(database)
    db_path = Path(database)
    with _snapshot(db_path) as conn:
        rows = row_counts(conn)
        # The counters the triggers keep (schema v5), as host.status reads them; `state verify`
        # compares them with a real count.
        runs = _run_counters(conn)
        blob_count, blob_bytes = _blob_totals(conn)
        status = {
            "engine": "sqlite",
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


def _pg_state_status(database: PostgresDatabase) -> dict[str, Any]:
    from piwf_actors.store import pg_schema

    with _snapshot(database) as conn:
        version = pg_schema.read_version(conn)
        blob_count, blob_bytes = _blob_totals(conn)
        return {
            "engine": "postgresql", "path": str(database),
            "db_bytes": int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]),
            "wal_bytes": None, "page_size": None, "page_count": None, "freelist_count": None, "auto_vacuum": None,
            "schema_version": 0 if version is None else version[1],
            "tables": row_counts(conn), "runs": _run_counters(conn),
            "blob_count": blob_count, "blob_bytes": blob_bytes,
        }


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
    if dialect_of(conn).name == "postgresql":
        from piwf_actors.store import pg_schema

        present = pg_schema.trigger_names(conn)
    else:
        present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    return [{"code": "run_count_trigger_missing",
             "detail": f"trigger {name} is missing: run_count no longer follows the run table"}
            for name in sorted(RUN_COUNT_TRIGGERS) if name not in present]


def _integrity(conn: Any) -> list[str]:
    """SQLite's `PRAGMA integrity_check` lines; on PostgreSQL, whether the schema is there at the
    version this code expects (the pages themselves are the server's to check)."""
    if dialect_of(conn).name != "postgresql":
        return [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
    from piwf_actors.store import pg_schema
    from piwf_actors.store.migrations import LATEST_VERSION

    found = pg_schema.read_version(conn)
    if found is None or found[0] != pg_schema.APPLICATION:
        return [f"no {pg_schema.VERSION_TABLE} row for {pg_schema.APPLICATION}"]
    missing = sorted({model._meta.table_name for model in _models()} - set(pg_schema.user_tables(conn)))
    lines = [f"missing table {name}" for name in missing]
    if found[1] != LATEST_VERSION:
        lines.append(f"schema version {found[1]}, expected {LATEST_VERSION}")
    return lines or ["ok"]


def _models() -> tuple[Any, ...]:
    from piwf_actors.store.schema import ALL_MODELS

    return ALL_MODELS


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
    dialect = dialect_of(conn)
    if dialect.aborts_transaction:
        conn.execute("ROLLBACK")
        conn.execute(dialect.begin_read)


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

    database = _location(database)
    with _snapshot(database) as conn:
        driver_errors = dialect_of(conn).driver_errors
        try:
            integrity = _integrity(conn)
        except driver_errors as exc:
            integrity = [f"integrity_check failed: {_one_line(exc)}"]
            _recover(conn)
        try:
            for item in _lease_violations(conn):
                add(item["code"], [item])
            lease = conn.execute("SELECT host_id, expires_at FROM host_state WHERE id = 1").fetchone()
        except driver_errors as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"host_state: {_one_line(exc)}"}])
            _recover(conn)
            lease = None
        for code, sql in _CHECKS:
            try:
                rows = conn.execute(f"{sql} LIMIT ?", (limit_per_code + 1,)).fetchall()
            except driver_errors as exc:
                add("check_failed", [{"code": "check_failed", "detail": f"{code}: {_one_line(exc)}"}])
                _recover(conn)
                continue
            add(code, [{"code": code, "detail": detail, **({"run_id": run_id} if run_id else {})}
                       for run_id, detail in rows])
        try:
            add("run_count_trigger_missing", _missing_triggers(conn))
        except driver_errors as exc:
            add("check_failed", [{"code": "check_failed", "detail": f"run_count_trigger_missing: {_one_line(exc)}"}])
            _recover(conn)
        try:
            add("blob_digest_mismatch", _blob_violations(conn, limit_per_code))
        except driver_errors as exc:
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


#: What `state.backup` answers for a PostgreSQL state (one line; see the module docstring for why).
PG_BACKUP_REFUSAL = ("state.backup copies SQLite files; back up a PostgreSQL state with pg_dump "
                     "(pg_dump --format=custom --file=piwf.dump 'URL'; restore with pg_restore)")


def backup(database: DatabaseLocation, destination: str, progress: Callable[[int, int], None] | None = None, *,
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
    if _is_postgres(database):
        raise Rejected(PG_BACKUP_REFUSAL)
    db_path = Path(database)
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

        with _snapshot(db_path) as source:
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
# the history to find the few old enough (PostgreSQL has no unary + for text,
# and its planner weighs both indexes by their statistics). The parents are
# looked up among the live runs (status index), never among all runs.
def _eligible(conn: Any) -> str:
    """Terminal runs finished before `?`, except those something still needs: a claim, a live child
    (a restart's parent), or a resource that owns it (`resource_run`): its manager's `ensure` finds
    the run by an id derived from the resource and its key, so a pruned run would be started again,
    effects and all. A resource's runs are pruned once it is deleted (its resource_run rows go with it)."""
    unindexed = "+" if dialect_of(conn).name == "sqlite" else ""
    return f"""
    FROM run r
    WHERE r.finished_at < ? AND {unindexed}r.status IN {TERMINAL_SQL}
      AND NOT EXISTS (SELECT 1 FROM run_claim c WHERE c.run_id = r.run_id)
      AND NOT EXISTS (SELECT 1 FROM resource_run o WHERE o.run_id = r.run_id)
      AND r.run_id NOT IN (SELECT parent_run_id FROM run
                           WHERE status IN {LIVE_SQL} AND parent_run_id IS NOT NULL)"""


def _blob_candidates() -> str:
    """A UNION of every blob reference of the doomed runs' rows (NULLs left out)."""
    return " UNION ".join(f"SELECT {column} FROM {table} WHERE run_id IN (SELECT run_id FROM doomed) "
                          f"AND {column} IS NOT NULL"
                          for table, _key, column in BLOB_REFERENCES)


def _referenced_elsewhere() -> str:
    """Conditions true when a row outside the doomed runs still references blob `b`. Each finds
    its rows through the column's digest-prefix index (schema v5), then compares the whole digest."""
    prefix = f"substr(b.sha256, 1, {BLOB_PREFIX_CHARS})"
    return " OR ".join(
        f"EXISTS (SELECT 1 FROM {table} t WHERE t.{column} IS NOT NULL "
        f"AND substr(t.{column}, 1, {BLOB_PREFIX_CHARS}) = {prefix} "
        f"AND t.{column} = b.sha256 AND t.run_id NOT IN (SELECT run_id FROM doomed))"
        for table, _key, column in BLOB_REFERENCES)


def plan_prune(conn: Any, before: float, limit: int) -> PrunePlan:
    """The prune plan as seen by `conn`'s current transaction (a reader's snapshot or the writer's).

    Oldest finished first. A blob is freed only when no row outside the
    pruned runs references it, so a payload shared with a surviving run
    (the same input, a restarted run's snapshot) stays. What it reads grows
    with the runs pruned, not with the history kept.
    """
    eligible_sql = _eligible(conn)
    json_values = dialect_of(conn).json_values
    run_ids = [row[0] for row in conn.execute(
        f"SELECT r.run_id {eligible_sql} ORDER BY r.finished_at, r.run_id LIMIT ?", (before, limit))]
    # Counting every eligible run only matters when the limit may have cut the list.
    eligible = len(run_ids)
    if len(run_ids) == limit:
        eligible = int(conn.execute(f"SELECT count(*) {eligible_sql}", (before,)).fetchone()[0])
    doomed = json.dumps(run_ids)
    event_count, event_bytes = conn.execute(
        f"SELECT count(*), coalesce(sum(length(payload)), 0) FROM run_event WHERE run_id IN {json_values}",
        (doomed,)).fetchone()
    blobs: list[tuple[str, int]] = []
    if run_ids:
        blobs = conn.execute(
            f"""WITH doomed AS MATERIALIZED (SELECT value AS run_id FROM {json_values} AS v)
                SELECT b.sha256, b.size FROM blob b
                WHERE b.sha256 IN ({_blob_candidates()}) AND NOT ({_referenced_elsewhere()})
                ORDER BY b.sha256""", (doomed,)).fetchall()
    return PrunePlan(before, run_ids, max(0, eligible - len(run_ids)), int(event_count), int(event_bytes),
                     [sha for sha, _size in blobs], sum(int(size) for _sha, size in blobs))


def prune_plan(database: DatabaseLocation, before: float, limit: int = 1000) -> dict[str, Any]:
    """What `state.prune` with max_runs=`limit` would remove, read from one snapshot; changes nothing.

    Only terminal runs (done, failed, cancelled) with finished_at < before;
    never a queued, starting, running or parked run. Returns {before, runs:
    [ids], run_count, remaining, event_count, blob_count (blobs that would
    become unreferenced), bytes (their size), bytes_freed_estimate (blobs +
    event payloads)}.
    """
    before, limit = check_prune_args(before, limit)
    with _snapshot(_location(database)) as conn:
        return plan_prune(conn, before, limit).summary()
