"""A lease command never shares the fate of the commands drained with it (store/batch_plan.py,
actors/writer.py).

The writer groups what it drained into one transaction; on PostgreSQL a transaction that keeps
failing serialization is given up after `CONFLICT_RETRIES`, and every command in it fails. A lease
renewal that rode in such a batch failed with it, and two of those in a row lost a runner host its
lease under contention. Here a real writer on a real PostgreSQL database drains a renewal between
two commands that fail serialization at every attempt (`test.always_conflicts`, registered only
here, raises SQLSTATE 40001 from the server): the renewal commits, the others are given up. A
renewal queued while a batch keeps conflicting goes between two of its retries, not after all of
them.

On both engines: a lease command other than a renewal keeps its place between the commands
drained with it (a release is not moved ahead of the writes its holder queued before it).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest

from piwf_actors.actors.writer import DatabaseWriter, Drain, WriterHandle, WriterQueue
from piwf_actors.errors import TransactionConflict
from piwf_actors.store.batch import CONFLICT_RETRIES
from piwf_actors.store.batch_plan import transactions
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.database import open_store
from piwf_actors.store.requests import WriteCommand, WriteResult

CONFLICTS = "test.always_conflicts"
#: How many times `test.always_conflicts` ran (every attempt of every transaction it was in).
_attempts = itertools.count()
#: Called (and dropped) by the next attempt of `test.always_conflicts`, in the writer's thread.
_on_attempt: list[Callable[[], None]] = []


@command(CONFLICTS)
def _always_conflicts(ctx: WriteContext, _args: dict[str, Any]) -> None:
    """Fails serialization every time, as a claim that always meets another host's transaction would."""
    next(_attempts)
    while _on_attempt:
        _on_attempt.pop()()
    ctx.conn.execute("DO $$ BEGIN RAISE EXCEPTION 'another host''s transaction (injected)' "
                     "USING ERRCODE = 'serialization_failure'; END $$")


HOST_LEASE = {"host_id": "h1", "token_hash": "t" * 64, "pid": os.getpid(), "process_start_identity": "1.0",
              "lease_s": 60}
RUNNER_LEASE = {"runner_id": "runner-1", "token_hash": "r" * 64, "pid": os.getpid(), "machine_id": "m",
                "max_workers": 3, "lease_s": 60}


class Writer:
    """A real writer whose queue the test fills before it tells the writer to drain, so that what
    it put there is drained, in that order, as one batch."""

    def __init__(self, database: Any) -> None:
        open_store(database).close()
        self.queue = WriterQueue()
        self.ref = DatabaseWriter.start(database, writer_queue=self.queue)
        self.handle = WriterHandle(self.ref, self.queue)
        self.database = database

    def drain_together(self, *commands: WriteCommand, timeout: float = 60) -> list[WriteResult]:
        futures: list[pykka.Future[WriteResult]] = []
        for cmd in commands:
            future: pykka.Future[WriteResult] = pykka.ThreadingFuture()
            self.queue.put((cmd, future))
            futures.append(future)
        self.ref.tell(Drain())
        return [future.get(timeout=timeout) for future in futures]

    def row(self, sql: str) -> tuple[Any, ...]:
        db = open_store(self.database)
        try:
            return db.execute_sql(sql).fetchone()
        finally:
            db.close()


@pytest.fixture
def pg_writer(pg_database) -> Iterator[Writer]:
    writer = Writer(pg_database)
    yield writer
    writer.ref.stop()


@pytest.fixture
def writer(database) -> Iterator[Writer]:
    w = Writer(database)
    yield w
    w.ref.stop()


def test_a_host_lease_renewal_commits_while_the_commands_drained_with_it_keep_conflicting(pg_writer) -> None:
    epoch = pg_writer.handle.call("lease.acquire", HOST_LEASE)["epoch"]
    (expires_before,) = pg_writer.row("SELECT expires_at FROM host_state")
    identity = {key: HOST_LEASE[key] for key in ("host_id", "token_hash", "pid", "process_start_identity")}
    attempts_before = next(_attempts)
    time.sleep(0.01)  # the renewal's expiry must be able to move past the acquire's (the server's clock)

    conflicting, renewal, conflicting_too = pg_writer.drain_together(
        WriteCommand(CONFLICTS, {}, epoch),
        WriteCommand("lease.renew", {**identity, "epoch": epoch, "lease_s": 60}),
        WriteCommand(CONFLICTS, {}, epoch))

    # The scenario happened: the batch-mates failed serialization at every attempt and were given up.
    assert next(_attempts) - attempts_before - 1 >= CONFLICT_RETRIES + 1
    for result in (conflicting, conflicting_too):
        assert not result.ok and result.error_code == TransactionConflict.code, result
        assert "SQLSTATE 40001" in (result.error or ""), result
    assert renewal.ok, renewal
    (expires_after,) = pg_writer.row("SELECT expires_at FROM host_state")
    assert expires_after == renewal.value["expires_at"] > expires_before


