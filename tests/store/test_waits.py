"""Waits, mailboxes, child runs and limits through the real writer on a real database of each engine
(a SQLite file, a PostgreSQL database), with a clock the test moves: each test drives the commands a
worker, the scheduler, the housekeeper and a client send, and reads the rows the host would.

The whole-host behaviour (real workers, crashes, a runner host on PostgreSQL) is in
tests/integration/test_flow_crashes.py and tests/examples/test_readme_flow.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actors.writer_store import TOKEN, WriterStore

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.flow_queries import flow_view
from piwf_actors.store.runstate import QUEUE_HELD, QUEUE_WOKEN


@pytest.fixture
def writer_store(state_dir: Path, database: DatabaseLocation) -> Iterator[WriterStore]:
    """The conftest's writer store, once on each engine (the `database` fixture)."""
    store = WriterStore(state_dir, database=database)
    try:
        yield store
    finally:
        store.close()


def claim(writer_store: WriterStore, slots: int = 4) -> list[dict[str, Any]]:
    writer_store.messages += 1
    claimed = writer_store.writer.call("scheduler.claim_next", {
        "slots": [{"token_hash": TOKEN, "launch_id": f"l{writer_store.messages}-{i}"} for i in range(slots)],
        "claim_lease_s": 600})
    for item in claimed:
        writer_store.claims[item["run_id"]] = item
    return claimed


def launch(writer_store: WriterStore, run_id: str) -> None:
    """Claim `run_id` (it must be the one claimable run) and mark it running."""
    assert [c["run_id"] for c in claim(writer_store, 1)] == [run_id]
    writer_store.worker(run_id, "ready", {"want_state": False})


def finish(writer_store: WriterStore, run_id: str, node_id: str, report: dict[str, Any], nxt: dict[str, Any]) -> Any:
    return writer_store.worker(run_id, "node_finished", {"node_id": node_id, **report, "next": nxt})


