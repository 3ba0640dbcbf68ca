"""`DatabaseWriter`: the one read-write database connection of the host (SQLite or PostgreSQL).

Every write in the host is a `WriteCommand` submitted through a
`WriterHandle`. Submissions go into a queue owned by the writer; the actor is
told `Drain` and applies everything queued so far in one transaction (group
commit: one fsync for many commands), each command in its own savepoint;
only a lease command travels in a transaction of its own
(`store/batch_plan.py`), and a lease renewal waits in a lane of its
own and goes first, even between the retries of a batch PostgreSQL refused
for a conflict (`_commit`).
The queue exists because pykka's mailbox cannot be drained in batches
without reaching into its internals; the `Drain` message keeps the actor's
own loop in charge of when work happens.

Replies go out only after COMMIT (or after the refusal): to a pykka future
for callers at the edge (CLI, tests, embedding), or as a `WriteResult`
told to an actor, so actors never block on each other. After a commit that
changed something, the actors that follow one of the changed tables are told
a `ChangeNotice` (their subscriptions: change_notices.py).

A full disk stops writes, not the writer: its `DiskRoom` (disk_room.py)
says so, and has the WAL truncated before writing resumes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor
from piwf_actors.actors.change_notices import ChangeFeed, Subscribe, Subscribed, Unsubscribe
from piwf_actors.actors.disk_room import DiskRoom
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer_handle import (
    CLAIM_TAKERS,
    BatchReply,
    Drain,
    GetWriterStats,
    ReplyTo,
    WriterHandle,
    WriterQueue,
    WriterStats,
    deliver,
    deliver_batch,
)
from piwf_actors.board import HostBoard, Section
from piwf_actors.clock import TimerClock
from piwf_actors.errors import DiskFull, WriterStopped
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.batch import BatchOutcome, apply_batch
from piwf_actors.store.batch_plan import RENEWALS, transactions
from piwf_actors.store.database import StoreOptions, connect, idle_checkpoint
from piwf_actors.store.engines.base import engine_of
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult

# The way in (writer_handle.py) and the subscriptions to change notices (change_notices.py) are re-exported
# here: `from piwf_actors.actors.writer import WriterHandle`.
__all__ = ["BatchReply", "DatabaseWriter", "Drain", "GetWriterStats", "IdleTick", "ReplyTo", "Subscribe",
           "Subscribed", "Unsubscribe", "WriterHandle", "WriterQueue", "WriterStats", "deliver", "log_finished_runs",
           "start_writer"]

log = logging.getLogger(__name__)

#: `(commands in the batch, seconds in its transaction, committed)`: see DatabaseWriter.
BatchObserver = Callable[[int, float, bool], None]


@dataclass(frozen=True, slots=True)
class IdleTick:
    """Sent by the writer's own ticker: trim the WAL if nothing was written for a while."""


run_log = logging.getLogger("piwf_actors.runs")


def log_finished_runs(finished: list[tuple[str, str, str, str | None, str | None]]) -> None:
    """One line per run that ended in a commit: failures at WARNING with their code and message."""
    for run_id, workflow, status, code, message in finished:
        if status == "failed":
            run_log.warning("run %s failed (workflow %s): %s: %s", run_id, workflow, code,
                            " ".join(str(message or "").split())[:500],
                            extra={"run_id": run_id, "workflow": workflow, "status": status, "error_code": code})
        else:
            run_log.info("run %s %s (workflow %s)", run_id, status, workflow,
                         extra={"run_id": run_id, "workflow": workflow, "status": status})


#: How long the writer waits for late senders before a batch (see DatabaseWriter._gather): until
#: none arrived for GATHER_QUIET_S, and never longer than GATHER_MAX_S.
GATHER_QUIET_S = 0.00005
GATHER_MAX_S = 0.0005
#: How long a batch of nothing but pipelined results waits for the next ones (see _gather).
PIPELINE_QUIET_S = 0.0005
PIPELINE_MAX_S = 0.002


def _command_name(item: tuple[WriteCommand, ReplyTo]) -> str:
    return item[0].name


