"""The PostgreSQL connection of the store: psycopg 3 under peewee, looking like sqlite3 to the commands.

Every command and query calls `conn.execute(sql, params)` with `?` placeholders and reads the
cursor with `fetchone`/`fetchall`/iteration/`description`/`rowcount`, and the batch reads
`conn.total_changes` and `conn.in_transaction`: the subset of `sqlite3.Connection` the store
uses. `PgConnection` offers exactly that over a psycopg connection, so the SQL is written once:

- placeholders: each SQL string is translated once (`?` → `%s`, a literal `%` → `%%`, string
  literals and quoted names left alone) and the translation is cached;
- `total_changes`: the rows changed by INSERT/UPDATE/DELETE statements on this connection, from
  their cursors' `rowcount` (what SQLite's counter tells the batch: did a command write at all);
- flags: Python booleans are sent as 0/1, the integers the schema stores them as on both engines.

`PiwfPostgresqlDatabase` is peewee's PostgresqlDatabase with the session settings of the store
(`open_session`, the one place they are set) and with the wrapper as its connection, so that
`db.execute_sql("… ? …")`, `db.atomic()` and peewee's DDL work as they do on SQLite.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator
from typing import Any

import peewee as pw

from piwf_actors.errors import DriverMissing
from piwf_actors.store.engines.base import Engine

try:  # the `postgresql` extra; this module is imported only where a PostgreSQL database is named
    import psycopg
    from psycopg.adapt import Dumper
    from psycopg.pq import TransactionStatus
except ImportError as exc:
    raise DriverMissing("PostgreSQL", "psycopg", "postgresql", str(exc)) from exc

_CHANGING = ("INSERT", "UPDATE", "DELETE", "WITH")
_DML = re.compile(r"\b(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> tuple[str, bool]:
    """(`sql` with psycopg placeholders, whether it may change rows). Quoted text stays as it is."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
            out.append("%%" if char == "%" else char)
        elif char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        elif char == "%":
            out.append("%%")
        else:
            out.append(char)
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    # A WITH … SELECT returns rows but changes none; a WITH … INSERT/UPDATE/DELETE changes them.
    changing = head in _CHANGING and (head != "WITH" or _DML.search(sql) is not None)
    return "".join(out), changing


