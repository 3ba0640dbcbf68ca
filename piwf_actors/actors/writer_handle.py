"""The way in to the `DatabaseWriter`: the queue it drains, the handle every other part of the host holds,
and the reply targets its answers go to.

Kept apart from the writer actor (writer.py) because everything that writes holds a `WriterHandle`
and nothing but the host's wiring needs the actor: submitting a command is a put on the queue
(and a `Drain` told to the writer when it is not already on its way), answering one is `deliver`.
"""

from __future__ import annotations

import logging
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pykka

from piwf_actors.actors.base import safe_tell
from piwf_actors.errors import WriterStopped
from piwf_actors.store.batch_plan import RENEWALS
from piwf_actors.store.requests import WriteCommand, WriteResult, WriteResults

log = logging.getLogger(__name__)


class BatchReply(ABC):
    """A reply target that takes all of its answers of one batch in one call, in batch order: a
    worker's answers go back to its socket in one send (see worker_link.py). `deliver_all` runs in
    the writer's thread, after COMMIT: it must be quick and must not block."""

    @abstractmethod
    def deliver_all(self, results: list[WriteResult]) -> None: ...


ReplyTo = pykka.Future[WriteResult] | pykka.ActorRef[Any] | BatchReply | Callable[[WriteResult], None] | None
@dataclass(frozen=True, slots=True)
class Drain:
    """Apply whatever is queued."""


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
    #: SQL statements the writer's batches sent, committed or not (store/statement_count.py).
    statements: int = 0
    #: How many times the writer's connection waited for the database server's answer, since the
    #: host started (PostgreSQL: a statement sent alone or a pipeline sync, docs/postgresql.md);
    #: None on SQLite, which answers in the host's process.
    round_trips: int | None = None


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


def deliver_batch(batch: list[tuple[WriteCommand, ReplyTo]], results: list[WriteResult]) -> None:
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


#: The commands that may make a run claimable at once, and so take the scheduler's standing claim
#: along into their batch (see WriterQueue.offer).
CLAIM_TAKERS = frozenset({"run.start"})


