"""`state.backup` for SQLite: an online copy of the live state file, verified before it is reported.

The copy is made with SQLite's backup API from one read snapshot
(`store/snapshot.py`), so it is exactly the state whose run count is
recorded, however busy the writer is meanwhile. The only file written is the
new copy, never the state database; the host records the receipt afterwards
with the `state.backup` command (`store/commands/state.py`). Runs in the
caller's thread (the gateway's); a copy of a large file takes a while.

A PostgreSQL state is refused with a pointer to `pg_dump`, the tool made for
a consistent copy of a live PostgreSQL database (and `pg_restore` for the
way back), which a copy of our own would only imitate.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import peewee as pw

from piwf_actors.errors import Rejected, StoreError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.snapshot import file_size, is_postgres, one_line, pragma, read_snapshot

_SIDE_FILES = ("-journal", "-wal", "-shm")


def _backup_target(destination: Any) -> Path:
    if not isinstance(destination, str) or not destination.strip():
        raise Rejected("backup destination must be a non-empty path")
    if "\x00" in destination:
        raise Rejected("backup destination contains a NUL byte")
    if not os.path.isabs(destination):
        raise Rejected(f"backup destination must be an absolute path, not {destination!r}")
    target = Path(destination)
    try:
        usable = target.parent.is_dir()
    except OSError as exc:  # a path the system refuses: a name too long, a loop of links
        raise Rejected(f"backup destination directory {target.parent} cannot be used: {exc.strerror}") from None
    if not usable:
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
        if pragma(conn, "user_version") != schema_version:
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
    if is_postgres(database):
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

        with read_snapshot(db_path) as source:
            runs = source.execute("SELECT count(*) FROM run").fetchone()[0]
            schema_version = pragma(source, "user_version")
            copy = sqlite3.connect(str(target), isolation_level=None)
            try:
                source.backup(copy, pages=max(1, pages_per_step), progress=step)
                pages = pragma(copy, "page_count")
            finally:
                copy.close()
        _check_copy(target, runs, schema_version)
        os.chmod(target, 0o600)
    except BaseException as exc:
        _remove_partial(target)
        if isinstance(exc, (sqlite3.Error, pw.DatabaseError)):
            raise StoreError(f"backup to {target} failed: {one_line(exc)}") from exc
        raise
    return {"destination": str(target), "bytes": file_size(target), "pages": pages, "runs": runs,
            "verified": True}
