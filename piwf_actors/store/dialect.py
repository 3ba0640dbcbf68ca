"""What differs between the two engines the store runs on, in one place.

Write commands and queries are written once, in SQL both SQLite (≥ 3.35) and PostgreSQL accept:
`?` placeholders (the PostgreSQL connection translates them, see `store/pg.py`), `INSERT … ON
CONFLICT (…) DO NOTHING / DO UPDATE SET … = excluded.…` instead of `INSERT OR IGNORE/REPLACE`,
`RETURNING`, `CASE` instead of the scalar `max(a, b)`, an explicit `CAST(? AS BIGINT)` where a
parameter's type cannot be inferred, `rowid` (a real identity column on PostgreSQL), 0/1 integers
for flags. What cannot be written once is a `Dialect` attribute or method here:

- `begin_write` / `begin_read`: SQLite takes the write lock up front (BEGIN IMMEDIATE) so a
  transaction never fails halfway upgrading from read to write. PostgreSQL runs the writer's
  transactions SERIALIZABLE: one host's writes are already serialised by its writer actor, and
  between hosts every transaction then behaves as if the hosts took turns — the fences each
  command checks (epoch, claim token, generation, revision, lease expiry) see exactly what the
  turn before them left. A conflict between hosts aborts one transaction with a serialization
  failure, which the writer simply runs again (`retryable`).
- `json_values`: a list of text values passed as one JSON parameter (prune, run summaries).
- `classify`: a driver error → the typed storage error of `piwf_actors.errors`, or None when it is
  the command's own failure. SQLite's error codes are only in its messages for the Python driver
  of 3.11; PostgreSQL's are SQLSTATEs, and their messages (translated, changeable) are never read.
- `aborts_transaction`: after a failed statement PostgreSQL refuses everything until the
  transaction (or a savepoint) is rolled back; SQLite goes on.
- `skip_locked`: the clause a queue read ends with so that hosts claiming from one queue at the same
  time pass over each other's rows (`FOR UPDATE SKIP LOCKED` on PostgreSQL: the rows it returns are
  locked until the claim commits, rows another transaction locked are skipped, not waited for or
  conflicted on). SQLite needs none: its write transaction holds the whole file, so claims take turns.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Protocol

import peewee as pw

from piwf_actors import errors

try:  # the `postgresql` extra: absent where no PostgreSQL database is used
    import psycopg
except ImportError:  # pragma: no cover
    psycopg = None  # type: ignore[assignment]


class Connection(Protocol):
    """What the store's SQL runs on: `sqlite3.Connection` (`database.SqliteConnection`) or
    `store.pg.PgConnection`, which offers the same calls with `?` placeholders."""

    dialect: Dialect
    total_changes: int

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    @property
    def in_transaction(self) -> bool: ...


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    begin_write: str
    begin_read: str
    json_values: str
    aborts_transaction: bool
    skip_locked: str = ""

    @property
    def driver_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions a statement of this engine can raise (peewee wraps some of them)."""
        if self.name == "postgresql" and psycopg is not None:
            return (psycopg.Error, pw.DatabaseError)
        return (sqlite3.Error, pw.DatabaseError)

    def classify(self, exc: BaseException) -> errors.StoreError | None:
        """The storage failure behind `exc` (searched through its causes), or None."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            found = _classify_pg(current) if self.name == "postgresql" else _classify_sqlite(current)
            if found is not None:
                return found
            current = current.__cause__ or current.__context__
        return None

    def blob_slice(self, conn: Any, sha256: str, offset: int, length: int) -> tuple[int, bytes] | None:
        """(size, bytes [offset, offset + length)) of the stored blob `sha256`; None when there is none.
        Call it inside a read transaction. On SQLite the slice is read alone (incremental blob I/O), where
        `substr` would read the whole value first: a value read in chunks then costs its size once, not
        once per chunk."""
        if self.name == "sqlite" and hasattr(conn, "blobopen"):
            row = conn.execute("SELECT rowid, size FROM blob WHERE sha256 = ?", (sha256,)).fetchone()
            if row is None:
                return None
            rowid, size = int(row[0]), int(row[1])
            if offset >= size or length <= 0:
                return size, b""
            with conn.blobopen("blob", "data", rowid, readonly=True) as blob:
                blob.seek(offset)
                return size, blob.read(length)
        row = conn.execute("SELECT size, substr(data, ?, ?) FROM blob WHERE sha256 = ?",
                           (offset + 1, length, sha256)).fetchone()
        if row is None:
            return None
        return int(row[0]), b"" if row[1] is None else bytes(row[1])


def _classify_sqlite(exc: BaseException) -> errors.StoreError | None:
    # Python 3.11's sqlite3 exposes `sqlite_errorcode` on its exceptions; peewee's wrappers and
    # atomic()'s failed rollback ("cannot rollback - no transaction is active", whose real cause is
    # in __context__) do not, so the message is the fallback.
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    text = str(exc).lower()
    if primary == sqlite3.SQLITE_FULL or "disk is full" in text:
        return errors.DiskFull(_one_line(exc))
    if primary == sqlite3.SQLITE_READONLY or "readonly" in text or "read-only" in text:
        return errors.ReadOnlyDatabase(_one_line(exc))
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in text \
            or "database is busy" in text:
        return errors.StoreError(f"database is locked by another process: {_one_line(exc)}")
    return None


#: SQLSTATE classes and codes (https://www.postgresql.org/docs/current/errcodes-appendix.html).
_PG_RETRY = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_PG_BUSY = {"55P03", "57014"}  # lock_not_available, query_canceled (statement/lock timeout)
_PG_FULL = {"53100", "53200", "53300"}  # disk_full, out_of_memory, too_many_connections
_PG_READ_ONLY = {"25006"}  # read_only_sql_transaction (a standby server, default_transaction_read_only)


def _classify_pg(exc: BaseException) -> errors.StoreError | None:
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate or ""
    detail = f"{type(exc).__name__} (SQLSTATE {state or 'none'})"
    if state in _PG_RETRY:
        return errors.TransactionConflict(f"concurrent transaction conflict, retry: {detail}")
    if state in _PG_FULL:
        return errors.DiskFull(f"the database server is out of resources: {detail}")
    if state in _PG_READ_ONLY:
        return errors.ReadOnlyDatabase(f"the database refuses writes: {detail}")
    if state in _PG_BUSY:
        return errors.StoreError(f"database is locked by another session: {detail}")
    # No SQLSTATE, or class 08 (connection), 57 (operator intervention: the server shuts down),
    # 58 (system error), XX (internal): the connection or the server failed, not the command.
    if not state or state[:2] in ("08", "57", "58", "XX"):
        return errors.StoreError(f"the database connection failed: {detail}: {_one_line(exc)[:200]}")
    return None


SQLITE = Dialect(name="sqlite", begin_write="BEGIN IMMEDIATE", begin_read="BEGIN",
                 json_values="(SELECT value FROM json_each(?))", aborts_transaction=False)
POSTGRESQL = Dialect(name="postgresql", begin_write="BEGIN ISOLATION LEVEL SERIALIZABLE",
                     begin_read="BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                     json_values="(SELECT value FROM json_array_elements_text(CAST(? AS json)))",
                     aborts_transaction=True, skip_locked=" FOR UPDATE SKIP LOCKED")


def dialect_of(conn: Any) -> Dialect:
    """The dialect of a store connection (a plain sqlite3 connection, e.g. a test's, is SQLite)."""
    return getattr(conn, "dialect", SQLITE)


#: Every error a store connection of either engine can raise, for code that reads through a
#: `StoreReader` without knowing which engine is behind it.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, pw.DatabaseError) + (
    (psycopg.Error,) if psycopg is not None else ())
