"""A batch's run events are held back and inserted together (store/batch_connection.py); what a
command sees and what commits must be exactly what one INSERT per event gave:

- the events of one run across a batch's commands are numbered on from what the run had;
- a command that refuses after appending an event leaves no event (its batch-mates' commit);
- a command that reads a run's events in the same batch sees the ones appended before it;
- an event for a run that does not exist is NotFound, and nothing of that command is kept.

On both engines (PIWF_TEST_DATABASE=postgresql runs them on PostgreSQL).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from piwf_actors.errors import Rejected
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.engines.base import engine_of
from piwf_actors.store.events import append_event
from piwf_actors.store.requests import WriteCommand

NOW = 1000.0


@command("test.events_note")
def _note(ctx: WriteContext, args: dict[str, Any]) -> int | None:
    seq: int | None = 0
    for n in range(args.get("count", 1)):
        seq = append_event(ctx.conn, args["run_id"], "note", ctx.now, payload={"n": n, "tag": args.get("tag")})
    ctx.changes.touch("run_event", args["run_id"])
    if args.get("refuse"):
        raise Rejected("refused after appending")
    return seq


@command("test.events_read")
def _read(ctx: WriteContext, args: dict[str, Any]) -> list[int]:
    return [row[0] for row in ctx.conn.execute("SELECT seq FROM run_event WHERE run_id = ? ORDER BY seq",
                                               (args["run_id"],))]


class _Store:
    def __init__(self, database: Any) -> None:
        self.db = open_store(database, StoreOptions(synchronous="OFF"))
        self.epoch = 0
        self.epoch = self.apply([("lease.acquire", {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(),
                                                    "process_start_identity": "1", "lease_s": 6000})])[0].unwrap()[
                                                        "epoch"]

    def apply(self, commands: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        outcome = apply_batch(self.db, [WriteCommand(name, args, self.epoch) for name, args in commands], NOW)
        assert outcome.committed
        return outcome.results

    def events(self, run_id: str) -> list[tuple[int, str]]:
        return [(seq, payload) for seq, payload in self.db.execute_sql(
            "SELECT seq, payload FROM run_event WHERE run_id = ? ORDER BY seq", (run_id,)).fetchall()]


@pytest.fixture
def store(database: Any) -> Iterator[_Store]:
    s = _Store(database)
    yield s
    s.db.close()


def _run(store: _Store) -> str:
    return store.apply([("run.start", {"spec": {"workflow": "w"}})])[0].unwrap()["receipt"]["run_id"]


def test_events_across_a_batch_are_numbered_on_and_all_commit(store: _Store) -> None:
    run_id = _run(store)
    before = [seq for seq, _ in store.events(run_id)]
    results = store.apply([("test.events_note", {"run_id": run_id, "count": 2, "tag": "a"}),
                           ("test.events_note", {"run_id": run_id, "count": 3, "tag": "b"})])
    last = before[-1]
    # Where the server numbers the events (PostgreSQL's deferred batch) append_event has no number to return.
    numbered_here = not engine_of(store.db).defers_statements
    assert [r.unwrap() for r in results] == ([last + 2, last + 5] if numbered_here else [None, None])
    assert [seq for seq, _ in store.events(run_id)] == list(range(1, last + 6))


def test_a_refusal_after_appending_takes_its_events_with_it(store: _Store) -> None:
    run_id = _run(store)
    before = store.events(run_id)
    results = store.apply([("test.events_note", {"run_id": run_id, "tag": "kept-1"}),
                           ("test.events_note", {"run_id": run_id, "count": 2, "tag": "undone", "refuse": True}),
                           ("test.events_note", {"run_id": run_id, "tag": "kept-2"})])
    assert [r.ok for r in results] == [True, False, True]
    after = store.events(run_id)
    assert [seq for seq, _ in after] == list(range(1, len(before) + 3))
    tags = [payload for _, payload in after[len(before):]]
    assert all("kept" in tag for tag in tags) and len(tags) == 2


def test_a_command_sees_the_events_appended_before_it_in_its_batch(store: _Store) -> None:
    run_id = _run(store)
    first = len(store.events(run_id))
    results = store.apply([("test.events_note", {"run_id": run_id, "count": 2}),
                           ("test.events_read", {"run_id": run_id}),
                           ("test.events_note", {"run_id": run_id})])
    assert results[1].unwrap() == list(range(1, first + 3))
    assert results[2].unwrap() == (first + 3 if not engine_of(store.db).defers_statements else None)
    assert [seq for seq, _ in store.events(run_id)] == list(range(1, first + 4))


def test_an_event_of_a_run_that_does_not_exist_is_not_found(store: _Store) -> None:
    run_id = _run(store)
    results = store.apply([("test.events_note", {"run_id": "run_missing"}),
                           ("test.events_note", {"run_id": run_id, "tag": "kept"})])
    assert not results[0].ok and results[0].error_code == "not_found"
    assert results[1].ok
    assert store.db.execute_sql("SELECT count(*) FROM run_event WHERE run_id = 'run_missing'").fetchone()[0] == 0


@command("test.events_then_bad_sql")
def _events_then_bad_sql(ctx: WriteContext, args: dict[str, Any]) -> None:
    append_event(ctx.conn, args["run_id"], "note", ctx.now, payload={"tag": "undone"})
    ctx.conn.execute("SELECT * FROM no_such_table")


def test_a_statement_that_fails_after_an_append_is_undone_alone(store: _Store) -> None:
    """The failing command's held event is dropped at the rollback to its savepoint, never inserted
    (on PostgreSQL the failed statement aborted the transaction up to that rollback: an insert there
    would be refused and take the whole batch with it)."""
    run_id = _run(store)
    before = store.events(run_id)
    results = apply_batch(store.db, [WriteCommand("test.events_then_bad_sql", {"run_id": run_id}, store.epoch),
                                     WriteCommand("test.events_note", {"run_id": run_id, "tag": "kept"}, store.epoch)],
                          NOW).results
    assert not results[0].ok and results[0].error_code == "command_failed", results[0]
    assert results[1].ok, results[1]
    after = store.events(run_id)
    assert len(after) == len(before) + 1 and "kept" in after[-1][1]


@command("test.attempt_hold")
def _attempt_hold(ctx: WriteContext, args: dict[str, Any]) -> None:
    from piwf_actors.store.commands.worker import _FINISHED_ATTEMPT

    ctx.conn.hold_insert("node_attempt", _FINISHED_ATTEMPT, (
        args["attempt_id"], args["run_id"], "n", 1, 0, "succeeded", "ok", None, None, None, None, None, 1,
        ctx.now, ctx.now, None))
    if args.get("refuse"):
        raise Rejected("refused after holding an attempt")


@command("test.attempt_count")
def _attempt_count(ctx: WriteContext, args: dict[str, Any]) -> int:
    return ctx.conn.execute("SELECT count(*) FROM node_attempt WHERE run_id = ?", (args["run_id"],)).fetchone()[0]


def test_attempts_held_in_a_batch_are_seen_by_later_commands_and_undone_with_a_refusal(store: _Store) -> None:
    run_id = _run(store)
    results = store.apply([("test.attempt_hold", {"run_id": run_id, "attempt_id": "att-1"}),
                           ("test.attempt_count", {"run_id": run_id}),
                           ("test.attempt_hold", {"run_id": run_id, "attempt_id": "att-2", "refuse": True}),
                           ("test.attempt_hold", {"run_id": run_id, "attempt_id": "att-3"})])
    assert [r.ok for r in results] == [True, True, False, True]
    assert results[1].unwrap() == 1
    ids = [row[0] for row in store.db.execute_sql(
        "SELECT attempt_id FROM node_attempt WHERE run_id = ? ORDER BY attempt_id", (run_id,)).fetchall()]
    assert ids == ["att-1", "att-3"]