def test_a_runner_lease_renewal_commits_while_the_commands_drained_with_it_keep_conflicting(pg_writer) -> None:
    pg_writer.handle.call("lease.acquire", HOST_LEASE)  # the active host's (runner commands do not read it)
    runner_epoch = pg_writer.handle.call("runner_lease.acquire", RUNNER_LEASE)["epoch"]
    (expires_before,) = pg_writer.row("SELECT expires_at FROM runner_host WHERE runner_id = 'runner-1'")
    as_runner = {"runner_id": "runner-1", "runner_lease_epoch": runner_epoch}
    attempts_before = next(_attempts)
    time.sleep(0.01)

    conflicting, renewal, conflicting_too = pg_writer.drain_together(
        WriteCommand(CONFLICTS, {}, **as_runner),
        WriteCommand("runner_lease.renew", {"runner_id": "runner-1", "epoch": runner_epoch,
                                            "token_hash": RUNNER_LEASE["token_hash"], "lease_s": 60}, **as_runner),
        WriteCommand(CONFLICTS, {}, **as_runner))

    assert next(_attempts) - attempts_before - 1 >= CONFLICT_RETRIES + 1
    for result in (conflicting, conflicting_too):
        assert not result.ok and result.error_code == TransactionConflict.code, result
    assert renewal.ok, renewal
    (expires_after,) = pg_writer.row("SELECT expires_at FROM runner_host WHERE runner_id = 'runner-1'")
    assert expires_after == renewal.value["expires_at"] > expires_before


def test_a_lease_release_keeps_its_place_among_the_commands_drained_with_it(writer) -> None:
    epoch = writer.handle.call("lease.acquire", HOST_LEASE)["epoch"]
    identity = {key: HOST_LEASE[key] for key in ("host_id", "token_hash", "pid", "process_start_identity")}
    before, release, after = writer.drain_together(
        WriteCommand("run.create", {"workflow": "w", "run_id": "run_before"}, epoch),
        WriteCommand("lease.release", {**identity, "epoch": epoch}),
        WriteCommand("run.create", {"workflow": "w", "run_id": "run_after"}, epoch))
    # Queued before the release: written under the lease. Queued after it: the lease is gone.
    assert before.ok and release.ok and release.value is True
    assert not after.ok and after.error_code == "stale_epoch", after
    assert writer.row("SELECT count(*) FROM run") == (1,)


def test_commands_queued_before_a_renewal_are_written_under_the_lease(writer) -> None:
    epoch = writer.handle.call("lease.acquire", HOST_LEASE)["epoch"]
    identity = {key: HOST_LEASE[key] for key in ("host_id", "token_hash", "pid", "process_start_identity")}
    results = writer.drain_together(
        WriteCommand("run.create", {"workflow": "w", "run_id": "run_1"}, epoch),
        WriteCommand("lease.renew", {**identity, "epoch": epoch, "lease_s": 60}),
        WriteCommand("run.create", {"workflow": "w", "run_id": "run_2"}, epoch),
        WriteCommand("run.create", {"workflow": "w", "run_id": "run_2"}, epoch))  # refused: exists
    assert [r.ok for r in results] == [True, True, True, False], results
    assert writer.row("SELECT count(*) FROM run") == (2,)


def test_lease_commands_travel_alone_each_in_its_place() -> None:
    drained = ["claim", "lease.renew", "note", "lease.release", "note-2", "runner_lease.renew"]
    assert transactions(drained, str) == [
        ["claim"], ["lease.renew"], ["note"], ["lease.release"], ["note-2"], ["runner_lease.renew"]]
    assert transactions(["claim", "note"], str) == [["claim", "note"]]
    assert transactions(["runner_lease.acquire"], str) == [["runner_lease.acquire"]]
    assert transactions([], str) == []


def test_a_renewal_queued_while_a_batch_keeps_conflicting_goes_before_that_batch_retries_again(pg_writer) -> None:
    """The renewal does not wait out the other batch's retries: it is applied between two of them."""
    epoch = pg_writer.handle.call("lease.acquire", HOST_LEASE)["epoch"]
    identity = {key: HOST_LEASE[key] for key in ("host_id", "token_hash", "pid", "process_start_identity")}
    answered: list[tuple[str, WriteResult]] = []
    done = threading.Event()

    def reply(name: str):
        def deliver(result: WriteResult) -> None:
            answered.append((name, result))
            if len(answered) == 2:
                done.set()
        return deliver

    renewal = WriteCommand("lease.renew", {**identity, "epoch": epoch, "lease_s": 60})
    attempts_before = next(_attempts)
    # The conflicting command's first attempt queues the renewal, as the lease's ticker would while
    # the writer is busy with that batch.
    _on_attempt.append(lambda: pg_writer.handle.submit(renewal, reply("renewal")))
    pg_writer.handle.submit(WriteCommand(CONFLICTS, {}, epoch), reply("conflicting"))
    assert done.wait(60), answered

    assert [name for name, _ in answered] == ["renewal", "conflicting"]
    (_, renewed), (_, conflicting) = answered
    assert renewed.ok, renewed
    assert not conflicting.ok and conflicting.error_code == TransactionConflict.code, conflicting
    # One budget of retries for the batch, across the renewal that went between two of them.
    assert next(_attempts) - attempts_before - 1 == CONFLICT_RETRIES + 1
    stats = pg_writer.handle.stats()
    assert (stats.conflict_retries, stats.conflicts_given_up) == (CONFLICT_RETRIES, 1)