class _FlagDumper(Dumper):
    """A Python bool as the integer 0/1: flags are INTEGER columns on both engines."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class PgCursor:
    """A psycopg cursor whose `execute` takes `?` placeholders (peewee's, outside the writer's batches)."""

    __slots__ = ("_conn", "_raw")

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._raw = conn.raw.cursor()

    def execute(self, sql: str, params: Any = ()) -> PgCursor:
        translated, changing = translate(sql)
        self._raw.execute(translated, params if params is not None else ())
        self._conn.round_trips.count += 1
        self._conn.round_trips.statements += 1
        if changing and self._raw.rowcount > 0:
            self._conn._total_changes += self._raw.rowcount
        return self

    def __iter__(self) -> Any:
        return iter(self._raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class RoundTrips:
    """How many times a database's connections waited for the server's answer (`count`: one per
    statement sent alone, per `executemany`, per queue of deferred statements sent together) and
    how many statements they sent (`statements`; an `executemany` counts once). Owned by the
    database object, so that it survives a reconnection; read by the writer for its stats
    (`Engine.round_trips`)."""

    __slots__ = ("count", "statements")

    def __init__(self) -> None:
        self.count = 0
        self.statements = 0


def _prepared_cache_busy(raw: psycopg.Connection[Any]) -> bool:
    """psycopg holds prepared-statement maintenance to send with the next statement (a DEALLOCATE
    ALL after a ROLLBACK). In a pipeline a failed statement before it would make the server skip it
    while psycopg counts it done, so such a queue is sent one statement at a time. (Reads psycopg's
    private cache; where it has none, a pipeline is never used.)"""
    prepared = getattr(raw, "_prepared", None)
    return prepared is None or bool(getattr(prepared, "_to_flush", True))


class _Rows:
    """The cursors of an `executemany` sent as one statement per row: their changed rows summed."""

    __slots__ = ("_cursors",)

    def __init__(self, cursors: list[Any]) -> None:
        self._cursors = cursors

    @property
    def rowcount(self) -> int:
        return sum(max(cursor.rowcount, 0) for cursor in self._cursors)


class DeferredCursor:
    """A statement of a deferring block (`PgConnection.pipelined`), sent when its result is first
    asked for (a row, `rowcount`, `description`, iteration) together with every statement queued
    before it: one round trip for all of them."""

    __slots__ = ("_conn", "sql", "params", "many", "changing", "raw")

    def __init__(self, conn: PgConnection, sql: str, params: Any, many: bool, changing: bool) -> None:
        self._conn = conn
        self.sql = sql
        self.params = params
        self.many = many
        self.changing = changing
        self.raw: Any = None  # the psycopg cursor, once sent

    def _ready(self) -> Any:
        if self.raw is None:
            self._conn.send_queued()
        return self.raw

    def fetchone(self) -> Any:
        return self._ready().fetchone()

    def fetchall(self) -> Any:
        return self._ready().fetchall()

    def fetchmany(self, size: int = 0) -> Any:
        return self._ready().fetchmany(size) if size else self._ready().fetchmany()

    @property
    def rowcount(self) -> int:
        return int(self._ready().rowcount)

    @property
    def description(self) -> Any:
        return self._ready().description

    def __iter__(self) -> Any:
        return iter(self._ready())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ready(), name)


class PgConnection:
    """The subset of `sqlite3.Connection` the store uses, over a psycopg connection in autocommit
    mode (transactions are opened with an explicit BEGIN, as on SQLite).

    Inside `pipelined()` (the writer's batches, store/batch.py) a statement is not sent when it is
    executed but queued, and the queue goes to the server when a result is first needed
    (`DeferredCursor`), when the rows changed so far are counted, or at the end of the block: one
    statement alone as usual, several in psycopg's pipeline mode, in one round trip either way.
    Statements whose answers nobody reads (inserts, updates without a read-back) so travel with the
    next one whose answer is read. A statement's error (a conflict, a violated constraint)
    therefore surfaces when its queue is sent, possibly in a later statement's call: the batch
    treats an error out of a deferring pass as one of the whole pass (store/batch.py).
    """

    def __init__(self, raw: psycopg.Connection[Any], engine: Engine, round_trips: RoundTrips | None = None) -> None:
        self.raw = raw
        self.engine = engine
        self.round_trips = round_trips if round_trips is not None else RoundTrips()
        self._total_changes = 0
        self._deferring = False
        self._queue: list[DeferredCursor] = []  # statements executed, not sent yet
        self._issued = 0  # changing statements executed (a change mark's position)
        #: The rows each changing statement of the deferring block changed, once sent, in order; the
        #: first is the `_changes_from`-th changing statement (`changed_since`).
        self._changes: list[int] = []
        self._changes_from = 0

    # --- statements ------------------------------------------------------------------------------

    def execute(self, sql: str, params: Any = ()) -> Any:
        translated, changing = translate(sql)
        params = params if params is not None else ()
        if self._deferring:
            return self._defer(translated, params, False, changing)
        cursor = self.raw.execute(translated, params)
        self.round_trips.count += 1
        self.round_trips.statements += 1
        self._issued += changing
        if changing and cursor.rowcount > 0:
            self._total_changes += cursor.rowcount
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        """One statement for many rows (psycopg sends them pipelined: one round trip, not one each)."""
        rows = list(rows)
        translated, changing = translate(sql)
        if self._deferring:
            return self._defer(translated, rows, True, changing)
        cursor = self.raw.cursor()
        cursor.executemany(translated, rows)
        self.round_trips.count += 1
        self.round_trips.statements += 1
        self._issued += changing
        if changing:
            self._total_changes += max(cursor.rowcount, 0)  # (psycopg sums rowcount over the rows)
        return cursor

    def _defer(self, sql: str, params: Any, many: bool, changing: bool) -> DeferredCursor:
        cursor = DeferredCursor(self, sql, params, many, changing)
        self._queue.append(cursor)
        self._issued += changing
        return cursor

    # --- deferring: the writer's batches -----------------------------------------------------------

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[None]:
        """Queue the statements of the block and send them when an answer is needed (see the class);
        leaving the block sends what is left (a COMMIT executed last travels with it). An error of a
        queued statement is raised where its queue is sent; after an error in the block, what is
        still queued is dropped (the batch rolls back). An inner block is the outer one."""
        if self._deferring:
            yield
            return
        self._deferring = True
        self._changes, self._changes_from = [], self._issued
        try:
            yield
            self.send_queued()
        finally:
            self._deferring = False
            self._queue = []

    def send_queued(self) -> None:
        """Send every queued statement and read their answers (one round trip)."""
        queue, self._queue = self._queue, []
        if not queue:
            return
        self.round_trips.count += 1
        self.round_trips.statements += len(queue)
        if (len(queue) == 1 and not queue[0].many) or _prepared_cache_busy(self.raw):
            # Alone (no pipeline to enter and leave), or psycopg has prepared-statement maintenance
            # to send first (a DEALLOCATE after a ROLLBACK): one by one, as any statement.
            self.round_trips.count += len(queue) - 1
            for item in queue:
                item.raw = self.raw.cursor()
                if item.many:
                    item.raw.executemany(item.sql, item.params)
                else:
                    item.raw.execute(item.sql, item.params)
        else:
            # In the pipeline without server-side prepared statements (prepare=False, and an
            # executemany as one statement per row): psycopg's cache of them must not learn of a
            # statement the server skipped because an earlier one failed (seen: "prepared statement
            # _pg3_84 does not exist" in a later batch).
            with self.raw.pipeline():  # leaving it syncs: every answer is read, the first error raised
                for item in queue:
                    if item.many:
                        item.raw = _Rows([self._send_unprepared(item.sql, row) for row in item.params])
                    else:
                        item.raw = self._send_unprepared(item.sql, item.params)
        for item in queue:
            if item.changing:
                changed = max(item.raw.rowcount, 0)
                self._total_changes += changed
                self._changes.append(changed)

    def _send_unprepared(self, sql: str, params: Any) -> Any:
        cursor = self.raw.cursor()
        cursor.execute(sql, params, prepare=False)
        return cursor

    # --- what the batch reads --------------------------------------------------------------------

    @property
    def total_changes(self) -> int:
        """Rows changed by INSERT/UPDATE/DELETE on this connection (sends the queue when it holds a
        changing statement: prefer `change_mark`/`changed_since` where only "did anything change"
        matters)."""
        if any(item.changing for item in self._queue):
            self.send_queued()
        return self._total_changes

    def change_mark(self) -> tuple[int, int]:
        """A mark to ask later whether rows changed since (never a round trip)."""
        return self._issued, self._total_changes

    def changed_since(self, mark: tuple[int, int]) -> bool:
        """Whether a statement executed since `mark` changed rows; sends the queue only if one was
        executed and is still queued."""
        issued, total = mark
        if self._issued == issued:
            return False  # no changing statement since the mark
        if not self._deferring:
            return self._total_changes != total
        if any(item.changing for item in self._queue):
            self.send_queued()
        return any(self._changes[issued - self._changes_from:])

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != TransactionStatus.IDLE

    @property
    def broken(self) -> bool:
        """The server or the network dropped the connection: it must be opened again."""
        return self.raw.closed or self.raw.info.transaction_status == TransactionStatus.UNKNOWN

    def cursor(self, *_args: Any, **_kwargs: Any) -> PgCursor:
        return PgCursor(self)

    def close(self) -> None:
        self.raw.close()

    def __getattr__(self, name: str) -> Any:  # peewee's adapter reads pgconn, autocommit, …
        return getattr(self.raw, name)


def open_session(raw: psycopg.Connection[Any], *, read_only: bool, lock_timeout_ms: int) -> None:
    """The session settings of a store connection (the one place they are set).

    - read-only readers: PostgreSQL itself refuses any write on the connection;
    - lock_timeout: like SQLite's busy_timeout, a statement waiting for a lock held elsewhere gives
      up after this long (classified as "database is locked") instead of hanging the writer;
    - UTC and a name in pg_stat_activity, for whoever looks at the server.
    """
    raw.adapters.register_dumper(bool, _FlagDumper)
    raw.execute("SET TIME ZONE 'UTC'")
    raw.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
    raw.execute(f"SET application_name = '{'piwf-reader' if read_only else 'piwf-writer'}'")
    if read_only:
        raw.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


class PiwfPostgresqlDatabase(pw.PostgresqlDatabase):
    """peewee's PostgreSQL database with `?` placeholders and the store's column types.

    Column types (what `schema.py`'s fields become): integers BIGINT (pids and sizes outgrow 32
    bits), times DOUBLE PRECISION (seconds since the epoch, as on SQLite), text
    `COLLATE "C"` (byte order, the order SQLite's BINARY collation gives: id prefixes and ordering
    agree on both engines whatever the database's locale), blobs BYTEA, flags INTEGER 0/1.
    """

    param = "?"
    field_types = {**pw.PostgresqlDatabase.field_types, "INT": "BIGINT", "BIGINT": "BIGINT",
                   "FLOAT": "DOUBLE PRECISION", "DOUBLE": "DOUBLE PRECISION", "BOOL": "INTEGER",
                   "TEXT": 'TEXT COLLATE "C"'}

    def __init__(self, url: str, engine: Engine, *, read_only: bool, lock_timeout_ms: int) -> None:
        super().__init__(url, prefer_psycopg3=True, autoconnect=True)
        self.engine = engine
        self._read_only = read_only
        self._lock_timeout_ms = lock_timeout_ms
        #: Round trips of this database's connections, over reconnections (the writer's stats).
        self.round_trips = RoundTrips()

    def _connect(self) -> PgConnection:  # type: ignore[override]
        raw = super()._connect()  # type: ignore[misc]  # peewee's stubs do not declare _connect
        try:
            open_session(raw, read_only=self._read_only, lock_timeout_ms=self._lock_timeout_ms)
        except BaseException:
            raw.close()
            raise
        return PgConnection(raw, self.engine, self.round_trips)