def settled(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["status"] == "settled", answer
    return {"outcome": answer["result"]["outcome"], "output": answer["result"].get("output"),
            "attempt_id": answer["attempt_id"], "wait_id": answer["wait_id"]}


def consume(writer_store: WriterStore, run_id: str, node_id: str, answer: dict[str, Any], nxt: dict[str, Any]) -> None:
    got = settled(answer)
    finish(writer_store, run_id, node_id, {"outcome": got["outcome"], "output": got["output"],
                                    "attempt_id": got["attempt_id"], "wait_id": got["wait_id"]}, nxt)


def q(writer_store: WriterStore, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in writer_store.reader.all(sql, params)]


def run_row(writer_store: WriterStore, run_id: str, columns: str) -> tuple[Any, ...]:
    return q(writer_store, f"SELECT {columns} FROM run WHERE run_id = ?", (run_id,))[0]


# --- sleep ----------------------------------------------------------------------------------------


def test_a_sleep_parks_without_a_claim_and_wakes_once_at_its_time(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    launch(writer_store, "r1")
    start = writer_store.time
    parked = writer_store.worker("r1", "wait_request", {"node_id": "nap", "attempt_id": "a1", "kind": "sleep",
                                                 "seconds": 30})
    assert parked["status"] == "waiting" and parked["directive"] == "stop"
    assert run_row(writer_store, "r1", "status, park_reason") == ("parked", "waiting")
    assert q(writer_store, "SELECT count(*) FROM run_claim")[0] == (0,)
    assert queries.next_wake(writer_store.reader) == pytest.approx(start + 30)

    writer_store.time += 29
    assert writer_store.writer.call("waits.wake", {})["woken"] == {}
    writer_store.time += 2
    assert list(writer_store.writer.call("waits.wake", {})["woken"].values()) == ["slept"]
    assert writer_store.writer.call("waits.wake", {})["woken"] == {}  # once
    status, queue_class, queued_at = run_row(writer_store, "r1", "status, queue_class, queued_at")
    assert (status, queue_class) == ("queued", QUEUE_WOKEN)
    assert queued_at == pytest.approx(start + 30)  # among the woken, in wake order

    launch(writer_store, "r1")
    answer = writer_store.worker("r1", "wait_request", {"node_id": "nap", "attempt_id": "a2", "kind": "sleep",
                                                 "seconds": 30})
    assert settled(answer)["output"] == {"slept_until": pytest.approx(start + 30)}
    assert settled(answer)["attempt_id"] == "a1"  # the attempt the wait was made for
    consume(writer_store, "r1", "nap", answer, {"finish": True})
    assert run_row(writer_store, "r1", "status, output_json") == ("done", '{"slept_until":%r}' % (start + 30))
    assert q(writer_store, "SELECT status FROM run_wait") == [("consumed",)]


def test_a_sleeper_paused_past_its_time_wakes_at_once_when_resumed(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    launch(writer_store, "r1")
    writer_store.worker("r1", "wait_request", {"node_id": "nap", "attempt_id": "a1", "kind": "sleep", "seconds": 10})
    writer_store.writer.call("run.pause", {"run_id": "r1"})
    wake_at = q(writer_store, "SELECT wake_at FROM run_wait")[0][0]
    assert wake_at == pytest.approx(writer_store.time + 10)  # a pause keeps the wake-up time
    writer_store.time += 60
    writer_store.writer.call("waits.wake", {})
    assert run_row(writer_store, "r1", "status, park_reason") == ("parked", "paused")
    writer_store.writer.call("run.resume", {"run_id": "r1"})
    assert run_row(writer_store, "r1", "status")[0] == "queued"
    launch(writer_store, "r1")
    assert settled(writer_store.worker("r1", "wait_request", {"node_id": "nap", "attempt_id": "a2", "kind": "sleep",
                                                       "seconds": 10}))["outcome"] == "ok"


def test_a_time_that_passed_already_goes_on_without_parking(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    launch(writer_store, "r1")
    answer = writer_store.worker("r1", "wait_request", {"node_id": "nap", "attempt_id": "a1", "kind": "sleep",
                                                 "until": writer_store.time - 5})
    assert settled(answer)["output"] == {"slept_until": pytest.approx(writer_store.time - 5)}
    assert run_row(writer_store, "r1", "status")[0] == "running"


# --- messages -------------------------------------------------------------------------------------


def send(writer_store: WriterStore, run_id: str, topic: str, payload: Any, key: str | None = None) -> dict[str, Any]:
    args = {"to_run_id": run_id, "topic": topic, "message": payload, "client_id": "c" if key else None,
            "idempotency_key": key, "payload": {"run_id": run_id, "topic": topic, "payload": payload}}
    return writer_store.writer.call("message.send", args)


def test_messages_sent_before_the_wait_are_taken_once_in_send_order(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    first = send(writer_store, "r1", "go", {"n": 1}, key="k1")
    assert send(writer_store, "r1", "go", {"n": 1}, key="k1")["outcome"] == "adopted"  # same key: same message
    send(writer_store, "r1", "go", {"n": 2}, key="k2")
    send(writer_store, "r1", "other", {"n": 3})
    assert first["receipt"]["status"] == "pending" and first["receipt"]["seq"] == 1
    launch(writer_store, "r1")
    view = flow_view(writer_store.reader, queries.run_view(writer_store.reader, "r1") | {"generation": 1, "fanout_max": None,
                                                                             "concurrency_max": None,
                                                                             "parent_wait_id": None})
    assert view["mailbox"] == {"go": 2, "other": 1}
    one = writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a1", "kind": "message", "topic": "go"})
    assert settled(one)["output"] == {"n": 1}
    consume(writer_store, "r1", "w", one, {"node": "w"})
    two = writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a2", "kind": "message", "topic": "go"})
    assert settled(two)["output"] == {"n": 2}
    assert q(writer_store, "SELECT topic, seq, status FROM run_message ORDER BY seq") == [
        ("go", 1, "consumed"), ("go", 2, "consumed"), ("other", 3, "pending")]


def test_a_message_to_a_parked_wait_queues_the_run_in_the_same_commit(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    launch(writer_store, "r1")
    writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a1", "kind": "message", "topic": "go"})
    assert run_row(writer_store, "r1", "status")[0] == "parked"
    receipt = send(writer_store, "r1", "go", {"ok": True}, key="k")["receipt"]
    assert receipt["status"] == "consumed" and receipt["consumed_by"] is not None
    assert run_row(writer_store, "r1", "status")[0] == "queued"
    launch(writer_store, "r1")
    assert settled(writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a2", "kind": "message",
                                                       "topic": "go"}))["output"] == {"ok": True}


def test_a_paused_run_keeps_its_messages_and_its_timeout_stands_still(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    launch(writer_store, "r1")
    writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a1", "kind": "message", "topic": "go",
                                        "timeout_s": 10})
    writer_store.time += 4
    writer_store.writer.call("run.pause", {"run_id": "r1"})
    assert q(writer_store, "SELECT wake_at, paused_remaining_s FROM run_wait") == [(None, pytest.approx(6))]
    writer_store.time += 100
    assert writer_store.writer.call("waits.wake", {})["woken"] == {}
    assert send(writer_store, "r1", "go", "late")["receipt"]["status"] == "pending"  # not taken while paused
    writer_store.writer.call("run.resume", {"run_id": "r1"})
    launch(writer_store, "r1")
    assert settled(writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a2", "kind": "message",
                                                       "topic": "go"}))["output"] == "late"


def test_a_message_timeout_applies_the_default_or_fails_the_node(writer_store: WriterStore) -> None:
    for run_id in ("with", "without"):
        writer_store.writer.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
        launch(writer_store, run_id)
    extra = {"on_timeout": {"verdict": "none"}}
    writer_store.worker("with", "wait_request", {"node_id": "w", "attempt_id": "a1", "kind": "message", "topic": "go",
                                          "timeout_s": 5, **extra})
    writer_store.worker("without", "wait_request", {"node_id": "w", "attempt_id": "a2", "kind": "message", "topic": "go",
                                             "timeout_s": 5})
    writer_store.time += 6
    assert sorted(writer_store.writer.call("waits.wake", {})["woken"].values()) == ["default_applied", "timed_out"]
    launch(writer_store, "with")
    assert settled(writer_store.worker("with", "wait_request", {"node_id": "w", "kind": "message", "topic": "go"}))[
        "output"] == {"verdict": "none"}
    launch(writer_store, "without")
    failed = writer_store.worker("without", "wait_request", {"node_id": "w", "kind": "message", "topic": "go"})
    assert failed["result"]["outcome"] == "failed" and failed["result"]["error_code"] == "message_timeout"


def test_a_message_to_a_finished_run_is_refused_and_nothing_is_kept(writer_store: WriterStore) -> None:
    writer_store.finished_run("r1")
    with pytest.raises(Exception, match="done: a message to it would never be read"):
        send(writer_store, "r1", "go", 1)
    assert q(writer_store, "SELECT count(*) FROM run_message")[0] == (0,)


# --- children -------------------------------------------------------------------------------------


def children_request(count: int, attempt_id: str = "a1", **extra: Any) -> dict[str, Any]:
    return {"node_id": "fan", "attempt_id": attempt_id, "kind": "children", "mode": "map",
            "children": [{"workflow": "kid", "workflow_attr": "kid", "definition_digest": "d", "input": i}
                         for i in range(count)], **extra}


def child_ids(writer_store: WriterStore) -> list[str]:
    return [r[0] for r in q(writer_store, "SELECT run_id FROM run WHERE parent_node_id = 'fan' "
                                               "ORDER BY child_index")]


def test_a_fan_out_starts_each_child_once_runs_at_most_max_parallel_and_wakes_its_parent_last(
        writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    parked = writer_store.worker("p", "wait_request", children_request(5, max_parallel=2))
    assert parked["status"] == "waiting"
    kids = child_ids(writer_store)
    assert len(kids) == 5
    assert [r[0] for r in q(writer_store, "SELECT queue_class FROM run WHERE parent_node_id = 'fan' "
                                               "ORDER BY child_index")] == [2, 2, QUEUE_HELD, QUEUE_HELD, QUEUE_HELD]
    assert [c["run_id"] for c in claim(writer_store, 4)] == kids[:2]  # max_parallel 2, with slots to spare
    for index, kid in enumerate(kids):
        if kid not in writer_store.claims:
            assert kid in [c["run_id"] for c in claim(writer_store, 4)]  # let go by an earlier child's end
        assert q(writer_store, "SELECT count(*) FROM run WHERE parent_node_id = 'fan' AND generation > 0 "
                        "AND status NOT IN ('done', 'failed', 'cancelled')")[0][0] <= 2
        writer_store.worker(kid, "ready", {"want_state": False})
        finish(writer_store, kid, "a", {"outcome": "ok", "output": {"i": index}}, {"finish": True})
        if index < 4:
            assert run_row(writer_store, "p", "status")[0] == "parked"
    assert run_row(writer_store, "p", "status")[0] == "queued"  # the last child's end woke it
    launch(writer_store, "p")
    answer = writer_store.worker("p", "wait_request", {"node_id": "fan", "kind": "children", "probe": True})
    assert settled(answer)["output"] == [{"i": i} for i in range(5)]


def test_fail_fast_fails_the_node_and_cancels_the_other_children(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", children_request(3))
    kids = child_ids(writer_store)
    claim(writer_store, 1)
    writer_store.worker(kids[0], "ready", {"want_state": False})
    finish(writer_store, kids[0], "a", {"outcome": "failed", "error": "boom"}, {"fail": {"code": "node_failed",
                                                                                 "message": "boom"}})
    assert [run_row(writer_store, kid, "status")[0] for kid in kids] == ["failed", "cancelled", "cancelled"]
    launch(writer_store, "p")
    failed = writer_store.worker("p", "wait_request", {"node_id": "fan", "kind": "children", "probe": True})
    assert failed["result"]["outcome"] == "failed" and failed["result"]["error_code"] == "child_failed"
    assert kids[0] in failed["result"]["error"]


def test_collect_reports_the_failures_and_the_outputs_in_order(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", children_request(3, on_failure="collect"))
    kids = child_ids(writer_store)
    claim(writer_store, 3)
    for index, kid in enumerate(kids):
        writer_store.worker(kid, "ready", {"want_state": False})
        if index == 1:
            finish(writer_store, kid, "a", {"outcome": "failed", "error": "no"}, {"fail": {"code": "node_failed",
                                                                                   "message": "no"}})
        else:
            finish(writer_store, kid, "a", {"outcome": "ok", "output": index}, {"finish": True})
    launch(writer_store, "p")
    output = settled(writer_store.worker("p", "wait_request", {"node_id": "fan", "kind": "children", "probe": True}))[
        "output"]
    assert output["outputs"] == [0, None, 2]
    assert [(f["index"], f["run_id"], f["error"]["code"]) for f in output["failed"]] == [(1, kids[1], "node_failed")]


def test_cancelling_the_parent_cancels_its_children_and_a_paused_parent_starts_none(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", children_request(3))
    kids = child_ids(writer_store)
    writer_store.writer.call("run.pause", {"run_id": "p"})
    assert claim(writer_store, 4) == []  # its children are held while it is paused
    reason = flow_view(writer_store.reader, dict(zip(*_columns(writer_store, kids[0]), strict=True)))["queue_reason"]
    assert reason == "its parent run p is paused"
    writer_store.writer.call("run.resume", {"run_id": "p"})
    assert len(claim(writer_store, 1)) == 1
    writer_store.writer.call("run.cancel", {"run_id": "p"})
    statuses = [run_row(writer_store, kid, "status, cancel_requested") for kid in kids]
    assert statuses[0] == ("starting", 1)  # claimed: its runner stops it
    assert statuses[1:] == [("cancelled", 0), ("cancelled", 0)]


def _columns(writer_store: WriterStore, run_id: str) -> tuple[list[str], tuple[Any, ...]]:
    cursor = writer_store.reader.conn.execute("SELECT * FROM run WHERE run_id = ?", (run_id,))
    return [d[0] for d in cursor.description], cursor.fetchone()


# --- limits and priorities ------------------------------------------------------------------------


def test_a_concurrency_limit_holds_the_others_until_a_slot_is_free(writer_store: WriterStore) -> None:
    for n in range(4):
        writer_store.writer.call("run.create", {"workflow": "deploy", "run_id": f"d{n}", "input": {},
                                         "concurrency_key": "deploy[eu]", "concurrency_max": 2})
    writer_store.writer.call("run.create", {"workflow": "deploy", "run_id": "us", "input": {},
                                     "concurrency_key": "deploy[us]", "concurrency_max": 2})
    assert [c["run_id"] for c in claim(writer_store, 8)] == ["d0", "d1", "us"]
    reason = flow_view(writer_store.reader, dict(zip(*_columns(writer_store, "d2"), strict=True)))["queue_reason"]
    assert reason == "waiting for a concurrency slot of deploy[eu] (2 of 2 in use)"
    assert claim(writer_store, 8) == []
    for run_id in ("d0", "d1"):  # one parks waiting: it still holds its slot
        writer_store.worker(run_id, "ready", {"want_state": False})
    writer_store.worker("d0", "wait_request", {"node_id": "s", "attempt_id": "x", "kind": "sleep", "seconds": 100})
    assert claim(writer_store, 8) == []
    finish(writer_store, "d1", "a", {"outcome": "ok", "output": 1}, {"finish": True})
    assert [c["run_id"] for c in claim(writer_store, 8)] == ["d2"]  # one slot freed: one run let go


def test_a_higher_priority_fresh_run_is_claimed_first_after_the_woken(writer_store: WriterStore) -> None:
    for n in range(3):
        writer_store.writer.call("run.create", {"workflow": "w", "run_id": f"f{n}", "input": {}})
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "urgent", "input": {}, "priority": 10})
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "low", "input": {}, "priority": -1})
    assert [c["run_id"] for c in claim(writer_store, 2)] == ["urgent", "f0"]
    assert [c["run_id"] for c in claim(writer_store, 5)] == ["f1", "f2", "low"]


# --- prune ----------------------------------------------------------------------------------------


def test_prune_takes_a_runs_waits_and_mailbox_and_spares_the_children_of_a_live_parent(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    big = {"text": "x" * 5000}  # stored as a blob, not inline
    send(writer_store, "r1", "go", big)
    send(writer_store, "r1", "left", big)  # never taken: pruned with its run all the same
    launch(writer_store, "r1")
    consume(writer_store, "r1", "w", writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a1",
                                                                   "kind": "message", "topic": "go"}),
            {"finish": True})
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", children_request(2, attempt_id="a-p"))
    kid = child_ids(writer_store)[0]
    claim(writer_store, 1)
    writer_store.worker(kid, "ready", {"want_state": False})
    finish(writer_store, kid, "a", {"outcome": "ok", "output": 1}, {"finish": True})
    assert q(writer_store, "SELECT count(*) FROM blob WHERE size > 4000")[0][0] >= 1
    writer_store.time += 10
    receipt = writer_store.writer.call("state.prune", {"before": writer_store.time, "apply": True})["receipt"]
    assert receipt["runs"] == ["r1"]  # not the finished child: its parent still waits for its sibling
    assert q(writer_store, "SELECT count(*) FROM run_wait WHERE run_id = 'r1'")[0][0] == 0
    assert q(writer_store, "SELECT count(*) FROM run_message")[0][0] == 0
    assert q(writer_store, "SELECT count(*) FROM blob WHERE size > 4000")[0][0] == 0
    assert run_row(writer_store, kid, "status")[0] == "done"


