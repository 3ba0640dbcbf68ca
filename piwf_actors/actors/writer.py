"""`DatabaseWriter`: the one read-write database connection of the host (SQLite or PostgreSQL).

Every write in the host is a `WriteCommand` submitted through a
`WriterHandle`. Submissions go into a queue owned by the writer; the actor is
told `Drain` and applies everything queued so far in one transaction (group
commit: one fsync for many commands), each command in its own savepoint.
The queue exists because pykka's mailbox cannot be drained in batches
without reaching into its internals; the `Drain` message keeps the actor's
own loop in charge of when work happens.

Replies go out only after COMMIT (or after the refusal): to a pykka future
for callers at the edge (CLI, tests, embedding), or as a `WriteResult`
told to an actor, so actors never block on each other.

A full disk stops writes, not the writer: its `DiskRoom` (disk_room.py)
says so, and has the WAL truncated before writing resumes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.disk_room import DiskRoom
from piwf_actors.actors.ticker import Ticker
from piwf_actors.board import HostBoard, Section
from piwf_actors.errors import DiskFull, WriterStopped
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import StoreOptions, connect, idle_checkpoint
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult, WriteResults

log = logging.getLogger(__name__)

class BatchReply:
    """A reply target that takes all of its answers of one batch in one call, in batch order: a
    worker's answers go back to its socket in one send (see worker_link.py). `deliver_all` runs in
    the writer's thread, after COMMIT: it must be quick and must not block."""

    def deliver_all(self, results: list[WriteResult]) -> None:
        raise NotImplementedError


ReplyTo = pykka.Future[WriteResult] | pykka.ActorRef[Any] | BatchReply | Callable[[WriteResult], None] | None
#: `(commands in the batch, seconds in its transaction, committed)`: see DatabaseWriter.
BatchObserver = Callable[[int, float, bool], None]


@dataclass(frozen=True, slots=True)
class Drain:
    """Apply whatever is queued."""


@dataclass(frozen=True, slots=True)
class IdleTick:
    """Sent by the writer's own ticker: trim the WAL if nothing was written for a while."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Tell `subscriber` a ChangeNotice after every commit that changed something, or with `tables`
    only after those that changed one of them: a notice is a thread hand-off, and most commits
    (a node's result) are news to few subscribers."""

    subscriber: pykka.ActorRef[Any]
    tables: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    subscriber: pykka.ActorRef[Any]


@dataclass(frozen=True, slots=True)
class GetWriterStats:
    """Answered with a WriterStats."""


@dataclass(frozen=True, slots=True)
class WriterStats:
    commits: int
    commands: int
    failed_batches: int
    queue_depth: int
    commits_per_s: float
    commands_per_s: float
    last_batch_size: int
    #: Batches PostgreSQL refused for a conflict with another host's transaction and that were run
    #: again (SERIALIZABLE; always 0 on SQLite), and how many of those batches were given up.
    conflict_retries: int = 0
    conflicts_given_up: int = 0


def deliver(reply_to: ReplyTo, result: WriteResult) -> None:
    if reply_to is None:
        return
    if isinstance(reply_to, pykka.ActorRef):
        safe_tell(reply_to, result)
    elif isinstance(reply_to, BatchReply):
        reply_to.deliver_all([result])
    elif isinstance(reply_to, pykka.Future):
        reply_to.set(result)
    else:
        reply_to(result)


def _deliver_batch(batch: list[tuple[WriteCommand, ReplyTo]], results: list[WriteResult]) -> None:
    """Answer a batch: futures and callables one by one, each actor and each BatchReply once (its
    results in order)."""
    to_actors: dict[str, tuple[pykka.ActorRef[Any], list[WriteResult]]] = {}
    to_batches: dict[int, tuple[BatchReply, list[WriteResult]]] = {}
    for (_, reply_to), result in zip(batch, results, strict=True):
        if isinstance(reply_to, pykka.ActorRef):
            to_actors.setdefault(reply_to.actor_urn, (reply_to, []))[1].append(result)
        elif isinstance(reply_to, BatchReply):
            to_batches.setdefault(id(reply_to), (reply_to, []))[1].append(result)
        else:
            deliver(reply_to, result)
    for reply, answers in to_batches.values():
        try:
            reply.deliver_all(answers)
        except Exception:  # one reply target's bug must not leave the batch's other senders unanswered
            log.exception("a batch reply failed")
    for ref, answers in to_actors.values():
        safe_tell(ref, answers[0] if len(answers) == 1 else WriteResults(tuple(answers)))


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


