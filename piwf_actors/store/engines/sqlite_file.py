"""The SQLite state file: opening it (or refusing to), its pragmas, and its write-ahead log.

This is the one place that sets pragmas, and the one place that decides whether a state file may be
opened at all. A file is refused (never silently re-created) when it is empty, is not SQLite, is
SQLite but not ours, is corrupt, or carries a newer schema than this code knows. Called through the
`SQLITE` engine (`sqlite.py`), in the caller's thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import peewee as pw

from piwf_actors.errors import StoreRefused
from piwf_actors.store.engines.base import DatabaseLocation, Engine, StoreOptions
from piwf_actors.store.engines.sqlite_history import migrate
from piwf_actors.store.migrations import LATEST_VERSION

log = logging.getLogger(__name__)

#: 'piwf' in ASCII; stored in the SQLite header so a foreign database is recognised.
APPLICATION_ID = 0x70697766
SQLITE_MAGIC = b"SQLite format 3\x00"
#: What a checkpointed WAL is cut back to. Above the ~4 MB the WAL reaches between two automatic
#: checkpoints (1000 pages), so under load it is recycled in place, not cut and regrown (measured
#: here: a 1 MiB limit cost ~4 µs per commit); the idle writer truncates it to zero.
WAL_SIZE_LIMIT = 4 * 1024 * 1024
#: SQLite's automatic checkpoint threshold (pages of WAL), its default, and the one used while the
#: disk is short of room (see `set_wal_autocheckpoint`).
WAL_AUTOCHECKPOINT_PAGES = 1000
WAL_AUTOCHECKPOINT_LOW_SPACE_PAGES = 64


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
    """sqlite3's connection, naming its engine like the PostgreSQL one (`engine_of`)."""

    engine: Engine


class PiwfSqliteDatabase(pw.SqliteDatabase):
    """peewee's SQLite database whose connections name their engine."""

    def __init__(self, database: str, engine: Engine, **kwargs: Any) -> None:
        self.engine = engine
        super().__init__(database, factory=SqliteConnection, **kwargs)

    def _connect(self) -> SqliteConnection:
        conn = super()._connect()  # type: ignore[misc]  # peewee names it only in its subclasses
        conn.engine = self.engine
        return conn


def connect(engine: Engine, location: DatabaseLocation, options: StoreOptions, *, read_only: bool) -> Any:
    """Writers take `BEGIN IMMEDIATE` so a transaction never upgrades from read to write halfway
    (which could fail with SQLITE_BUSY after work was done). Read-only connections open the file
    with `mode=ro` and can never write."""
    if read_only:
        return PiwfSqliteDatabase(
            f"file:{location}?mode=ro", engine, uri=True, pragmas=_pragmas(options, True),
            check_same_thread=False, autoconnect=True,
        )
    return PiwfSqliteDatabase(
        str(location), engine, pragmas=_pragmas(options, False), lock_type="IMMEDIATE",
        check_same_thread=False, autoconnect=True,
    )


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


def open_store(engine: Engine, location: DatabaseLocation, options: StoreOptions) -> Any:
    """Open (creating or migrating as needed) the read-write state file; the caller's thread owns
    its connection. The file is created private (umask 077)."""
    path = Path(str(location))
    create = check_file(path)
    if not create:
        _inspect_read_only(path)
    old_umask = os.umask(0o077)
    try:
        if create:
            _initialise_file(path)
        db = connect(engine, path, options, read_only=False)
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


def set_wal_autocheckpoint(db: Any, pages: int) -> None:
    """How many WAL pages a commit may leave before SQLite checkpoints them into the database file.

    While the disk is short of room the writer lowers it: pages then move into the database file
    a few at a time, while that file can still grow, and the WAL is recycled instead of growing
    into the last free bytes — a WAL that fills the disk leaves no room for the checkpoint that
    would give its space back."""
    db.connection().execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def truncate_wal(db: Any, options: StoreOptions, *, busy_timeout_ms: int = 0) -> str:
    """A TRUNCATE checkpoint: copy the WAL's pages into the database file and cut the WAL to zero.

    A TRUNCATE checkpoint needs no reader in the WAL; with the busy timeout at 0 it gives up at
    once instead of stalling the writer behind a long read (a backup), and the caller tries again
    on its next idle tick. Returns `done`, `busy`, `full` or `failed` (`Engine.truncate_wal`).
    """
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
