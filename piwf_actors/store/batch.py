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
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass

import peewee as pw

from piwf_actors import errors
from piwf_actors.store.commands import lookup
from piwf_actors.store.commands.registry import WriteContext
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


class _NeedsSavepoints(Exception):
    """A command failed after changing rows: redo the batch with savepoints."""


def _fail(cmd: WriteCommand, err: errors.PiwfError) -> WriteResult:
    return WriteResult(False, None, err.code, err.one_line(), cmd.correlation_id)


def _current_epoch(conn: sqlite3.Connection) -> tuple[int, bool]:
    row = conn.execute("SELECT epoch, host_id IS NOT NULL FROM host_state WHERE id = 1").fetchone()
    return (int(row[0]), bool(row[1])) if row else (0, False)


def apply_batch(db: pw.SqliteDatabase, commands: list[WriteCommand], now: float, *,
                commit_seq: int | None = None, savepoints: bool = False) -> BatchOutcome:
    """Apply `commands` in one IMMEDIATE transaction; return one result per command.

    The host epoch is read once inside the transaction: the write lock is held
    from BEGIN IMMEDIATE to COMMIT, so no other process can move the lease in
    between, and comparing every command with that one reading is exact.
    """
    conn = db.connection()
    try:
        try:
            return _run(conn, commands, now, commit_seq, savepoints)
        except _NeedsSavepoints:
            return _run(conn, commands, now, commit_seq, True)
    except (sqlite3.Error, pw.DatabaseError, _StorageAbort) as exc:
        cause = exc.error if isinstance(exc, _StorageAbort) else storage_error(exc)
        err = cause or errors.StoreError(" ".join(str(exc).split())[:500])
        log.warning("write batch of %d aborted: %s", len(commands), err.one_line())
        return BatchOutcome([_fail(c, err) for c in commands], ChangeSet(), False)


def _run(conn: sqlite3.Connection, commands: list[WriteCommand], now: float, commit_seq: int | None,
         savepoints: bool) -> BatchOutcome:
    changes = ChangeSet()
    results: list[WriteResult] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        epoch, leased = _current_epoch(conn)
        for cmd in commands:
            result = _apply_one(conn, cmd, now, epoch, leased, changes, commit_seq, savepoints)
            results.append(result)
            if result.ok and cmd.name.startswith("lease."):
                # The lease moved inside this transaction: fence later commands by the new state.
                epoch, leased = _current_epoch(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                log.debug("rollback after failed batch also failed", exc_info=True)
        raise
    return BatchOutcome(results, changes, True)


def _apply_one(conn: sqlite3.Connection, cmd: WriteCommand, now: float, epoch: int, leased: bool,
               changes: ChangeSet, commit_seq: int | None, savepoints: bool) -> WriteResult:
    try:
        spec = lookup(cmd.name)
    except errors.UnknownCommand as err:
        return _fail(cmd, err)
    if spec.fenced and (cmd.host_epoch != epoch or not leased):
        return _fail(cmd, errors.StaleEpoch(cmd.host_epoch if cmd.host_epoch is not None else -1, epoch))
    own = ChangeSet()
    ctx = WriteContext(conn, now, epoch, own)
    if savepoints:
        conn.execute("SAVEPOINT cmd")
    before = conn.total_changes
    try:
        value = spec.fn(ctx, cmd.args)
    except errors.PiwfError as err:
        _undo(conn, savepoints, before)
        return _fail(cmd, err)
    except (sqlite3.Error, pw.DatabaseError) as exc:
        storage = storage_error(exc)
        if storage is not None:
            raise _StorageAbort(storage) from exc
        _undo(conn, savepoints, before)
        log.exception("write command %s failed", cmd.name)
        return _fail(cmd, errors.StoreError(f"{cmd.name}: {' '.join(str(exc).split())}"))
    except Exception as exc:  # a bug in one command must not undo its batch-mates
        _undo(conn, savepoints, before)
        log.exception("write command %s raised", cmd.name)
        return _fail(cmd, errors.StoreError(f"{cmd.name} failed: {type(exc).__name__}: {exc}"))
    if savepoints:
        conn.execute("RELEASE cmd")
    changes.merge(own)
    return WriteResult(True, value, None, None, cmd.correlation_id, commit_seq)


def _undo(conn: sqlite3.Connection, savepoints: bool, changes_before: int) -> None:
    if savepoints:
        conn.execute("ROLLBACK TO cmd")
        conn.execute("RELEASE cmd")
    elif conn.total_changes != changes_before:
        raise _NeedsSavepoints()
