"""`DiskRoom`: the writer's watch over the room its database has on disk (not an actor: the writer owns
it and calls it from its own thread).

A full disk stops writes, never the host. Once a batch fails with `disk_full` the writer says so (one
log line; `state()` goes on the board as `writer.disk_full`, which `state.status` and `host.status`
show) and, before it writes again, checkpoints and truncates the SQLite WAL: until that truncation
succeeds, batches are refused without being tried (`disk_full`; workers and clients resend), so space
freed on the disk goes to the runs instead of back into the log. (A WAL that grew into the freed
space filled a small disk again for good: the checkpoint that would give its space back needs room
to grow the database file.) The truncation is tried before each batch and on every idle tick.

And while the database's disk has less than LOW_SPACE_BYTES free (checked at start, every idle tick
and after a full disk), SQLite checkpoints every few pages (`Engine.wal_checkpoint_pages`), so the
WAL never takes the last free bytes in the first place.

Only an engine that `watches_disk` (SQLite) is watched: PostgreSQL keeps its own WAL, and there a
full disk is only reported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.database import StoreOptions
from piwf_actors.store.engines.registry import engine_for

log = logging.getLogger("piwf_actors.actors.writer")

#: How long a truncation tried while the disk is full waits for readers to leave the WAL (writes are
#: stalled anyway; readers hold it for milliseconds).
DISK_FULL_CHECKPOINT_WAIT_MS = 250
#: Below this much free space on the database's disk the WAL is checkpointed every few pages (twice
#: what it can reach between two checkpoints otherwise: 1000 pages of 4 KiB).
LOW_SPACE_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class DiskFullState:
    """Writes fail because the disk is full: since when, why, and how many batches were refused."""

    since: float
    detail: str
    refused_batches: int = 0


class DiskRoom:
    def __init__(self, database: DatabaseLocation, options: StoreOptions, db: Callable[[], Any]) -> None:
        """`db` gives the writer's open peewee database (called in the writer's thread only)."""
        self._database = database
        self._engine = engine_for(database)
        self._options = options
        self._db = db
        self.full: DiskFullState | None = None
        self._low_space = False

    def wal_bytes(self) -> int | None:
        return self._engine.wal_bytes(self._database)

    def state(self) -> dict[str, Any] | None:
        """What the board says about it: None while writes go through."""
        if self.full is None:
            return None
        return {"since": self.full.since, "detail": self.full.detail, "refused_batches": self.full.refused_batches,
                "wal_bytes": self.wal_bytes()}

    def check_space(self, *, full: bool = False) -> None:
        """Checkpoint every few pages while the database's disk is short of room."""
        if not self._engine.watches_disk:
            return
        try:
            stat = os.statvfs(os.path.dirname(os.path.abspath(str(self._database))) or ".")
        except OSError:
            return
        free = stat.f_bavail * stat.f_frsize
        low = full or free < LOW_SPACE_BYTES
        if low == self._low_space:
            return
        self._low_space = low
        pages = self._engine.wal_checkpoint_pages(self._db(), low_space=low)
        log.log(logging.WARNING if low else logging.INFO,
                "the database's disk has %s %d KiB free: the write-ahead log is checkpointed every %d pages",
                "only" if low else "again", free // 1024, pages)

    def failed(self, detail: str, now: float) -> None:
        """A batch failed because the disk is full (the writer's word: `detail`)."""
        if self.full is not None:
            return
        self.full = DiskFullState(now, detail)
        self.check_space(full=True)
        log.warning("writes refused: %s; nothing moves until the disk has room (the write-ahead log is "
                    "truncated first, %s bytes now)", detail, self.wal_bytes())

    def make_room(self, now: float) -> bool:
        """While the disk is full: truncate the WAL before anything is written. True when writing may go on
        (truncated; or readers held the WAL, which a batch cannot wait out), False while the database file
        has no room for the WAL's pages (a batch would fail, or eat the space that was freed)."""
        if self.full is None:
            return True
        before = self.wal_bytes()
        result = self._engine.truncate_wal(self._db(), self._options, busy_timeout_ms=DISK_FULL_CHECKPOINT_WAIT_MS)
        if result == "full":
            return False
        if result == "done":
            log.info("the disk has room again: write-ahead log truncated (%s bytes given back); writing resumes "
                     "after %.1f s (%d batches refused meanwhile)", before, now - self.full.since,
                     self.full.refused_batches)
            self.full = None
        return True

    def refusal(self, now: float) -> str:
        """The error a refused batch is answered with (and counts it)."""
        assert self.full is not None
        self.full.refused_batches += 1
        return (f"{self.full.detail} (for {now - self.full.since:.0f} s; nothing is written until the "
                "write-ahead log can be truncated)")