class DatabaseWriter(CoreActor):
    actor_name = "writer"

    def __init__(self, database: DatabaseLocation, options: StoreOptions = StoreOptions(), *,
                 writer_queue: WriterQueue, supervisor: pykka.ActorRef[Any] | None = None,
                 max_batch: int = 1000, clock: Callable[[], float] = time.time,
                 board: HostBoard | None = None, idle_s: float = 1.0,
                 batch_observer: BatchObserver | None = None, timer_clock: TimerClock | None = None,
                 database_clock: bool = True) -> None:
        """Runs in the caller's thread: stores arguments only.

        `clock` is host time (fences, claims, records); `timer_clock` is what workflow timers run on
        (piwf_actors/clock.py; None: the same clock): its offset is read once per batch and the
        commands see it as `ctx.timer_now`. On PostgreSQL the commands read host time from the
        database server's clock instead (store/batch.py), unless `database_clock` is False: then
        they see `clock`, as on SQLite (a store test that moves time on both engines).

        `batch_observer(commands, seconds, committed)` is called in the writer's thread after every
        batch with the time spent in its transaction (the metrics exporter's hook); it must be cheap.
        Without one the writer does not even read the clock for it.
        """
        super().__init__(supervisor)
        self._batch_observer = batch_observer
        self._database = database
        self._options = options
        self._max_batch = max_batch
        self._clock = clock
        self._timer_clock = timer_clock
        self._database_clock = database_clock
        self._queue = writer_queue
        self._db: Any = None
        self._feed = ChangeFeed()
        self._commits = 0
        self._commands = 0
        self._failed_batches = 0
        self._last_batch = 0
        self._conflict_retries = 0
        self._conflicts_given_up = 0
        self._statements = 0
        self._recent: deque[tuple[float, int]] = deque(maxlen=4096)
        self._board = board
        self._published_at = 0.0
        self._idle_s = idle_s
        self._ticker: Ticker | None = None
        self._wal_dirty = False
        self._last_commit_at = 0.0
        self._room = DiskRoom(database, options, lambda: self._db)

    def on_start(self) -> None:
        """Runs in the writer's thread: opens the only read-write connection, starts the idle ticker."""
        self._db = connect(self._database, self._options)
        self._db.connect(reuse_if_open=True)
        self._room.check_space()
        self._ticker = Ticker(self.actor_ref, IdleTick(), self._idle_s, "writer").start()

    def release_resources(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        if self._db is not None:
            self._db.close()
            self._db = None
        self._queue.fail_all()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {
            Drain: self._drain,
            Subscribe: self._subscribe,
            Unsubscribe: self._unsubscribe,
            GetWriterStats: self._stats,
            IdleTick: self._idle,
        }

    def _idle(self, _message: IdleTick) -> None:
        """Trim the write-ahead log once the writer has been idle for a moment.

        SQLite's automatic checkpoints recycle the WAL but never shrink it, so
        it would keep its largest size for good (and on a disk that was full
        and then freed, take the freed space back); see `idle_checkpoint`.
        """
        if self._db is None:
            return
        self._room.check_space()
        if self._room.full is not None:
            self._room_made(self._clock())  # the disk may have room again: truncate before the next write
            return
        if not self._wal_dirty or self._clock() - self._last_commit_at < self._idle_s:
            return
        if idle_checkpoint(self._db, self._options):
            self._wal_dirty = False

    def _subscribe(self, message: Subscribe) -> None:
        self._feed.subscribe(message)

    def _unsubscribe(self, message: Unsubscribe) -> None:
        self._feed.unsubscribe(message)

    def _drain(self, _message: Drain) -> None:
        self._queue.woken()
        while True:
            self._apply_renewals()
            batch = self._queue.take(self._max_batch)
            if not batch:
                return
            if len(batch) < self._max_batch:
                batch = self._gather(batch)
            if any(command.name in CLAIM_TAKERS for command, _ in batch):
                offer = self._queue.take_offer()
                if offer is not None:
                    batch.append(offer)  # last: it claims what the batch made claimable
            # A lease command travels in a transaction of its own: other commands' conflicts
            # must not sink it (store/batch_plan.py).
            self._apply_each(transactions(batch, _command_name))

    def _apply_renewals(self) -> None:
        """Apply the lease renewals waiting in their lane, each in a transaction of its own."""
        self._apply_each([[renewal] for renewal in self._queue.take_renewals()])

    def _apply_each(self, parts: list[list[tuple[WriteCommand, ReplyTo]]]) -> None:
        for index, part in enumerate(parts):
            try:
                self._apply(part)
            except BaseException:
                # The actor is about to die; no sender may wait forever.
                for command, reply_to in (item for unanswered in parts[index:] for item in unanswered):
                    deliver(reply_to, WriteResult(False, None, WriterStopped.code, str(WriterStopped()),
                                                  command.correlation_id))
                raise

    def _gather(self, batch: list[tuple[WriteCommand, ReplyTo]]) -> list[tuple[WriteCommand, ReplyTo]]:
        """Wait a bounded moment for late senders, when it is likely to save a commit.

        With many senders each waiting for its answer, the ones answered by
        the last commit send again while the next batch is applied: left
        alone, the writer settles into alternating half-batches (measured: 16
        senders, 8 commands per commit). Waiting until no command arrived for
        GATHER_QUIET_S (at most GATHER_MAX_S) lets them catch up, and one
        fsync serves them all; a lone sender (last batch of one) that waits
        for its answer is never held.

        A batch of nothing but pipelined results (`WriteCommand.pipelined`: a
        worker that goes on to its next node without waiting) is held longer,
        PIPELINE_QUIET_S between arrivals and at most PIPELINE_MAX_S: the next
        node's result is usually on its way, and one commit for a run's
        `ready` and its nodes instead of one each is most of a run's cost. The
        wait ends as soon as a command arrives whose sender waits for it.

        The wait blocks on the queue: the GIL is free for the senders, and no
        CPU is spent spinning.
        """
        started = time.perf_counter()
        patient = all(command.pipelined for command, _ in batch)
        while len(batch) < self._max_batch:
            if patient:
                quiet, longest = PIPELINE_QUIET_S, PIPELINE_MAX_S
            elif self._last_batch > 1:
                quiet, longest = GATHER_QUIET_S, GATHER_MAX_S
            else:
                break
            wait = min(quiet, started + longest - time.perf_counter())
            if wait <= 0:
                break
            item = self._queue.wait_for_one(wait)
            if item is None:
                break
            more = [item, *self._queue.take(self._max_batch - len(batch) - 1)]
            batch += more
            patient = patient and all(command.pipelined for command, _ in more)
        return batch

    def _apply(self, batch: list[tuple[WriteCommand, ReplyTo]]) -> None:
        now = self._clock()
        if self._room.full is not None and not self._room_made(now):
            self._refuse_disk_full(batch, now)
            return
        observer = self._batch_observer
        started = time.perf_counter() if observer is not None else 0.0
        outcome = self._commit(batch, now)
        seconds = time.perf_counter() - started if observer is not None else 0.0
        self._last_batch = len(batch)
        self._conflicts_given_up += outcome.conflict_given_up
        if outcome.committed:
            self._wal_dirty = True
            self._last_commit_at = now
            self._commits += 1
            self._commands += len(batch)
            self._recent.append((now, len(batch)))
        else:
            self._failed_batches += 1
            full = next((r.error for r in outcome.results if r.error_code == DiskFull.code), None)
            if full is not None and self._room.full is None:
                self._room.failed(full, now)
                self._published_at = 0.0  # say so on the board at once
        if self._board is not None and now - self._published_at >= 0.2:
            self._publish(now)
        seq = self._commits
        deliver_batch(batch, outcome.results)
        if outcome.committed and outcome.changes.finished:
            log_finished_runs(outcome.changes.finished)
        if outcome.committed and (outcome.changes.tables or outcome.changes.runs):
            self._feed.publish(ChangeNotice(seq, tuple(sorted(outcome.changes.tables)),
                                            tuple(sorted(outcome.changes.runs)), now))
        if observer is not None:
            try:
                observer(len(batch), seconds, outcome.committed)
            except Exception:  # an observer's bug must not stop the writer
                log.exception("the writer's batch observer failed")

    def _commit(self, batch: list[tuple[WriteCommand, ReplyTo]], now: float) -> BatchOutcome:
        """`apply_batch`, letting a lease renewal that arrives while PostgreSQL keeps refusing this
        batch for conflicts go first (between two attempts: store/batch.py), so that a renewal
        waits for one attempt of another batch at most, never for all of its retries. A renewal's
        own transaction yields to nothing."""
        commands = [command for command, _ in batch]
        renewal = len(commands) == 1 and commands[0].name in RENEWALS
        retried = 0
        while True:
            outcome = apply_batch(self._db, commands, now, commit_seq=self._commits + 1,
                                  clock=self._clock if self._database_clock else None,
                                  timer_offset=0.0 if self._timer_clock is None else self._timer_clock.offset(),
                                  conflicts_before=retried,
                                  yield_to=None if renewal else self._queue.renewal_waiting)
            self._conflict_retries += outcome.conflict_retries - retried
            self._statements += outcome.statements
            if not outcome.yielded:
                return outcome
            retried = outcome.conflict_retries
            self._apply_renewals()
            now = self._clock()

    # --- a full disk ---------------------------------------------------------------------------

    def _room_made(self, now: float) -> bool:
        """The WAL truncated since the disk was full (or writing may go on anyway): see disk_room.py."""
        made = self._room.make_room(now)
        if made and self._room.full is None:
            self._wal_dirty = False
            self._publish(now)
        return made

    def _refuse_disk_full(self, batch: list[tuple[WriteCommand, ReplyTo]], now: float) -> None:
        """Answer a batch without trying it: the disk is full and the WAL could not be truncated yet."""
        self._failed_batches += 1
        self._last_batch = len(batch)
        error = self._room.refusal(now)
        deliver_batch(batch, [WriteResult(False, None, DiskFull.code, error, command.correlation_id)
                               for command, _ in batch])
        if self._board is not None and now - self._published_at >= 0.2:
            self._publish(now)

    def _publish(self, now: float) -> None:
        if self._board is not None:
            self._published_at = now
            self._board.publish(Section.WRITER, self._stats_dict(now))

    def _stats_dict(self, now: float) -> dict[str, Any]:
        stats = self._stats_at(now)
        return {"commits": stats.commits, "commands": stats.commands, "failed_batches": stats.failed_batches,
                "queue_depth": stats.queue_depth, "commits_per_s": round(stats.commits_per_s, 1),
                "commands_per_s": round(stats.commands_per_s, 1), "last_batch_size": stats.last_batch_size,
                "conflict_retries": stats.conflict_retries, "conflicts_given_up": stats.conflicts_given_up,
                "statements": stats.statements, "round_trips": stats.round_trips,
                "disk_full": self._room.state(),
                "at": now}

    def _stats(self, _message: GetWriterStats) -> WriterStats:
        return self._stats_at(self._clock())

    def _stats_at(self, now: float) -> WriterStats:
        window = [(t, n) for t, n in self._recent if now - t <= 10.0]
        span = max(now - window[0][0], 1.0) if window else 1.0
        return WriterStats(
            commits=self._commits, commands=self._commands, failed_batches=self._failed_batches,
            queue_depth=self._queue.depth(), commits_per_s=len(window) / span,
            commands_per_s=sum(n for _, n in window) / span, last_batch_size=self._last_batch,
            conflict_retries=self._conflict_retries, conflicts_given_up=self._conflicts_given_up,
            statements=self._statements,
            round_trips=None if self._db is None else engine_of(self._db).round_trips(self._db),
        )


def start_writer(database: DatabaseLocation, options: StoreOptions = StoreOptions(), *,
                 supervisor: pykka.ActorRef[Any] | None = None, **kwargs: Any) -> WriterHandle:
    """Start a DatabaseWriter and return its handle (the ref is `handle.ref`)."""
    writer_queue = WriterQueue()
    ref = DatabaseWriter.start(database, options, writer_queue=writer_queue, supervisor=supervisor, **kwargs)
    return WriterHandle(ref, writer_queue)
