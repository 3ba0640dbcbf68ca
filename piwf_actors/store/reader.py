"""Read-only access to the state database.

Any actor may read through its own `StoreReader`, with its own connection.
A reader can never write: on SQLite its connection is opened with `mode=ro`
(WAL lets readers run beside the writer); on PostgreSQL its session is
`READ ONLY`. A single read runs in its own transaction (SQLite's implicit
one, PostgreSQL's autocommit); `snapshot()` groups several reads into one
consistent view (a SQLite read transaction, a PostgreSQL REPEATABLE READ
transaction).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.database import connect
from piwf_actors.store.engines.base import Engine, StoreOptions, engine_of

log = logging.getLogger(__name__)


class StoreReader:
    def __init__(self, database: DatabaseLocation, options: StoreOptions = StoreOptions()) -> None:
        self._db = connect(database, options, read_only=True)
        self.location = database

    @property
    def conn(self) -> Any:
        """The reader's connection: a `sqlite3.Connection`, or `engines.pg_connection.PgConnection` (same calls).

        A PostgreSQL connection the server dropped (a restart, a failover) is opened again here,
        so a long-lived reader recovers with the database."""
        conn = self._db.connection()
        if getattr(conn, "broken", False):
            self._db.close()
            conn = self._db.connection()
        return conn

    @property
    def engine(self) -> Engine:
        return engine_of(self._db)

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run several queries against one consistent view (a read transaction)."""
        conn = self.conn
        if conn.in_transaction:
            yield
            return
        conn.execute(self.engine.begin_read)
        try:
            yield
        finally:
            try:
                conn.execute("COMMIT")
            except self.engine.driver_errors:
                # A connection that failed mid-read (PostgreSQL: the server went away) must not hide
                # the error that ended the reads; it is rolled back or gone either way.
                log.debug("ending a read snapshot failed", exc_info=True)
                with contextlib.suppress(*self.engine.driver_errors):
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        return self.conn.execute(sql, params).fetchone()

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()


#: Parameters per `IN (...)` list: below SQLite's default limit of host parameters.
IN_LIST_MAX = 500


def chunked(values: Iterable[Any], size: int = IN_LIST_MAX) -> Iterator[list[Any]]:
    """`values` in lists of at most `size`, for queries that name them in an `IN (...)` list."""
    chunk: list[Any] = []
    for value in values:
        chunk.append(value)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