class WriterQueue:
    """Commands waiting for the writer, plus the "a Drain is already on its way" flag.

    Shared by the writer actor and every WriterHandle; both sides are
    thread-safe (SimpleQueue, and a lock around the flag).
    """

    def __init__(self) -> None:
        self.pending: queue.SimpleQueue[tuple[WriteCommand, ReplyTo]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._wake_sent = False

    def put(self, item: tuple[WriteCommand, ReplyTo]) -> bool:
        """Queue `item`; True when the caller must tell the writer a Drain."""
        self.pending.put(item)
        with self._lock:
            if self._wake_sent:
                return False
            self._wake_sent = True
            return True

    def woken(self) -> None:
        """Called by the writer before it drains: the next put must wake it again."""
        with self._lock:
            self._wake_sent = False

    def take(self, limit: int) -> list[tuple[WriteCommand, ReplyTo]]:
        batch: list[tuple[WriteCommand, ReplyTo]] = []
        while len(batch) < limit:
            try:
                batch.append(self.pending.get_nowait())
            except queue.Empty:
                break
        return batch

    def wait_for_one(self, timeout: float) -> tuple[WriteCommand, ReplyTo] | None:
        """The next queued item, waiting at most `timeout` seconds for one (None: none came)."""
        try:
            return self.pending.get(timeout=timeout)
        except queue.Empty:
            return None

    def fail_all(self) -> None:
        """Answer everything still queued with WriterStopped."""
        while True:
            batch = self.take(1000)
            if not batch:
                return
            for command, reply_to in batch:
                deliver(reply_to, WriteResult(False, None, WriterStopped.code, str(WriterStopped()),
                                              command.correlation_id))


class _Waiter:
    """The lightest blocking reply slot: a lock the writer releases.

    `execute` is on the hot path of every edge caller; a pykka future costs a
    Queue with two Conditions, this costs one lock.
    """

    __slots__ = ("_lock", "_result")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._result: WriteResult | None = None

    def __call__(self, result: WriteResult) -> None:
        self._result = result
        self._lock.release()

    def wait(self, timeout: float) -> WriteResult:
        if not self._lock.acquire(timeout=timeout):
            raise TimeoutError(f"no answer from the database writer within {timeout} s")
        assert self._result is not None
        return self._result


class _LeaseCell:
    """The host epoch a handle stamps on commands and when the host's lease runs out, shared by
    every holder of that handle: the lease actor moves both (renewals, taking the lease again)
    and every actor sees it at once. On a runner host (docs/runners.md) it holds the runner
    identity (runner id, runner lease epoch) stamped instead, and its runner lease's expiry."""

    __slots__ = ("epoch", "expires_at", "runner")

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch
        self.expires_at: float | None = None
        self.runner: tuple[str, int] | None = None


class WriterHandle:
    """Thread-safe way in to the writer: the only object other code holds.

    `submit` never blocks; `execute` blocks on the result and is for the
    edges only (CLI, tests, embedding, start-up), never between actors. A
    handle made `with_epoch` stamps that host epoch on every command; the
    lease keeps `lease_expires_at` current and moves the epoch forward
    (`advance_epoch`) when it takes the lease again.
    """

    def __init__(self, ref: pykka.ActorRef[Any], writer_queue: WriterQueue, host_epoch: int | None = None) -> None:
        self.ref = ref
        self._queue = writer_queue
        self._lease = _LeaseCell(host_epoch)

    @property
    def host_epoch(self) -> int | None:
        return self._lease.epoch

    @property
    def lease_expires_at(self) -> float | None:
        """When the host's lease runs out (None: not known, e.g. a handle without a lease)."""
        return self._lease.expires_at

    def with_epoch(self, epoch: int) -> WriterHandle:
        return WriterHandle(self.ref, self._queue, epoch)

    def advance_epoch(self, epoch: int) -> None:
        """Stamp `epoch` from now on, for every holder of this handle (called by the lease only)."""
        self._lease.epoch = epoch

    @property
    def runner(self) -> tuple[str, int] | None:
        """(runner id, runner lease epoch) this handle stamps on commands; None on a host."""
        return self._lease.runner

    def as_runner(self, runner_id: str, lease_epoch: int) -> None:
        """Stamp this runner identity on every command from now on, for every holder of this handle: a
        runner host's writes are fenced by its runner lease, never by a host epoch (called once, at
        the runner's start, before any other actor holds the handle)."""
        self._lease.runner = (runner_id, lease_epoch)

    def lease_renewed(self, expires_at: float) -> None:
        """Record the lease's new expiry (called by the lease only)."""
        self._lease.expires_at = expires_at

    def submit(self, command: WriteCommand, reply_to: ReplyTo = None) -> None:
        runner = self._lease.runner
        if runner is not None:
            if command.runner_id is None:
                command = replace(command, runner_id=runner[0], runner_lease_epoch=runner[1])
        elif command.host_epoch is None and self.host_epoch is not None:
            command = replace(command, host_epoch=self.host_epoch)
        if not self.ref.is_alive():
            deliver(reply_to, WriteResult(False, None, WriterStopped.code, str(WriterStopped()), command.correlation_id))
            return
        if self._queue.put((command, reply_to)) and not safe_tell(self.ref, Drain()):
            self._queue.fail_all()

    def future(self, name: str, args: dict[str, Any], host_epoch: int | None = None) -> pykka.Future[WriteResult]:
        fut: pykka.Future[WriteResult] = pykka.ThreadingFuture()
        self.submit(WriteCommand(name, args, host_epoch), fut)
        return fut

    def execute(self, name: str, args: dict[str, Any], *, host_epoch: int | None = None,
                timeout: float = 30.0) -> WriteResult:
        waiter = _Waiter()
        self.submit(WriteCommand(name, args, self.host_epoch if host_epoch is None else host_epoch), waiter)
        return waiter.wait(timeout)

    def call(self, name: str, args: dict[str, Any], **kwargs: Any) -> Any:
        """`execute(...).unwrap()`: the value, or the typed error."""
        return self.execute(name, args, **kwargs).unwrap()

    def stats(self, timeout: float = 5.0) -> WriterStats:
        return self.ref.ask(GetWriterStats(), timeout=timeout)


#: How long the writer waits for late senders before a batch (see DatabaseWriter._gather): until
#: none arrived for GATHER_QUIET_S, and never longer than GATHER_MAX_S.
GATHER_QUIET_S = 0.00005
GATHER_MAX_S = 0.0005
#: How long a batch of nothing but pipelined results waits for the next ones (see _gather).
PIPELINE_QUIET_S = 0.0005
PIPELINE_MAX_S = 0.002


class DatabaseWriter(CoreActor):
    actor_name = "writer"

    def __init__(self, database: DatabaseLocation, options: StoreOptions = StoreOptions(), *,
                 writer_queue: WriterQueue, supervisor: pykka.ActorRef[Any] | None = None,
                 max_batch: int = 1000, clock: Callable[[], float] = time.time,
                 board: HostBoard | None = None, idle_s: float = 1.0,
                 batch_observer: BatchObserver | None = None) -> None:
        """Runs in the caller's thread: stores arguments only.

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
        self._queue = writer_queue
        self._db: Any = None
        self._subscribers: dict[pykka.ActorRef[Any], frozenset[str] | None] = {}  # → the tables it follows
        self._commits = 0
        self._commands = 0
        self._failed_batches = 0
        self._last_batch = 0
        self._conflict_retries = 0
        self._conflicts_given_up = 0
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
        self._subscribers[message.subscriber] = message.tables

    def _unsubscribe(self, message: Unsubscribe) -> None:
        self._subscribers.pop(message.subscriber, None)

    def _drain(self, _message: Drain) -> None:
        self._queue.woken()
        while True:
            batch = self._queue.take(self._max_batch)
            if not batch:
                return
            if len(batch) < self._max_batch:
                batch = self._gather(batch)
            try:
                self._apply(batch)
            except BaseException:
                # The actor is about to die; no sender may wait forever.
                for command, reply_to in batch:
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
        outcome = apply_batch(self._db, [command for command, _ in batch], now, commit_seq=self._commits + 1,
                              clock=self._clock)
        seconds = time.perf_counter() - started if observer is not None else 0.0
        self._last_batch = len(batch)
        if outcome.conflict_retries:
            self._conflict_retries += outcome.conflict_retries
            self._conflicts_given_up += not outcome.committed
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
        _deliver_batch(batch, outcome.results)
        if outcome.committed and outcome.changes.finished:
            log_finished_runs(outcome.changes.finished)
        if outcome.committed and (outcome.changes.tables or outcome.changes.runs):
            changed = outcome.changes.tables
            notice = ChangeNotice(seq, tuple(sorted(changed)), tuple(sorted(outcome.changes.runs)), now)
            for subscriber, tables in list(self._subscribers.items()):
                if tables is not None and tables.isdisjoint(changed):
                    continue
                if not safe_tell(subscriber, notice):
                    del self._subscribers[subscriber]
        if observer is not None:
            try:
                observer(len(batch), seconds, outcome.committed)
            except Exception:  # an observer's bug must not stop the writer
                log.exception("the writer's batch observer failed")

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
        _deliver_batch(batch, [WriteResult(False, None, DiskFull.code, error, command.correlation_id)
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
                "disk_full": self._room.state(),
                "at": now}

    def _stats(self, _message: GetWriterStats) -> WriterStats:
        return self._stats_at(self._clock())

    def _stats_at(self, now: float) -> WriterStats:
        window = [(t, n) for t, n in self._recent if now - t <= 10.0]
        span = max(now - window[0][0], 1.0) if window else 1.0
        return WriterStats(
            commits=self._commits, commands=self._commands, failed_batches=self._failed_batches,
            queue_depth=self._queue.pending.qsize(), commits_per_s=len(window) / span,
            commands_per_s=sum(n for _, n in window) / span, last_batch_size=self._last_batch,
            conflict_retries=self._conflict_retries, conflicts_given_up=self._conflicts_given_up,
        )


def start_writer(database: DatabaseLocation, options: StoreOptions = StoreOptions(), *,
                 supervisor: pykka.ActorRef[Any] | None = None, **kwargs: Any) -> WriterHandle:
    """Start a DatabaseWriter and return its handle (the ref is `handle.ref`)."""
    writer_queue = WriterQueue()
    ref = DatabaseWriter.start(database, options, writer_queue=writer_queue, supervisor=supervisor, **kwargs)
    return WriterHandle(ref, writer_queue)