class WriterQueue:
    """Commands waiting for the writer, plus the "a Drain is already on its way" flag, plus at most
    one standing offer, plus a lane of their own for lease renewals.

    Shared by the writer actor and every WriterHandle; both sides are
    thread-safe (SimpleQueue, and a lock around the flag and the offer).

    The offer is the scheduler's claim for its idle slots while nothing is
    there to claim (actors/standing_claim.py): instead of the scheduler
    claiming after the notice of the next `run.start` (one more commit and
    two hand-offs before a fresh run starts), the writer applies the claim as
    the last command of the batch that holds that run.start, in the same
    transaction, and answers the scheduler as if it had just sent it. The
    scheduler withdraws an offer not taken yet before it claims anything
    else; exactly one of the two wins.

    A lease renewal (`store.batch_plan.RENEWALS`) waits in its lane, not behind
    the other commands: the writer applies it before the next batch, and
    before the next retry of a batch PostgreSQL refused for a conflict
    (DatabaseWriter._commit), so that a renewal never waits out other
    commands' conflicts. It may overtake commands queued before it because
    it only extends a lease its holder still has (store/batch_plan.py).
    """

    def __init__(self) -> None:
        self.pending: queue.SimpleQueue[tuple[WriteCommand, ReplyTo]] = queue.SimpleQueue()
        self.renewals: queue.SimpleQueue[tuple[WriteCommand, ReplyTo]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._wake_sent = False
        self._offer: tuple[WriteCommand, ReplyTo] | None = None

    def put(self, item: tuple[WriteCommand, ReplyTo]) -> bool:
        """Queue `item` (a renewal in its own lane); True when the caller must tell the writer a Drain."""
        (self.renewals if item[0].name in RENEWALS else self.pending).put(item)
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

    def renewal_waiting(self) -> bool:
        """A lease renewal is queued (thread-safe; the writer asks between a batch's retries)."""
        return not self.renewals.empty()

    def take_renewals(self) -> list[tuple[WriteCommand, ReplyTo]]:
        renewals: list[tuple[WriteCommand, ReplyTo]] = []
        while True:
            try:
                renewals.append(self.renewals.get_nowait())
            except queue.Empty:
                return renewals

    def depth(self) -> int:
        """Commands waiting (approximate, as `qsize` is)."""
        return self.pending.qsize() + self.renewals.qsize()

    def offer(self, item: tuple[WriteCommand, ReplyTo]) -> None:
        with self._lock:
            self._offer = item

    def withdraw_offer(self, correlation_id: str | None) -> bool:
        """Take back the offer sent under `correlation_id`; False when the writer took it already."""
        with self._lock:
            if self._offer is None or self._offer[0].correlation_id != correlation_id:
                return False
            self._offer = None
            return True

    def take_offer(self) -> tuple[WriteCommand, ReplyTo] | None:
        """For the writer: the standing offer, now its to apply (None: there is none)."""
        with self._lock:
            offer, self._offer = self._offer, None
            return offer

    def wait_for_one(self, timeout: float) -> tuple[WriteCommand, ReplyTo] | None:
        """The next queued item, waiting at most `timeout` seconds for one (None: none came)."""
        try:
            return self.pending.get(timeout=timeout)
        except queue.Empty:
            return None

    def fail_all(self) -> None:
        """Answer everything still queued, and a standing offer, with WriterStopped."""
        offer = self.take_offer()
        if offer is not None:
            deliver(offer[1], WriteResult(False, None, WriterStopped.code, str(WriterStopped()),
                                          offer[0].correlation_id))
        while True:
            batch = self.take_renewals() + self.take(1000)
            if not batch:
                return
            for command, reply_to in batch:
                deliver(reply_to, WriteResult(False, None, WriterStopped.code, str(WriterStopped()),
                                              command.correlation_id))


class Waiter:
    """The lightest blocking reply slot: a lock the writer releases.

    `execute` is on the hot path of every edge caller; a pykka future costs a
    Queue with two Conditions, this costs one lock. (bench/writer_process.py's
    forwarder answers its senders with it too.)
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

    def _stamped(self, command: WriteCommand) -> WriteCommand:
        runner = self._lease.runner
        if runner is not None:
            if command.runner_id is None:
                command = replace(command, runner_id=runner[0], runner_lease_epoch=runner[1])
        elif command.host_epoch is None and self.host_epoch is not None:
            command = replace(command, host_epoch=self.host_epoch)
        return command

    def offer(self, command: WriteCommand, reply_to: ReplyTo) -> None:
        """Leave `command` (a claim) with the writer, to be applied with the next batch that holds a
        command of CLAIM_TAKERS (see WriterQueue); it is answered like a submitted one."""
        command = self._stamped(command)
        if not self.ref.is_alive():
            deliver(reply_to, WriteResult(False, None, WriterStopped.code, str(WriterStopped()), command.correlation_id))
            return
        self._queue.offer((command, reply_to))

    def withdraw_offer(self, correlation_id: str | None) -> bool:
        """Take the offer back; False when the writer took it already (its answer is on the way)."""
        return self._queue.withdraw_offer(correlation_id)

    def submit(self, command: WriteCommand, reply_to: ReplyTo = None) -> None:
        command = self._stamped(command)
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
        waiter = Waiter()
        self.submit(WriteCommand(name, args, self.host_epoch if host_epoch is None else host_epoch), waiter)
        return waiter.wait(timeout)

    def call(self, name: str, args: dict[str, Any], **kwargs: Any) -> Any:
        """`execute(...).unwrap()`: the value, or the typed error."""
        return self.execute(name, args, **kwargs).unwrap()

    def stats(self, timeout: float = 5.0) -> WriterStats:
        return self.ref.ask(GetWriterStats(), block=True, timeout=timeout)
