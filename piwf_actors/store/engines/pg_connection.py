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

import functools
import re
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
    """A psycopg cursor whose `execute` takes `?` placeholders."""

    __slots__ = ("_conn", "_raw")

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._raw = conn.raw.cursor()

    def execute(self, sql: str, params: Any = ()) -> PgCursor:
        translated, changing = translate(sql)
        self._raw.execute(translated, params if params is not None else ())
        if changing and self._raw.rowcount > 0:
            self._conn.total_changes += self._raw.rowcount
        return self

    def __iter__(self) -> Any:
        return iter(self._raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class PgConnection:
    """The subset of `sqlite3.Connection` the store uses, over a psycopg connection in autocommit
    mode (transactions are opened with an explicit BEGIN, as on SQLite)."""

    def __init__(self, raw: psycopg.Connection[Any], engine: Engine) -> None:
        self.raw = raw
        self.engine = engine
        self.total_changes = 0

    def execute(self, sql: str, params: Any = ()) -> Any:
        translated, changing = translate(sql)
        cursor = self.raw.execute(translated, params if params is not None else ())
        if changing and cursor.rowcount > 0:
            self.total_changes += cursor.rowcount
        return cursor

    def executemany(self, sql: str, rows: Any) -> Any:
        """One statement for many rows (psycopg sends them pipelined: one round trip, not one each)."""
        rows = list(rows)
        translated, changing = translate(sql)
        cursor = self.raw.cursor()
        cursor.executemany(translated, rows)
        if changing:
            self.total_changes += max(cursor.rowcount, 0)  # (psycopg sums rowcount over the rows)
        return cursor

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

    def _connect(self) -> PgConnection:  # type: ignore[override]
        raw = super()._connect()  # type: ignore[misc]  # peewee's stubs do not declare _connect
        try:
            open_session(raw, read_only=self._read_only, lock_timeout_ms=self._lock_timeout_ms)
        except BaseException:
            raw.close()
            raise
        return PgConnection(raw, self.engine)
