"""Group commit: many write commands in one transaction, each isolated.

`apply_batch` is the writer actor's whole job, kept out of the actor so it can
be called from a test with a chosen `now`. One refused command is undone
alone and answered with its error; its batch-mates commit. A failure of the
storage itself (disk full, read-only file, lock timeout) aborts the whole
transaction and every command in it gets that error: nothing of the batch
is on disk, so the senders may retry.

Isolation per command is a savepoint. Opening and releasing one costs two
statements per command, which is most of the writer's time on small
commands, so the batch first runs optimistically without them: a command
that refuses before it has changed a row (`total_changes` did not move —
fence checks, validation) needs no undo. Only when a command fails after
writing is the transaction rolled back and the batch applied again with a
savepoint around every command. Commands are pure functions of (database,
message, now), so the replay decides the same way; nothing of the first
pass was visible to anyone.

Fencing by time: a fenced command is refused unless the host's lease is
unexpired, judged by a clock read inside the transaction (after BEGIN) and
once more just before COMMIT. A host paused past its lease (SIGSTOP, a
stalled VM) may wake up in the middle of a batch whose `now` is stale; the
second reading makes that batch fail as a whole (`lease_expired`) instead
of committing after the lease ran out.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

import peewee as pw

from piwf_actors import errors
from piwf_actors.store.commands import lookup
from piwf_actors.store.commands.registry import NeedsSavepoints, WriteContext
from piwf_actors.store.requests import ChangeSet, WriteCommand, WriteResult

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BatchOutcome:
    results: list[WriteResult]
    changes: ChangeSet
    committed: bool


def storage_error(exc: BaseException) -> errors.StoreError | None:
    """The storage failure behind `exc`, if it is one (disk full, read-only, busy).

    peewee's `atomic()` can hide the real error: on a full disk its rollback
    fails with "cannot rollback - no transaction is active" and the cause is
    in `__context__`, so the whole chain is searched.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).lower()
        if "disk is full" in text:
            return errors.DiskFull(" ".join(str(current).split()))
        if "readonly" in text or "read-only" in text:
            return errors.ReadOnlyDatabase(" ".join(str(current).split()))
        if "database is locked" in text or "database is busy" in text:
            return errors.StoreError(f"database is locked by another process: {current}")
        current = current.__cause__ or current.__context__
    return None


class _StorageAbort(Exception):
    def __init__(self, error: errors.StoreError) -> None:
        super().__init__(str(error))
        self.error = error


def _fail(cmd: WriteCommand, err: errors.PiwfError) -> WriteResult:
    return WriteResult(False, None, err.code, err.one_line(), cmd.correlation_id)


@dataclass(slots=True)
class _Lease:
    """The lease row as this transaction sees it."""

    epoch: int
    held: bool
    expires_at: float | None

    def refusal(self, cmd: WriteCommand, fence_now: float) -> errors.PiwfError | None:
        """Why a fenced command may not write now, or None."""
        if cmd.host_epoch != self.epoch or not self.held:
            return errors.StaleEpoch(cmd.host_epoch if cmd.host_epoch is not None else -1, self.epoch)
        if self.expires_at is None or self.expires_at <= fence_now:
            return errors.LeaseExpired(self.epoch, self.expires_at)
        return None


def _current_lease(conn: sqlite3.Connection) -> _Lease:
    row = conn.execute("SELECT epoch, host_id IS NOT NULL, expires_at FROM host_state WHERE id = 1").fetchone()
    return _Lease(int(row[0]), bool(row[1]), row[2]) if row else _Lease(0, False, None)


