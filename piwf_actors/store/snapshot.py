"""One read snapshot of the state database, and the small readings every maintenance report shares.

`read_snapshot` opens a read-only connection holding one read transaction,
so whatever is read through it describes a single consistent state even
while the writer keeps committing (SQLite's WAL; PostgreSQL's REPEATABLE
READ). `store/state_report.py` (status, verify), `store/backup.py` and
`store/prune_plan.py` read through it; none of them writes the state
database. Runs in the caller's thread (the gateway's, the CLI's, a test's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from piwf_actors.errors import NotFound, StoreError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.engines.base import ServerDatabase, engine_of, one_line
from piwf_actors.store.engines.registry import engine_for
from piwf_actors.store.reader import StoreReader


def as_location(database: DatabaseLocation | str) -> DatabaseLocation:
    """A server's database as it is; anything else as the path of a file."""
    return database if isinstance(database, ServerDatabase) else Path(database)


@contextmanager
def read_snapshot(database: DatabaseLocation) -> Iterator[Any]:
    """A read-only connection holding one read transaction (one snapshot).

    Raises NotFound for a SQLite file that is not there (opening it would
    create an empty one) and StoreError when the snapshot cannot be begun.
    The transaction is rolled back and the connection closed on exit.
    """
    if not engine_for(database).exists(database):
        raise NotFound("state database", str(database))
    reader = StoreReader(database)
    errors = reader.engine.driver_errors
    try:
        try:
            conn = reader.conn
            conn.execute(reader.engine.begin_read)
        except errors as exc:
            raise StoreError(f"cannot read {database}: {one_line(exc)}") from exc
        try:
            yield conn
        finally:
            with suppress(*errors):  # a dropped PostgreSQL connection has nothing to roll back
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
    finally:
        reader.close()


def table_names(conn: Any) -> list[str]:
    """The state database's tables, sorted (the engine's own left out)."""
    return engine_of(conn).table_names(conn)


def row_counts(conn: Any) -> dict[str, int]:
    """Exact rows per table, in the connection's current transaction."""
    return {name: int(conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in table_names(conn)}
