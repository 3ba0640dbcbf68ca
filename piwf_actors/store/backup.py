"""`state.backup`: an online copy of the live state, verified before it is reported.

The copy is made by the engine (SQLite's backup API: `Engine.copy_snapshot`) from
one read snapshot (`store/snapshot.py`), so it is exactly the state whose run
count is recorded, however busy the writer is meanwhile. The only file written
is the new copy, never the state database; the host records the receipt
afterwards with the `state.backup` command (`store/commands/state.py`). Runs in
the caller's thread (the gateway's); a copy of a large file takes a while.

An engine whose database is better copied by its own tool refuses with a
pointer to it (`Engine.backup_refusal`: PostgreSQL's `pg_dump`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from piwf_actors.errors import Rejected, StoreError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.engines.base import one_line
from piwf_actors.store.engines.registry import engine_for
from piwf_actors.store.snapshot import as_location, read_snapshot


def _backup_target(destination: Any, side_files: tuple[str, ...]) -> Path:
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
    for path in (target, *(Path(f"{target}{suffix}") for suffix in side_files)):
        if os.path.lexists(path):
            raise Rejected(f"backup destination {path} already exists")
    return target


def _remove_partial(target: Path, side_files: tuple[str, ...]) -> None:
    for path in (target, *(Path(f"{target}{suffix}") for suffix in side_files)):
        with suppress(FileNotFoundError):
            path.unlink()


def backup(database: DatabaseLocation, destination: str, progress: Callable[[int, int], None] | None = None, *,
           pages_per_step: int = 256) -> dict[str, Any]:
    """Copy the live database to `destination` (the engine's copy: SQLite's online backup API), then
    verify the copy.

    `destination` must be an absolute path in an existing directory, and
    neither it nor its -journal/-wal/-shm may exist (Rejected otherwise). The
    file is created private (0600) before any page is written. The source is
    read inside one read transaction, so the copy is exactly the snapshot
    whose run count is recorded, however busy the writer is meanwhile.
    `progress(copied_pages, total_pages)` is called after each step. On any
    failure the partial copy is removed. Returns {destination, bytes, pages,
    runs, verified: True}. An engine that leaves copies to its own tool is
    Rejected with its pointer to it.
    """
    database = as_location(database)
    engine = engine_for(database)
    if engine.backup_refusal is not None:
        raise Rejected(engine.backup_refusal)
    target = _backup_target(destination, engine.side_files)
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

        def step(copied: int, total: int) -> None:
            if progress is not None:
                progress(copied, total)

        with read_snapshot(database) as source:
            runs = source.execute("SELECT count(*) FROM run").fetchone()[0]
            schema_version = engine.schema_version(source)
            pages = engine.copy_snapshot(source, target, step, pages_per_step)
        engine.check_copy(target, runs, schema_version)
        os.chmod(target, 0o600)
    except BaseException as exc:
        _remove_partial(target, engine.side_files)
        if isinstance(exc, engine.driver_errors):
            raise StoreError(f"backup to {target} failed: {one_line(exc)}") from exc
        raise
    return {"destination": str(target), "bytes": os.stat(target).st_size, "pages": pages, "runs": runs,
            "verified": True}