def test_a_run_held_for_another_reason_passes_the_free_slot_on(writer_store: WriterStore) -> None:
    """limit 1: X runs; a child C of parent P and an unrelated Y are held behind it. P is paused, X ends:
    the slot X frees must reach Y, even though the first held run it is offered to (C) cannot take it."""
    limited = {"concurrency_key": "deploy", "concurrency_max": 1}
    writer_store.writer.call("run.create", {"workflow": "deploy", "run_id": "x", "input": {}, **limited})
    assert [c["run_id"] for c in claim(writer_store, 1)] == ["x"]
    writer_store.worker("x", "ready", {"want_state": False})
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", {"node_id": "fan", "attempt_id": "a-p", "kind": "children", "mode": "run",
                                       "children": [{"workflow": "deploy", "workflow_attr": "deploy",
                                                     "definition_digest": "d", "input": 0, **limited}]})
    writer_store.writer.call("run.create", {"workflow": "deploy", "run_id": "y", "input": {}, **limited})
    assert claim(writer_store, 4) == []  # both held behind x
    writer_store.writer.call("run.pause", {"run_id": "p"})
    finish(writer_store, "x", "a", {"outcome": "ok", "output": 1}, {"finish": True})
    assert [c["run_id"] for c in claim(writer_store, 4)] == ["y"]


