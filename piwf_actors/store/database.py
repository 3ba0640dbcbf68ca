"""Opening the state database: validation, pragmas, schema version.

This is the one place that sets pragmas and the one place that decides
whether a file on disk may be opened at all. A state file is refused (never
silently re-created) when it is empty, is not SQLite, is SQLite but not ours,
is corrupt, or carries a newer schema than this code knows.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import peewee as pw

from piwf_actors.errors import StoreRefused
from piwf_actors.paths import tighten_file
from piwf_actors.store.migrations import LATEST_VERSION, migrate

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


def connect(path: Path, options: StoreOptions = StoreOptions(), *, read_only: bool = False) -> pw.SqliteDatabase:
    """A peewee database for `path`, pragmas applied on connect.

    Writers take `BEGIN IMMEDIATE` so a transaction never upgrades from read to
    write halfway (which could fail with SQLITE_BUSY after work was done).
    Read-only connections open the file with `mode=ro` and can never write.
    """
    if read_only:
        db = pw.SqliteDatabase(
            f"file:{path}?mode=ro", uri=True, pragmas=_pragmas(options, True),
            check_same_thread=False, autoconnect=True,
        )
    else:
        db = pw.SqliteDatabase(
            str(path), pragmas=_pragmas(options, False), lock_type="IMMEDIATE",
            check_same_thread=False, autoconnect=True,
        )
    return db


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


def open_store(path: Path, options: StoreOptions = StoreOptions()) -> pw.SqliteDatabase:
    """Open (creating or migrating as needed) the read-write state database.

    Runs in the caller's thread; the returned database's connection belongs to
    that thread. Raises StoreRefused for anything that is not a healthy piwf
    database of a version this code can migrate.
    """
    if not isinstance(path, Path):
        raise StoreRefused(str(path), "this build stores state in SQLite only")
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


def schema_version(db: pw.SqliteDatabase) -> int:
    return int(db.connection().execute("PRAGMA user_version").fetchone()[0])