def apply_batch(db: pw.SqliteDatabase, commands: list[WriteCommand], now: float, *,
                commit_seq: int | None = None, savepoints: bool = False,
                clock: Callable[[], float] | None = None) -> BatchOutcome:
    """Apply `commands` in one IMMEDIATE transaction; return one result per command.

    The lease row is read once inside the transaction: the write lock is held
    from BEGIN IMMEDIATE to COMMIT, so no other process can move the lease in
    between, and comparing every command with that one reading is exact.
    `clock` (the writer's) is read inside the transaction for the time fence;
    without it (tests with a chosen `now`) the fence uses `now`.
    """
    conn = db.connection()
    try:
        try:
            return _run(conn, commands, now, commit_seq, savepoints, clock)
        except NeedsSavepoints:
            return _run(conn, commands, now, commit_seq, True, clock)
    except (sqlite3.Error, pw.DatabaseError, _StorageAbort) as exc:
        cause = exc.error if isinstance(exc, _StorageAbort) else storage_error(exc)
        err = cause or errors.StoreError(" ".join(str(exc).split())[:500])
        log.warning("write batch of %d aborted: %s", len(commands), err.one_line())
        return BatchOutcome([_fail(c, err) for c in commands], ChangeSet(), False)


def _run(conn: sqlite3.Connection, commands: list[WriteCommand], now: float, commit_seq: int | None,
         savepoints: bool, clock: Callable[[], float] | None) -> BatchOutcome:
    changes = ChangeSet()
    results: list[WriteResult] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        lease = _current_lease(conn)
        fence_now = now if clock is None else max(now, clock())
        fenced_writes = False
        for cmd in commands:
            result = _apply_one(conn, cmd, now, fence_now, lease, changes, commit_seq, savepoints)
            results.append(result)
            if result.ok and cmd.name.startswith("lease."):
                # The lease moved inside this transaction: fence later commands by the new state.
                lease = _current_lease(conn)
            elif result.ok:
                fenced_writes = True
        if fenced_writes and clock is not None and lease.expires_at is not None and clock() >= lease.expires_at:
            # Paused between the fence check and here: what was decided under the
            # lease must not become visible after it ran out.
            raise _StorageAbort(errors.LeaseExpired(lease.epoch, lease.expires_at))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.debug("rollback after failed batch also failed", exc_info=True)
        raise
    return BatchOutcome(results, changes, True)


def _apply_one(conn: sqlite3.Connection, cmd: WriteCommand, now: float, fence_now: float, lease: _Lease,
               changes: ChangeSet, commit_seq: int | None, savepoints: bool) -> WriteResult:
    try:
        spec = lookup(cmd.name)
    except errors.UnknownCommand as err:
        return _fail(cmd, err)
    if spec.fenced:
        refusal = lease.refusal(cmd, fence_now)
        if refusal is not None:
            return _fail(cmd, refusal)
    # In the first pass a refusal undoes nothing (it wrote nothing, or the batch is redone), so a
    # command records its changes straight into the batch's set; with savepoints each has its own.
    own = ChangeSet() if savepoints else changes
    ctx = WriteContext(conn, now, lease.epoch, own, savepoints)
    if savepoints:
        conn.execute("SAVEPOINT cmd")
    before = conn.total_changes
    try:
        value = spec.fn(ctx, cmd.args)
    except NeedsSavepoints:
        raise
    except errors.PiwfError as err:
        _undo(conn, savepoints, before)
        return _fail(cmd, err)
    except (sqlite3.Error, pw.DatabaseError) as exc:
        storage = storage_error(exc)
        if storage is not None:
            raise _StorageAbort(storage) from exc
        _undo(conn, savepoints, before)
        log.exception("write command %s failed", cmd.name)
        return _fail(cmd, errors.CommandFailed(f"{cmd.name}: {' '.join(str(exc).split())}"))
    except Exception as exc:  # a bug in one command must not undo its batch-mates
        _undo(conn, savepoints, before)
        log.exception("write command %s raised", cmd.name)
        return _fail(cmd, errors.CommandFailed(f"{cmd.name} failed: {type(exc).__name__}: {exc}"))
    if savepoints:
        conn.execute("RELEASE cmd")
        changes.merge(own)
    return WriteResult(True, value, None, None, cmd.correlation_id, commit_seq)


def _undo(conn: sqlite3.Connection, savepoints: bool, changes_before: int) -> None:
    if savepoints:
        conn.execute("ROLLBACK TO cmd")
        conn.execute("RELEASE cmd")
    elif conn.total_changes != changes_before:
        raise NeedsSavepoints()