def test_runs_blocked_by_a_full_key_do_not_keep_the_claim_from_the_runs_behind_them(writer_store: WriterStore) -> None:
    limited = {"concurrency_key": "deploy", "concurrency_max": 1}
    for n in range(40):
        writer_store.writer.call("run.create", {"workflow": "deploy", "run_id": f"d{n:02}", "input": {}, **limited})
    writer_store.writer.call("run.create", {"workflow": "other", "run_id": "zz-other", "input": {}})
    assert [c["run_id"] for c in claim(writer_store, 1)] == ["d00"]
    # One claim holds every run of the full key at once and reaches the run behind them.
    assert [c["run_id"] for c in claim(writer_store, 1)] == ["zz-other"]


def test_a_wait_made_while_a_pause_is_pending_takes_no_message_until_the_run_is_resumed(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    send(writer_store, "r1", "go", "early")
    launch(writer_store, "r1")
    writer_store.writer.call("run.pause", {"run_id": "r1"})  # lands at the next boundary: this request
    parked = writer_store.worker("r1", "wait_request", {"node_id": "w", "attempt_id": "a1", "kind": "message",
                                                 "topic": "go"})
    assert parked["status"] == "waiting"
    assert q(writer_store, "SELECT status FROM run_message") == [("pending",)]
    writer_store.writer.call("run.resume", {"run_id": "r1"})
    assert q(writer_store, "SELECT status FROM run_message") == [("consumed",)]
    assert run_row(writer_store, "r1", "status")[0] == "queued"


def test_one_client_key_sent_to_two_runs_is_two_messages(writer_store: WriterStore) -> None:
    for run_id in ("r1", "r2"):
        writer_store.writer.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
    first = writer_store.writer.call("message.send", {"to_run_id": "r1", "topic": "go", "message": 1, "client_id": "c",
                                               "idempotency_key": "k"})
    writer_store.writer.call("state.prune", {"before": writer_store.time + 1, "apply": True, "idempotency_before": writer_store.time + 1})
    second = writer_store.writer.call("message.send", {"to_run_id": "r2", "topic": "go", "message": 1, "client_id": "c",
                                                "idempotency_key": "k"})
    assert first["receipt"]["run_id"] == "r1" and second["receipt"]["run_id"] == "r2"
    assert q(writer_store, "SELECT run_id FROM run_message ORDER BY run_id") == [("r1",), ("r2",)]


def test_prune_keeps_the_children_a_live_restart_may_re_use(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", children_request(1, attempt_id="a-p"))
    [kid] = child_ids(writer_store)
    claim(writer_store, 1)
    writer_store.worker(kid, "ready", {"want_state": False})
    finish(writer_store, kid, "a", {"outcome": "ok", "output": 1}, {"finish": True})
    launch(writer_store, "p")
    consume(writer_store, "p", "fan", writer_store.worker("p", "wait_request", {"node_id": "fan", "kind": "children",
                                                                   "probe": True}), {"finish": True})
    revision = run_row(writer_store, "p", "revision")[0]
    writer_store.writer.call("run.restart", {"run_id": "p", "expected_revision": revision})  # queued: live
    writer_store.time += 10
    receipt = writer_store.writer.call("state.prune", {"before": writer_store.time, "apply": True})["receipt"]
    assert receipt["runs"] == []  # neither the restarted run nor its child
