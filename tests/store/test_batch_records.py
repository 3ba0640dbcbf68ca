"""Records a write batch holds back and the facts it keeps instead of reading them again
(store/batch_connection.py), on both engines (`database`): what a command sees and what commits must
be what one statement each gave.

- a worker message resent in the batch that holds its record is answered from that record (replayed),
  and one resent in a later batch from the inserted row;
- a launch that ends in the batch that holds its records inserts none of them, and a resend after
  the end is `claimLost`, as when the records were deleted with the claim;
- a client command resent under its idempotency key in the same batch is `adopted`, and the key
  reused with another request in the same batch is a `conflict`;
- a batch stores each blob once, and stores it again after a savepoint that held it was rolled back;
- a run claimed and ended in one batch leaves neither its claim nor its worker row;
- the events of a message whose run's seq came with its context read number on from the stored ones;
- a command that only held a delete back and then refused is undone: the rows stay.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_store_regressions import TOKEN, Store

from piwf_actors.errors import Rejected
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.batch_connection import BatchConnection
from piwf_actors.store.blobs import put_blob
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.requests import WriteCommand

NOW = 1000.0


@command("test.store_blob")
def _store_blob(ctx: WriteContext, args: dict[str, Any]) -> str:
    key = put_blob(ctx.conn, args["data"].encode(), ctx.now)
    if args.get("refuse"):
        raise Rejected("refused after storing a blob")
    return key


@command("test.hold_delete_then_refuse")
def _hold_delete_then_refuse(ctx: WriteContext, args: dict[str, Any]) -> None:
    assert isinstance(ctx.conn, BatchConnection)
    ctx.conn.hold_delete("worker_message", "DELETE FROM worker_message WHERE launch_id = ?", args["launch_id"],
                         column=0)
    raise Rejected("refused after holding a delete")


@command("test.hold_delete_then_read")
def _hold_delete_then_read(ctx: WriteContext, args: dict[str, Any]) -> list[int]:
    """`total_changes` before the held delete, while it is held, once it ran (a statement naming its
    table sends it first), and the rows left: on PostgreSQL, where the batch defers its statements,
    what it deleted is counted only at the last reading."""
    assert isinstance(ctx.conn, BatchConnection)
    seen = [ctx.conn.total_changes]
    ctx.conn.hold_delete("worker_message", "DELETE FROM worker_message WHERE launch_id = ?", args["launch_id"],
                         column=0)
    seen.append(ctx.conn.total_changes)
    left = int(ctx.conn.execute("SELECT count(*) FROM worker_message").fetchone()[0])
    return [*seen, ctx.conn.total_changes, left]


class Batches(Store):
    def batch(self, commands: list[tuple[str, dict[str, Any]]], **kwargs: Any) -> list[Any]:
        outcome = apply_batch(self.db, [WriteCommand(name, args, self.epoch) for name, args in commands], NOW,
                              **kwargs)
        assert outcome.committed
        return outcome.results

    def count(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        return int(self.db.execute_sql(sql, params).fetchone()[0])

    def message(self, run_id: str, message_id: str, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        generation, launch_id = self.claims[run_id]
        return {"run_id": run_id, "launch_id": launch_id, "message_id": message_id, "generation": generation,
                "token_hash": TOKEN, "op": op, "payload": payload, "expected_revision": None}


@pytest.fixture
def store(database):
    s = Batches(database)
    yield s
    s.db.close()


def _started(store: Batches, run_id: str = "r1") -> None:
    store.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
    store.claim()


def test_a_worker_message_resent_in_its_batch_or_later_is_answered_from_its_record(store: Batches) -> None:
    _started(store)
    ready = store.message("r1", "m1", "ready", {"start_at": "a"})
    first, again = store.batch([("worker.message", ready), ("worker.message", ready)])
    assert first.unwrap()["outcome"] == "accepted" and "replayed" not in first.unwrap()
    assert again.unwrap() == {**first.unwrap(), "replayed": True}
    assert store.count("SELECT count(*) FROM worker_message WHERE message_id = 'm1'") == 1
    # A later batch finds the inserted record; the same id with another payload is refused.
    (later,) = store.batch([("worker.message", ready)])
    assert later.unwrap() == {**first.unwrap(), "replayed": True}
    other = store.message("r1", "m1", "ready", {"start_at": "b"})
    (clash,) = store.batch([("worker.message", other)])
    assert clash.error_code == "rejected"
    # Within one batch too.
    node = store.message("r1", "m2", "node_finished", {"node_id": "a", "attempt_id": "att1", "new_attempt": True, "attempt_no": 1, "outcome": "ok",
                                                       "output": {"n": 1}, "next": {"node": "b"}})
    node_other = {**node, "payload": {**node["payload"], "output": {"n": 2}}}
    done, refused = store.batch([("worker.message", node), ("worker.message", node_other)])
    assert done.unwrap()["outcome"] == "accepted" and refused.error_code == "rejected"
    assert store.count("SELECT count(*) FROM node_attempt WHERE run_id = 'r1'") == 1


def test_a_launch_that_ends_in_the_batch_inserts_no_records_and_a_resend_after_it_is_claim_lost(
        store: Batches) -> None:
    _started(store)
    ready = store.message("r1", "m1", "ready", {"start_at": "a"})
    end = store.message("r1", "m2", "node_finished", {"node_id": "a", "attempt_id": "att1", "new_attempt": True, "attempt_no": 1, "outcome": "ok",
                                                      "output": {"n": 1}, "next": {"finish": True}})
    results = store.batch([("worker.message", ready), ("worker.message", end), ("worker.message", ready)])
    assert [r.ok for r in results[:2]] == [True, True]
    assert results[2].error_code == "claim_lost"
    assert store.run("r1")[0] == "done"
    assert store.count("SELECT count(*) FROM worker_message") == 0
    assert store.count("SELECT count(*) FROM run_claim") == 0
    assert store.count("SELECT count(*) FROM run_worker") == 0


def test_records_of_an_earlier_batch_go_with_the_claim(store: Batches) -> None:
    _started(store)
    ready = store.message("r1", "m1", "ready", {"start_at": "a"})
    store.batch([("worker.message", ready)])
    assert store.count("SELECT count(*) FROM worker_message") == 1
    _started(store, "r2")  # a second launch whose record stays held while r1's launch ends
    end = store.message("r1", "m2", "node_finished", {"node_id": "a", "attempt_id": "att1", "new_attempt": True,
                                                      "attempt_no": 1, "outcome": "ok", "output": {},
                                                      "next": {"finish": True}})
    results = store.batch([("worker.message", store.message("r2", "m1", "ready", {"start_at": "a"})),
                           ("worker.message", end),
                           ("worker.message", ready)])  # resent after its launch ended, in the same batch
    assert [r.ok for r in results[:2]] == [True, True]
    assert results[2].error_code == "claim_lost"  # not its stored answer: the launch is over
    assert [tuple(r) for r in store.db.execute_sql("SELECT run_id FROM worker_message").fetchall()] == [("r2",)]
    assert [tuple(r) for r in store.db.execute_sql("SELECT run_id FROM run_worker").fetchall()] == [("r2",)]
    assert [tuple(r) for r in store.db.execute_sql("SELECT run_id FROM run_claim").fetchall()] == [("r2",)]


def test_a_client_command_resent_in_its_batch_is_adopted_and_a_reused_key_is_a_conflict(store: Batches) -> None:
    start = {"client_id": "c", "idempotency_key": "k1", "spec": {"workflow": "w", "input": {"i": 1}},
             "payload": {"workflow": "w", "input": {"i": 1}}}
    other = {**start, "spec": {"workflow": "w", "input": {"i": 2}}, "payload": {"workflow": "w", "input": {"i": 2}}}
    first, again, clash = store.batch([("run.start", start), ("run.start", start), ("run.start", other)])
    assert first.unwrap()["outcome"] == "accepted"
    assert again.unwrap()["outcome"] == "adopted"
    assert again.unwrap()["receipt"]["run_id"] == first.unwrap()["receipt"]["run_id"]
    assert clash.error_code == "conflict"
    assert store.count("SELECT count(*) FROM run") == 1
    assert store.count("SELECT count(*) FROM host_command") == 1
    (later,) = store.batch([("run.start", start)])
    assert later.unwrap()["outcome"] == "adopted"


def test_a_batch_stores_a_blob_once_and_again_after_a_rollback_that_undid_it(store: Batches) -> None:
    key = store.batch([("test.store_blob", {"data": "x" * 100}), ("test.store_blob", {"data": "x" * 100})])[0].unwrap()
    assert store.count("SELECT count(*) FROM blob WHERE sha256 = ?", (key,)) == 1
    # With savepoints: the first command's blob is rolled back with it, the second must store it again.
    results = store.batch([("test.store_blob", {"data": "y" * 100, "refuse": True}),
                           ("test.store_blob", {"data": "y" * 100})], savepoints=True)
    assert results[0].error_code == "rejected" and results[1].ok
    assert store.count("SELECT count(*) FROM blob WHERE sha256 = ?", (results[1].value,)) == 1
    # Without: the refusal after a write sends the batch to a second pass with savepoints.
    results = store.batch([("test.store_blob", {"data": "z" * 100, "refuse": True}),
                           ("test.store_blob", {"data": "z" * 100})])
    assert results[0].error_code == "rejected" and results[1].ok
    assert store.count("SELECT count(*) FROM blob WHERE sha256 = ?", (results[1].value,)) == 1


def test_events_number_on_from_the_stored_ones_when_the_seq_comes_with_the_context(store: Batches) -> None:
    _started(store)
    store.batch([("worker.message", store.message("r1", "m1", "ready", {"start_at": "a"}))])
    stored = store.count("SELECT max(seq) FROM run_event WHERE run_id = 'r1'")
    store.batch([("worker.message", store.message("r1", "m2", "node_finished", {
        "node_id": "a", "attempt_id": "att1", "new_attempt": True, "attempt_no": 1, "outcome": "ok", "output": {}, "next": {"finish": True}}))])
    seqs = [row[0] for row in store.db.execute_sql("SELECT seq FROM run_event WHERE run_id = 'r1' ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > stored


def test_a_refusal_after_only_holding_a_delete_keeps_the_rows(store: Batches) -> None:
    """A held delete is a change like a held insert (it moves the change mark): the command that held
    it and refused is undone alone, in the pass with savepoints, so the delete never runs."""
    _started(store)
    store.batch([("worker.message", store.message("r1", "m1", "ready", {"start_at": "a"}))])
    launch_id = store.claims["r1"][1]
    refused, after = store.batch([("test.hold_delete_then_refuse", {"launch_id": launch_id}),
                                  ("run.create", {"workflow": "w", "run_id": "r2", "input": {}})])
    assert refused.error_code == "rejected" and after.ok
    assert store.count("SELECT count(*) FROM worker_message WHERE launch_id = ?", (launch_id,)) == 1


def test_total_changes_never_goes_back_when_a_held_delete_runs(store: Batches) -> None:
    """A held delete counts one change while held; once it ran, the rows it deleted count instead, and
    the count does not go back (a refusal check compares two readings)."""
    _started(store)
    launch_id = store.claims["r1"][1]
    store.batch([("worker.message", store.message("r1", f"m{i}", "ready", {"start_at": "a"})) for i in range(3)])
    (read,) = store.batch([("test.hold_delete_then_read", {"launch_id": launch_id})])
    before, held, ran, left = read.unwrap()
    assert left == 0
    assert held == before + 1 and ran >= held + 2, read.unwrap()  # three rows deleted, one counted before
