"""How a write batch reaches PostgreSQL: statements deferred and sent together, one round trip per
answer the batch needs (store/engines/pg_connection.py, store/batch.py), with every fence still
inside the transaction and a conflict still retried whole. Counted with the database's own counter
(`RoundTrips`), never timed."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from test_store_regressions import Store

from piwf_actors.store.batch import apply_batch
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.requests import WriteCommand

NOW = 1000.0


def _trips(store: Store) -> tuple[int, int]:
    counter = store.db.round_trips
    return counter.count, counter.statements


def _apply(store: Store, commands: list[tuple[str, dict[str, Any]]], **kwargs: Any) -> Any:
    return apply_batch(store.db, [WriteCommand(name, args, store.epoch) for name, args in commands], NOW, **kwargs)


@pytest.fixture
def store(pg_database: PostgresDatabase) -> Any:
    s = Store(pg_database)
    yield s
    s.db.close()


def test_a_batch_of_hot_commands_costs_round_trips_per_answer_not_per_statement(store: Store) -> None:
    """Run starts (each with its idempotency key), then claims: the round trips of the batch grow with
    the answers its commands read, far below its statements, and a batch of 2N costs less than two of N."""
    def starts(first: int, n: int) -> list[tuple[str, dict[str, Any]]]:
        return [("run.start", {"spec": {"workflow": "w", "input": {"i": i}}, "client_id": "c",
                               "idempotency_key": f"k{i}"}) for i in range(first, first + n)]

    costs = {}
    for n, first in ((4, 0), (8, 100)):
        before = _trips(store)
        outcome = _apply(store, starts(first, n))
        assert outcome.committed and all(r.ok for r in outcome.results), outcome
        after = _trips(store)
        costs[n] = (after[0] - before[0], after[1] - before[1])
    for n, (trips, statements) in costs.items():
        # Per run.start: its idempotency record read; per batch: BEGIN with the lease and clock reads,
        # COMMIT with the inserts still queued.
        assert trips <= n + 2, (n, trips, statements)
        # The rest travelled with them. (A start's records, run row and events are held back and
        # inserted together per batch, store/batch_connection.py: about 2.5 statements a start, not 3.)
        assert statements >= 2 * n and statements > trips + n // 2, (n, trips, statements)
    assert costs[8][0] < 2 * costs[4][0], costs

    before = _trips(store)
    outcome = _apply(store, [("scheduler.claim_next", {"token_hash": "t" * 64, "launch_id": f"l{i}",
                                                       "claim_lease_s": 60}) for i in range(6)])
    assert outcome.committed and all(r.ok and r.value for r in outcome.results), outcome
    trips, statements = (a - b for a, b in zip(_trips(store), before, strict=True))
    # A claim reads what it needs one answer at a time (the queue, the run it took, its source):
    # three round trips each at most, its writes travelling with those reads.
    assert trips <= 3 * 6 + 2 and trips < statements, (trips, statements)


def test_the_same_batch_with_savepoints_sends_each_statement_alone(store: Store) -> None:
    """The pass with savepoints (after a command failed) does not defer: a statement's failure is met in
    its own command there. The difference in round trips shows which pass ran."""
    commands = [("run.create", {"workflow": "w", "run_id": f"r{i}", "input": {}}) for i in range(3)]
    before = _trips(store)
    assert _apply(store, commands).committed
    deferred = _trips(store)[0] - before[0]
    before = _trips(store)
    assert _apply(store, [(name, {**args, "run_id": args["run_id"] + "b"}) for name, args in commands],
                  savepoints=True).committed
    one_by_one = _trips(store)
    assert one_by_one[0] - before[0] == one_by_one[1] - before[1]  # one round trip per statement
    assert deferred < (one_by_one[0] - before[0]) / 2, (deferred, one_by_one[0] - before[0])


def test_a_stale_fence_still_refuses_its_command_alone_in_a_deferred_batch(store: Store) -> None:
    """The host lease is read inside the transaction, with the clock, even though nothing waits for it
    until the first fenced command: a command carrying an older epoch is refused, its batch-mates commit."""
    commands = [WriteCommand("run.create", {"workflow": "w", "run_id": "ok1", "input": {}}, store.epoch),
                WriteCommand("run.create", {"workflow": "w", "run_id": "stale", "input": {}}, store.epoch - 1),
                WriteCommand("run.create", {"workflow": "w", "run_id": "ok2", "input": {}}, store.epoch)]
    before = _trips(store)
    outcome = apply_batch(store.db, commands, NOW)
    assert [r.ok for r in outcome.results] == [True, False, True]
    assert outcome.results[1].error_code == "stale_epoch"
    assert sorted(r[0] for r in store.db.execute_sql("SELECT run_id FROM run").fetchall()) == ["ok1", "ok2"]
    trips, statements = (a - b for a, b in zip(_trips(store), before, strict=True))
    assert trips < statements, (trips, statements)  # it was the deferred pass that refused it


#: Set by the conflict test: commits another session's transaction the first time the command runs.
_MIDWAY: dict[str, Any] = {}


@command("test.read_one_write_other")
def _read_one_write_other(ctx: WriteContext, args: dict[str, Any]) -> int:
    """Reads run `read` (an answer the batch waits for), then writes run `write` (deferred)."""
    _MIDWAY["calls"] = _MIDWAY.get("calls", 0) + 1
    ctx.conn.execute("SELECT revision FROM run WHERE run_id = ?", (args["read"],)).fetchone()
    hook = _MIDWAY.pop("hook", None)
    if hook is not None:
        hook()
    ctx.conn.execute("UPDATE run SET steps = steps + 1 WHERE run_id = ?", (args["write"],))
    return 1


def test_a_conflict_met_where_the_deferred_statements_are_sent_retries_the_whole_batch(store: Store,
                                                                                     pg_database: PostgresDatabase) -> None:
    """Another host's transaction read `b` and wrote `a`; this batch reads `a`, then writes `b`, which is
    only sent with its COMMIT, after the other committed: SERIALIZABLE refuses this batch there (a
    serialization failure raised where the queue is sent, not at the statement's call), and the writer
    runs the whole batch again, which then commits once."""
    for run_id in ("a", "b"):
        store.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
    other = psycopg.connect(pg_database.url, autocommit=True)
    try:
        other.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        other.execute("SELECT steps FROM run WHERE run_id = 'b'").fetchone()
        other.execute("UPDATE run SET revision = revision + 1 WHERE run_id = 'a'")
        _MIDWAY.clear()
        _MIDWAY["hook"] = lambda: other.execute("COMMIT")
        outcome = apply_batch(store.db, [
            WriteCommand("run.create", {"workflow": "w", "run_id": "c", "input": {}}, store.epoch),
            WriteCommand("test.read_one_write_other", {"read": "a", "write": "b"}, store.epoch)], NOW)
    finally:
        other.close()
    assert outcome.committed and outcome.conflict_retries == 1, outcome
    assert [r.ok for r in outcome.results] == [True, True]
    assert _MIDWAY["calls"] == 2  # the first attempt, refused at its COMMIT, and the retry
    assert store.db.execute_sql("SELECT run_id, steps FROM run ORDER BY run_id").fetchall() == \
        [("a", 0), ("b", 1), ("c", 0)]


@command("test.append_then_wait")
def _append_then_wait(ctx: WriteContext, args: dict[str, Any]) -> None:
    """Writes, then keeps the transaction open on the server for `seconds` (a host paused mid-batch)."""
    ctx.conn.execute("UPDATE run SET steps = steps + 1 WHERE run_id = ?", (args["run_id"],))
    ctx.conn.execute("SELECT pg_sleep(?)", (args["seconds"],)).fetchone()


def test_a_lease_that_runs_out_before_commit_is_checked_by_the_server_with_the_commit(store: Store) -> None:
    """The time fence at COMMIT travels with it (`lease_check_sql`): a batch whose host lease expires
    by the database's clock while it runs commits nothing and answers lease_expired."""
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    server_now = float(store.db.execute_sql("SELECT extract(epoch from clock_timestamp())").fetchone()[0])
    store.db.execute_sql("UPDATE host_state SET expires_at = ? WHERE id = 1", (server_now + 0.5,))
    outcome = apply_batch(store.db, [WriteCommand("test.append_then_wait", {"run_id": "r1", "seconds": 1.0},
                                                  store.epoch)], NOW, clock=time.time)
    assert not outcome.committed
    assert outcome.results[0].error_code == "lease_expired", outcome
    assert store.db.execute_sql("SELECT steps FROM run WHERE run_id = 'r1'").fetchone() == (0,)
    # With an unexpired lease the same batch commits: the check refuses only what it should.
    store.db.execute_sql("UPDATE host_state SET expires_at = ? WHERE id = 1", (server_now + 600,))
    outcome = apply_batch(store.db, [WriteCommand("test.append_then_wait", {"run_id": "r1", "seconds": 0.0},
                                                  store.epoch)], NOW, clock=time.time)
    assert outcome.committed and outcome.results[0].ok, outcome
    assert store.db.execute_sql("SELECT steps FROM run WHERE run_id = 'r1'").fetchone() == (1,)


def test_a_command_failing_in_a_deferred_queue_is_undone_alone_batch_after_batch(store: Store) -> None:
    """A statement that fails inside a queue sent together makes the server skip the rest of the queue
    and abort the transaction: the batch's pass with savepoints refuses that command alone, and the
    batches after it, reusing the same statements (which psycopg prepares from their sixth use), still
    work — the prepared-statement cache was left consistent by the aborted queues and the rollbacks."""
    store.db.execute_sql("""CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
                            BEGIN IF NEW.workflow = 'boom' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$""")
    store.db.execute_sql("CREATE TRIGGER boom BEFORE INSERT ON run FOR EACH ROW EXECUTE FUNCTION boom()")
    for i in range(12):
        outcome = _apply(store, [("run.create", {"workflow": "a", "run_id": f"a{i}", "input": {}}),
                                 ("run.create", {"workflow": "boom", "run_id": f"boom{i}", "input": {}}),
                                 ("run.create", {"workflow": "b", "run_id": f"b{i}", "input": {}})])
        assert outcome.committed, (i, outcome)
        assert [r.ok for r in outcome.results] == [True, False, True], (i, outcome.results)
        assert outcome.results[1].error_code == "command_failed", (i, outcome.results[1])
        outcome = _apply(store, [("run.create", {"workflow": "c", "run_id": f"c{i}", "input": {}})])
        assert outcome.committed and outcome.results[0].ok, (i, outcome.results)
    assert store.db.execute_sql("SELECT count(*) FROM run").fetchone()[0] == 36
