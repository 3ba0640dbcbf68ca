"""One read snapshot of the state database, and the small readings every maintenance report shares.

`read_snapshot` opens a read-only connection holding one read transaction,
so whatever is read through it describes a single consistent state even
while the writer keeps committing (SQLite's WAL; PostgreSQL's REPEATABLE
READ). `store/state_report.py` (status, verify), `store/backup.py` and
`store/prune_plan.py` read through it; none of them writes the state
database. Runs in the caller's thread (the gateway's, the CLI's, a test's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piwf_actors.errors import NotFound, StoreError
from piwf_actors.paths import DatabaseLocation, PostgresDatabase
from piwf_actors.store.dialect import dialect_of
from piwf_actors.store.reader import StoreReader

if TYPE_CHECKING:  # for the type checker only: TypeIs is in typing from Python 3.13
    from typing_extensions import TypeIs


def one_line(exc: BaseException) -> str:
    """A driver error as one line of at most 500 characters (for receipts and reports)."""
    return " ".join(str(exc).split())[:500]


def as_location(database: DatabaseLocation | str) -> DatabaseLocation:
    """A PostgreSQL location as it is; anything else as the path of a SQLite file."""
    return database if isinstance(database, PostgresDatabase) else Path(database)


def is_postgres(database: DatabaseLocation) -> TypeIs[PostgresDatabase]:
    return isinstance(database, PostgresDatabase)


@contextmanager
def read_snapshot(database: DatabaseLocation) -> Iterator[Any]:
    """A read-only connection holding one read transaction (one snapshot).

    Raises NotFound for a SQLite file that is not there (opening it would
    create an empty one) and StoreError when the snapshot cannot be begun.
    The transaction is rolled back and the connection closed on exit.
    """
    if not is_postgres(database) and not Path(database).is_file():
        raise NotFound("state database", str(database))
    reader = StoreReader(database)
    errors = reader.dialect.driver_errors
    try:
        try:
            conn = reader.conn
            conn.execute(reader.dialect.begin_read)
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


def pragma(conn: Any, name: str) -> Any:
    """The first value of SQLite's `PRAGMA name`."""
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


def file_size(path: Path) -> int:
    """Bytes of a file; 0 when it is not there (a WAL file between checkpoints may not be)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


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
