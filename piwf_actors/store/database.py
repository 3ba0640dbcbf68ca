"""Opening the state database: validation, pragmas, schema version, on either engine.

The state lives in a SQLite file (a `Path`) or a PostgreSQL database (`paths.PostgresDatabase`):
a `DatabaseLocation`. This is the one place that sets pragmas (SQLite) and chooses the session
settings (PostgreSQL, through `store/pg.py`), and the one place that decides whether a database
may be opened at all. A state file is refused (never silently re-created) when it is empty, is
not SQLite, is SQLite but not ours, is corrupt, or carries a newer schema than this code knows;
a PostgreSQL database when it cannot be reached, holds tables that are not ours, or carries a
newer schema.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peewee as pw

from piwf_actors.errors import StoreRefused
from piwf_actors.paths import DatabaseLocation, PostgresDatabase, tighten_file
from piwf_actors.store.dialect import SQLITE, Dialect
from piwf_actors.store.migrations import LATEST_VERSION, migrate, migrate_postgresql

log = logging.getLogger(__name__)

#: 'piwf' in ASCII; stored in the SQLite header so a foreign database is recognised.
APPLICATION_ID = 0x70697766
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 5000
#: What a checkpointed WAL is cut back to. Above the ~4 MB the WAL reaches between two automatic
#: checkpoints (1000 pages), so under load it is recycled in place, not cut and regrown (measured
#: here: a 1 MiB limit cost ~4 µs per commit); the idle writer truncates it to zero.
WAL_SIZE_LIMIT = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoreOptions:
    synchronous: str = "FULL"  # an acknowledged commit survives power loss
    busy_timeout_ms: int = BUSY_TIMEOUT_MS


def _pragmas(options: StoreOptions, read_only: bool) -> list[tuple[str, object]]:
    pragmas: list[tuple[str, object]] = [
        ("busy_timeout", options.busy_timeout_ms),
        ("foreign_keys", 1),
        # Every long-lived connection fills its page cache up to this size: 16 MiB for the one
        # writer, 2 MiB for each reader (the host has several; they read small, indexed rows).
        ("cache_size", -2000 if read_only else -16000),
    ]
    if not read_only:
        # journal_size_limit: after a checkpoint recycles the WAL, shrink it back to
        # this size instead of keeping the largest it ever grew to (readers that hold
        # off checkpoints can grow it far beyond).
        pragmas += [("journal_mode", "wal"), ("synchronous", options.synchronous),
                    ("journal_size_limit", WAL_SIZE_LIMIT)]
    return pragmas


class SqliteConnection(sqlite3.Connection):
    """sqlite3's connection, naming its dialect like the PostgreSQL one (`store/dialect.py`)."""

    dialect = SQLITE


class PiwfSqliteDatabase(pw.SqliteDatabase):
    dialect = SQLITE


def connect(location: DatabaseLocation, options: StoreOptions = StoreOptions(), *, read_only: bool = False) -> Any:
    """A peewee database for `location`, pragmas or session settings applied on connect.

    SQLite writers take `BEGIN IMMEDIATE` so a transaction never upgrades from read to
    write halfway (which could fail with SQLITE_BUSY after work was done).
    Read-only connections open the file with `mode=ro` and can never write; on
    PostgreSQL the session is read-only (see `store/pg.py`).
    """
    if isinstance(location, PostgresDatabase):
        from piwf_actors.store.pg import PiwfPostgresqlDatabase  # psycopg only when it is used

        return PiwfPostgresqlDatabase(location.url, read_only=read_only, lock_timeout_ms=options.busy_timeout_ms)
    path = location
    if read_only:
        db = PiwfSqliteDatabase(
            f"file:{path}?mode=ro", uri=True, pragmas=_pragmas(options, True),
            check_same_thread=False, autoconnect=True, factory=SqliteConnection,
        )
    else:
        db = PiwfSqliteDatabase(
            str(path), pragmas=_pragmas(options, False), lock_type="IMMEDIATE",
            check_same_thread=False, autoconnect=True, factory=SqliteConnection,
        )
    return db


def dialect_of_db(db: Any) -> Dialect:
    return getattr(db, "dialect", SQLITE)


