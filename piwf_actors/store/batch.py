"""Group commit: many write commands in one transaction, each isolated.

`apply_batch` is the writer actor's whole job, kept out of the actor so it can
be called from a test with a chosen `now`. One refused command is undone
alone and answered with its error; its batch-mates commit. (A client
command's refusal that is recorded under its idempotency key comes back as
a `RecordedRefusal`: the record commits, the sender gets the error.) A failure of the
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

On PostgreSQL a failed statement aborts the whole transaction, so a command
whose statement fails in the first pass always sends the batch to the second
pass, where its savepoint is rolled back instead. A transaction PostgreSQL
refuses because another host's conflicted with it (serialization failure,
deadlock: `TransactionConflict`) is simply run again, up to
`CONFLICT_RETRIES` times: nothing of it was written, and the commands decide
anew on what the other host committed.

Fencing by lease (store/batch_fences.py): a fenced command carries either the host epoch (the active
host's writes) or a runner identity (a runner host's, docs/runners.md: runner
id + the epoch of its runner lease); it is refused unless that lease row names
the same epoch and is unexpired. The host lease is read once per transaction,
a runner's lease on its first command.

Lease commands travel alone: the writer applies each one in a transaction
of its own and lets a renewal go first, even between two retries of a
conflicting batch (`yield_to` below; store/batch_plan.py says why that
keeps every fence).

Fencing by time: a fenced command is refused unless its lease is
unexpired, judged by a clock read inside the transaction (after BEGIN) and
once more just before COMMIT. A host paused past its lease (SIGSTOP, a
stalled VM) may wake up in the middle of a batch whose `now` is stale; the
second reading makes that batch fail as a whole (`lease_expired`) instead
of committing after the lease ran out. On SQLite that clock is the host's
(one machine). On PostgreSQL it is the database server's
(`clock_timestamp()`, read inside the transaction), and it is also the `now`
the commands see: lease expiries, claim expiries and every stored time then
come from one clock, so hosts whose clocks disagree still agree on who holds
what. There the second reading is the server's own: a statement sent with
COMMIT fails when its clock has reached the earliest expiry of the leases
the batch's writes were fenced by (`Engine.lease_check_sql`).

Round trips: on PostgreSQL the first pass defers its statements and sends
them together when an answer is needed (`Engine.pipelined`,
docs/postgresql.md): a statement's error may then surface in a later
command's call or at COMMIT. A conflict there is retried like any other; any
other statement failure out of the deferred pass sends the batch to the pass
with savepoints, which defers nothing, so the failing command is met alone.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors import errors
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.batch_fences import Fences
from piwf_actors.store.command_records import RecordedRefusal
from piwf_actors.store.commands import lookup
from piwf_actors.store.commands.registry import NeedsSavepoints, WriteContext
from piwf_actors.store.engines.base import Engine, engine_of
from piwf_actors.store.requests import ChangeSet, WriteCommand, WriteResult
from piwf_actors.store.statement_count import CountingConnection

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BatchOutcome:
    results: list[WriteResult]
    changes: ChangeSet
    committed: bool
    #: How many times PostgreSQL refused the batch for a conflict with another host's transaction
    #: before it committed (or was given up): SERIALIZABLE's price, counted by the writer.
    conflict_retries: int = 0
    #: The batch was given up because PostgreSQL kept refusing it for conflicts (CONFLICT_RETRIES).
    conflict_given_up: bool = False
    #: Not applied: it conflicted and `yield_to` asked for the way (no results; apply it again).
    yielded: bool = False
    #: SQL statements sent for this batch, every attempt and pass counted (store/statement_count.py).
    statements: int = 0


#: How many times a batch PostgreSQL refused for a conflict with another host's transaction is run again.
#: (With runner hosts, SERIALIZABLE's predicate locks make false conflicts between hosts common: each
#: retry is cheap, a batch given up answers its senders `unavailable` and they send again.)
CONFLICT_RETRIES = 12
#: The longest random pause before such a retry (see apply_batch).
CONFLICT_BACKOFF_MAX_S = 0.05

def storage_error(exc: BaseException, engine: Engine) -> errors.StoreError | None:
    """The storage failure behind `exc`, if it is one (disk full, read-only, busy, a conflict).

    peewee's `atomic()` can hide the real error: on a full disk its rollback
    fails with "cannot rollback - no transaction is active" and the cause is
    in `__context__`, so the whole chain is searched (`Engine.classify`).
    """
    return engine.classify(exc)


class _StorageAbort(Exception):
    def __init__(self, error: errors.StoreError) -> None:
        super().__init__(str(error))
        self.error = error


def _fail(cmd: WriteCommand, err: errors.PiwfError) -> WriteResult:
    return WriteResult(False, None, err.code, err.one_line(), cmd.correlation_id)


def apply_batch(db: Any, commands: list[WriteCommand], now: float, *,
                commit_seq: int | None = None, savepoints: bool = False,
                clock: Callable[[], float] | None = None, timer_offset: float = 0.0,
                conflicts_before: int = 0, yield_to: Callable[[], bool] | None = None) -> BatchOutcome:
    """Apply `commands` in one write transaction; return one result per command.

    The lease row is read once inside the transaction: on SQLite the write lock
    is held from BEGIN IMMEDIATE to COMMIT, on PostgreSQL the transaction is
    SERIALIZABLE, so no other host can move the lease unnoticed in between, and
    comparing every command with that one reading is exact.
    `clock` (the writer's) is read inside the transaction for the time fence
    (on PostgreSQL the server's clock is read instead, see the module docstring);
    without it (tests with a chosen `now`) the fence uses `now`.
    `timer_offset` is how far the host's timer clock is ahead (piwf_actors/clock.py): the commands
    see `now + timer_offset` as `ctx.timer_now` for workflow timers; fences keep `now`.

    A transaction PostgreSQL refuses for a conflict is run again (CONFLICT_RETRIES in all,
    counting `conflicts_before`, the retries of earlier calls for this batch). Before each retry
    `yield_to()` is asked (in this thread, with no transaction open): when it says yes, the batch
    is left unapplied (`yielded`, no results, `conflict_retries` counting all so far) for the
    caller to apply what may not wait (a lease renewal) and then this batch again.
    """
    engine = engine_of(db)
    attempt = conflicts_before
    counted: CountingConnection | None = None
    statements = 0
    while True:
        conn = None
        try:
            conn = db.connection()  # (re)connects when the last batch found the connection broken
            counted = CountingConnection(conn)
            try:
                outcome = _run(counted, engine, commands, now, commit_seq, savepoints, clock, timer_offset)
            except NeedsSavepoints:
                outcome = _run(counted, engine, commands, now, commit_seq, True, clock, timer_offset)
            outcome.conflict_retries = attempt
            outcome.statements = statements + counted.statements
            return outcome
        except engine.driver_errors + (_StorageAbort,) as exc:
            statements += counted.statements if counted is not None else 0
            counted = None
            cause = exc.error if isinstance(exc, _StorageAbort) else storage_error(exc, engine)
            err = cause or errors.StoreError(" ".join(str(exc).split())[:500])
            if conn is None or getattr(conn, "broken", False):
                _close_quietly(db)  # the server or the network dropped it: the next batch reconnects
            if isinstance(err, errors.TransactionConflict) and attempt < CONFLICT_RETRIES:
                attempt += 1
                if yield_to is not None and yield_to():
                    return BatchOutcome([], ChangeSet(), False, attempt, yielded=True, statements=statements)
                log.debug("write batch of %d conflicted with another host's transaction; retry %d",
                          len(commands), attempt)
                # Hosts that conflicted once tend to meet again if they retry in step (the active host and
                # runner hosts claiming from one queue): a short random pause, growing with each retry (at
                # most CONFLICT_BACKOFF_MAX_S), lets one of them commit first.
                time.sleep(random.uniform(0, min(CONFLICT_BACKOFF_MAX_S, 0.001 * 2 ** attempt)))
                continue
            log.warning("write batch of %d aborted: %s", len(commands), err.one_line())
            return BatchOutcome([_fail(c, err) for c in commands], ChangeSet(), False, attempt,
                                isinstance(err, errors.TransactionConflict), statements=statements)


def _close_quietly(db: Any) -> None:
    try:
        db.close()
    except Exception:  # a dead connection may fail to close; it is dropped either way
        log.debug("closing a broken connection failed", exc_info=True)


def _run(conn: Any, engine: Engine, commands: list[WriteCommand], now: float, commit_seq: int | None,
         savepoints: bool, clock: Callable[[], float] | None, timer_offset: float = 0.0) -> BatchOutcome:
    changes = ChangeSet()
    results: list[WriteResult] = []
    # The first pass sends its statements together (on PostgreSQL: queued until a result is needed,
    # then sent in one round trip, Engine.pipelined); the pass with savepoints, rare, sends them one
    # by one, so that a failing statement is met in its own command.
    pipelined = not savepoints
    deferred = pipelined and engine.defers_statements  # statements really wait in a queue (PostgreSQL)
    raw = conn
    # The batch's run events are inserted together (batch_connection.py); numbered by their insert
    # where statements are deferred, so that no read of the last seq costs a round trip.
    conn = BatchConnection(conn, numbered_by_server=deferred)
    lease_check: tuple[int, float] | None = None  # (epoch, expiry) checked by the server with COMMIT
    try:
        with engine.pipelined(raw) if pipelined else contextlib.nullcontext():
            raw.execute(engine.begin_write)
            fences = Fences(conn)
            fences.prefetch(commands)  # sent now, read with the clock below
            clock_sql = engine.clock_sql
            if clock_sql is not None and clock is not None:
                # The database's clock, read inside the transaction, is the writer's clock here (and
                # its reading now is the fence's: no second reading).
                def server_clock() -> float:
                    return float(conn.execute(clock_sql).fetchone()[0])

                clock = server_clock
                now = fence_now = clock()
            else:
                fence_now = now if clock is None else max(now, clock())
            fenced_by: set[str | None] = set()  # the senders (None: the host) whose fenced writes are in the batch
            for cmd in commands:
                result = _apply_one(conn, engine, cmd, now, fence_now, fences, changes, commit_seq, savepoints,
                                    timer_offset)
                results.append(result)
                if result.ok and (cmd.name.startswith("lease.") or cmd.name.startswith("runner_lease.")):
                    # The lease moved inside this transaction: fence later commands by the new state.
                    fences.moved(cmd)
                elif result.ok:
                    fenced_by.add(cmd.runner_id)
            if fenced_by and clock is not None:
                # Paused between the fence check and here: what was decided under the lease must not
                # become visible after it ran out. Where statements are deferred the server checks
                # its clock in a statement sent with COMMIT; else the clock is read once more here.
                lease_check = fences.earliest_expiry(fenced_by) if deferred else None
                check_sql = None if lease_check is None else engine.lease_check_sql(lease_check[1])
                if check_sql is not None:
                    conn.flush_events()  # the events go in before the check, as they would before COMMIT
                    conn.execute(check_sql)
                else:
                    expired = fences.expired_at_commit(clock(), fenced_by)
                    if expired is not None:
                        raise _StorageAbort(expired)
            conn.execute("COMMIT")  # (deferred: sent with what is still queued when the block ends)
    except BaseException as exc:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except engine.driver_errors:
            log.debug("rollback after failed batch also failed", exc_info=True)
        if lease_check is not None and isinstance(exc, engine.driver_errors) and engine.lease_check_failed(exc):
            raise _StorageAbort(errors.LeaseExpired(*lease_check)) from exc
        if deferred and isinstance(exc, engine.driver_errors) and storage_error(exc, engine) is None:
            # A statement's own failure (a violated constraint…) surfaced where its queue was sent,
            # maybe in another command's call or at COMMIT: the pass with savepoints meets it in
            # its own command.
            raise NeedsSavepoints() from exc
        raise
    return BatchOutcome(results, changes, True)


def _apply_one(conn: Any, engine: Engine, cmd: WriteCommand, now: float, fence_now: float, fences: Fences,
               changes: ChangeSet, commit_seq: int | None, savepoints: bool, timer_offset: float = 0.0) -> WriteResult:
    try:
        spec = lookup(cmd.name)
    except errors.UnknownCommand as err:
        return _fail(cmd, err)
    if spec.fenced:
        refusal = fences.refusal(cmd, fence_now)
        if refusal is not None:
            return _fail(cmd, refusal)
    # In the first pass a refusal undoes nothing (it wrote nothing, or the batch is redone), so a
    # command records its changes straight into the batch's set; with savepoints each has its own.
    own = ChangeSet() if savepoints else changes
    if cmd.runner_id is not None:
        # A runner's rows record no host epoch (0): they belong to its runner lease.
        ctx = WriteContext(conn, now, 0, own, savepoints, cmd.runner_id, cmd.runner_lease_epoch,
                           command=spec.name, timer_offset=timer_offset)
    else:
        lease = fences.host
        ctx = WriteContext(conn, now, lease.epoch, own, savepoints, host_id=lease.host_id, command=spec.name,
                           timer_offset=timer_offset)
    if savepoints:
        conn.execute("SAVEPOINT cmd")
    before = conn.change_mark()
    try:
        value = spec.fn(ctx, cmd.args)
    except NeedsSavepoints:
        raise
    except errors.PiwfError as err:
        _undo(conn, savepoints, before)
        return _fail(cmd, err)
    except engine.driver_errors as exc:
        storage = storage_error(exc, engine)
        if storage is not None:
            raise _StorageAbort(storage) from exc
        if engine.aborts_transaction and not savepoints:
            # PostgreSQL refuses every later statement of this transaction: redo the batch with
            # a savepoint around each command, where this one's failure is undone alone.
            raise NeedsSavepoints() from exc
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
    if isinstance(value, RecordedRefusal):
        # A client command refused, with the refusal recorded under its idempotency key: the record
        # commits with the batch, and the sender is answered with the refusal.
        return WriteResult(False, None, value.code, value.message, cmd.correlation_id, commit_seq)
    return WriteResult(True, value, None, None, cmd.correlation_id, commit_seq)


def _undo(conn: Any, savepoints: bool, mark: Any) -> None:
    if savepoints:
        conn.execute("ROLLBACK TO cmd")
        conn.execute("RELEASE cmd")
    elif conn.changed_since(mark):
        raise NeedsSavepoints()