def _refuse(path: Path, reason: str) -> StoreRefused:
    return StoreRefused(str(path), reason)


def check_file(path: Path) -> bool:
    """Decide whether `path` may be opened. Returns True when it must be created.

    Raises StoreRefused for: a 0-byte file (a database that lost its data), a
    file without the SQLite header, a missing database next to a leftover
    WAL file.
    """
    try:
        size = os.lstat(path).st_size
    except FileNotFoundError:
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise _refuse(path, "the database is missing but its write-ahead log exists; restore it from a backup") from None
        return True
    if path.is_symlink() or not path.is_file():
        raise _refuse(path, "not a regular file")
    if size == 0:
        raise _refuse(path, "the file is empty (0 bytes) where a database existed; restore it from a backup or remove it to start fresh")
    with open(path, "rb") as handle:
        header = handle.read(len(SQLITE_MAGIC))
    if header != SQLITE_MAGIC:
        raise _refuse(path, "not a SQLite database (bad header)")
    return False


def open_store(location: DatabaseLocation, options: StoreOptions = StoreOptions()) -> Any:
    """Open (creating or migrating as needed) the read-write state database.

    Runs in the caller's thread; the returned database's connection belongs to
    that thread. Raises StoreRefused for anything that is not a healthy piwf
    database of a version this code can migrate.
    """
    if isinstance(location, PostgresDatabase):
        return _open_postgres(location, options)
    if not isinstance(location, Path):
        raise StoreRefused(str(location), "not a database location (a SQLite path or a postgresql:// URL)")
    path = location
    create = check_file(path)
    if not create:
        _inspect_read_only(path)
    old_umask = os.umask(0o077)
    try:
        if create:
            _initialise_file(path)
        db = connect(path, options)
        try:
            db.connect(reuse_if_open=True)
            _verify_and_migrate(db, path, create)
        except StoreRefused:
            db.close()
            raise
        except (pw.DatabaseError, sqlite3.DatabaseError) as exc:
            db.close()
            raise _refuse(path, f"cannot be read ({' '.join(str(exc).split())})") from exc
    finally:
        os.umask(old_umask)
    for suffix in ("", "-wal", "-shm"):
        tighten_file(Path(f"{path}{suffix}"))
    return db


def _inspect_read_only(path: Path) -> None:
    """Refuse a foreign or corrupt file before anything writes to it.

    Opening with our pragmas would already change a foreign database (it
    switches the journal to WAL), so identity and health are checked first
    through a read-only connection.
    """
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise _refuse(path, f"cannot be opened ({exc})") from exc
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        has_tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != APPLICATION_ID and (app_id != 0 or version != 0 or has_tables):
            raise _refuse(path, "a SQLite database that is not a piwf state database")
        check = conn.execute("PRAGMA quick_check").fetchall()
        if [row[0] for row in check] != ["ok"]:
            raise _refuse(path, f"corrupt ({check[0][0]})")
        if version > LATEST_VERSION:
            raise _refuse(path, f"schema version {version} is newer than this piwf ({LATEST_VERSION})")
    except sqlite3.DatabaseError as exc:
        raise _refuse(path, f"cannot be read ({' '.join(str(exc).split())})") from exc
    finally:
        conn.close()


def _initialise_file(path: Path) -> None:
    """Create the file with the settings that can only be chosen before the first table.

    auto_vacuum=INCREMENTAL lets state.prune hand pages back to the file
    system with `PRAGMA incremental_vacuum`.
    """
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = wal")
    finally:
        conn.close()


def _verify_and_migrate(db: pw.SqliteDatabase, path: Path, create: bool) -> None:
    conn = db.connection()
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if not create:
        if app_id != APPLICATION_ID:
            has_tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if app_id != 0 or version != 0 or has_tables:
                raise _refuse(path, "a SQLite database that is not a piwf state database")
            # An initialised-but-empty SQLite file (header only, no schema):
            # nothing can be lost by creating ours.
        check = conn.execute("PRAGMA quick_check").fetchall()
        if [row[0] for row in check] != ["ok"]:
            raise _refuse(path, f"corrupt ({check[0][0]})")
    if version > LATEST_VERSION:
        raise _refuse(path, f"schema version {version} is newer than this piwf ({LATEST_VERSION})")
    if version < LATEST_VERSION:
        migrate(db, version, APPLICATION_ID)


def _open_postgres(location: PostgresDatabase, options: StoreOptions) -> Any:
    """Connect, check that the database is empty or ours, then create or migrate the schema."""
    from piwf_actors.store import pg_schema
    from piwf_actors.store.dialect import POSTGRESQL

    db = connect(location, options)
    try:
        try:
            conn = db.connection()
        except POSTGRESQL.driver_errors as exc:
            raise StoreRefused(str(location), f"cannot connect ({' '.join(str(exc).split())[:300]})") from exc
        found = pg_schema.read_version(conn)
        if found is None:
            tables = pg_schema.user_tables(conn)
            if tables:
                raise StoreRefused(str(location), f"a PostgreSQL database that is not a piwf state database "
                                                  f"(it holds {len(tables)} table(s), no {pg_schema.VERSION_TABLE})")
        elif found[0] != pg_schema.APPLICATION:
            raise StoreRefused(str(location), f"its {pg_schema.VERSION_TABLE} names application {found[0]!r}")
        elif found[1] > LATEST_VERSION:
            raise StoreRefused(str(location), f"schema version {found[1]} is newer than this piwf ({LATEST_VERSION})")
        migrate_postgresql(db)
    except StoreRefused:
        db.close()
        raise
    except POSTGRESQL.driver_errors as exc:
        db.close()
        raise StoreRefused(str(location), f"cannot be read ({' '.join(str(exc).split())[:300]})") from exc
    return db


def schema_version(db: Any) -> int:
    if dialect_of_db(db).name == "postgresql":
        from piwf_actors.store import pg_schema

        found = pg_schema.read_version(db.connection())
        return 0 if found is None else found[1]
    return int(db.connection().execute("PRAGMA user_version").fetchone()[0])


def idle_checkpoint(db: Any, options: StoreOptions) -> bool:
    """Cut SQLite's write-ahead log back to nothing while the writer is idle; True when done (or
    nothing to do: PostgreSQL manages its own WAL).

    A TRUNCATE checkpoint needs no reader in the WAL; with the busy timeout at 0 it gives up at
    once instead of stalling the writer behind a long read (a backup), and the caller tries again
    on its next idle tick.
    """
    return truncate_wal(db, options) == "done"


#: SQLite's automatic checkpoint threshold (pages of WAL), its default, and the one used while the
#: disk is short of room (see `set_wal_autocheckpoint`).
WAL_AUTOCHECKPOINT_PAGES = 1000
WAL_AUTOCHECKPOINT_LOW_SPACE_PAGES = 64


def set_wal_autocheckpoint(db: Any, pages: int) -> None:
    """How many WAL pages a commit may leave before SQLite checkpoints them into the database file.

    While the disk is short of room the writer lowers it: pages then move into the database file
    a few at a time, while that file can still grow, and the WAL is recycled instead of growing
    into the last free bytes — a WAL that fills the disk leaves no room for the checkpoint that
    would give its space back."""
    if dialect_of_db(db).name == "sqlite":
        db.connection().execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def truncate_wal(db: Any, options: StoreOptions, *, busy_timeout_ms: int = 0) -> str:
    """A TRUNCATE checkpoint: copy the WAL's pages into the database file and cut the WAL to zero.

    Returns `done` (also on PostgreSQL, which manages its own WAL), `busy` (a reader still uses part
    of the WAL: waited at most `busy_timeout_ms`), `full` (no room to grow the database file for the
    pages; the WAL keeps them, nothing is lost) or `failed`.
    """
    if dialect_of_db(db).name != "sqlite":
        return "done"
    conn = db.connection()
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    except sqlite3.Error as exc:
        full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(exc)
        log.debug("WAL checkpoint failed: %s", exc)
        return "full" if full else "failed"
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute(f"PRAGMA busy_timeout = {int(options.busy_timeout_ms)}")
    return "busy" if busy else "done"
