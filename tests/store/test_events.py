"""Events through the real writer on a real database of each engine, with a clock the test moves:
`event.emit` once per key, waits that take a matching event once (at the emit, or when created,
within their look-back), paused runs, timeouts, the event keeper's deliveries behind their cursor
fence, batches, and prune.

The whole-host behaviour (real hosts, SIGKILLs, the keeper's user code) is in
tests/integration/test_event_crashes.py and tests/examples/test_readme_events.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actors.writer_store import WriterStore
from test_waits import consume, launch, q, run_row, settled

from piwf_actors.errors import Rejected
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.commands.events import matches
from piwf_actors.store.event_queries import get_event, list_events


@pytest.fixture
def writer_store(state_dir: Path, database: DatabaseLocation) -> Iterator[WriterStore]:
    store = WriterStore(state_dir, database=database)
    try:
        yield store
    finally:
        store.close()


def emit(store: WriterStore, name: str, data: Any, key: str | None = None, request: str | None = None) -> dict[str, Any]:
    args = {"name": name, "data": data, "key": key, "client_id": "c" if request else None,
            "idempotency_key": request, "payload": {"name": name, "data": data, "key": key}}
    return store.writer.call("event.emit", args)


def wait(store: WriterStore, run_id: str, attempt: str, match: dict[str, Any] | None = None, **extra: Any) -> Any:
    return store.worker(run_id, "wait_request", {"node_id": "pay", "attempt_id": attempt, "kind": "event",
                                                 "topic": "payment", "match": match or {}, **extra})


def test_match_compares_dotted_paths_as_json() -> None:
    data = {"order_id": "o1", "customer": {"country": "DE", "id": 7}}
    assert matches({}, data) and matches(None, None)
    assert matches({"order_id": "o1", "customer.country": "DE"}, data)
    assert matches({"customer.id": 7.0}, data)  # 7 and 7.0 are one JSON number
    assert not matches({"order_id": "o2"}, data)
    assert not matches({"customer.city": "Berlin"}, data)  # a path that leads nowhere
    assert not matches({"order_id.x": 1}, data)
    assert not matches({"order_id": "o1"}, ["o1"])


def test_an_event_is_recorded_once_per_key_and_once_per_request(writer_store: WriterStore) -> None:
    first = emit(writer_store, "order.created", {"n": 1}, key="o1")["receipt"]
    again = emit(writer_store, "order.created", {"n": 2}, key="o1")["receipt"]  # another request, same key
    assert again["event_id"] == first["event_id"] and again["adopted_event"] is True
    other_name = emit(writer_store, "order.paid", {"n": 1}, key="o1")["receipt"]  # a key is per name
    assert other_name["event_id"] != first["event_id"]
    keyless = emit(writer_store, "order.created", {"n": 3}, request="r1")
    resent = emit(writer_store, "order.created", {"n": 3}, request="r1")
    assert resent["outcome"] == "adopted" and resent["receipt"]["event_id"] == keyless["receipt"]["event_id"]
    assert q(writer_store, "SELECT name, seq, data FROM event ORDER BY seq") == [
        ("order.created", 1, '{"n":1}'), ("order.paid", 2, '{"n":1}'), ("order.created", 3, '{"n":3}')]
    listed = list_events(writer_store.reader, "order.created")
    assert [item["seq"] for item in listed] == [3, 1] and listed[1]["data"] == {"n": 1}


@pytest.mark.parametrize(("name", "key", "data", "problem"), [
    ("", None, 1, "non-empty string"), (" x", None, 1, "no spaces at the ends"), ("a\nb", None, 1, "control"),
    ("x", "", 1, "event key"), ("x", None, "y" * 70_000, "more than 65536"),
])
def test_a_bad_event_is_refused_and_records_nothing(writer_store: WriterStore, name: str, key: str | None,
                                                    data: Any, problem: str) -> None:
    with pytest.raises(Rejected, match=problem):
        emit(writer_store, name, data, key=key)
    assert q(writer_store, "SELECT count(*) FROM event") == [(0,)]


def test_an_emit_settles_the_matching_waits_in_its_commit_and_each_takes_it_once(writer_store: WriterStore) -> None:
    for run_id, order in (("r1", "o1"), ("r2", "o1"), ("r3", "o2")):
        writer_store.writer.call("run.create", {"workflow": "w", "run_id": run_id, "input": {"order_id": order}})
        launch(writer_store, run_id)
        parked = wait(writer_store, run_id, f"a-{run_id}", {"order_id": order})
        assert parked["status"] == "waiting"
    receipt = emit(writer_store, "payment", {"order_id": "o1", "amount": 5})["receipt"]
    assert sorted(receipt["woke"]) == ["r1", "r2"]  # both waits on o1 take it; r3 waits for o2
    assert [run_row(writer_store, r, "status")[0] for r in ("r1", "r2", "r3")] == ["queued", "queued", "parked"]
    launch(writer_store, "r1")
    answer = wait(writer_store, "r1", "a-again", {"order_id": "o1"})
    got = settled(answer)
    assert got["output"]["event_id"] == receipt["event_id"] and got["output"]["data"] == {"order_id": "o1", "amount": 5}
    consume(writer_store, "r1", "pay", answer, {"node": "pay2"})
    # A second wait of the same run (another node) does not take the same event again.
    second = writer_store.worker("r1", "wait_request", {"node_id": "pay2", "attempt_id": "b1", "kind": "event",
                                                        "topic": "payment", "match": {"order_id": "o1"}})
    assert second["status"] == "waiting"
    assert q(writer_store, "SELECT run_id FROM event_take ORDER BY run_id") == [("r1",), ("r2",)]
    shown = get_event(writer_store.reader, receipt["event_id"])
    assert sorted(item["run_id"] for item in shown["woke"]) == ["r1", "r2"]


def test_a_wait_takes_an_earlier_event_only_within_its_look_back(writer_store: WriterStore) -> None:
    early = emit(writer_store, "payment", {"order_id": "o1"})["receipt"]
    writer_store.time += 100
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r2", "input": {}})
    writer_store.time += 10
    later = emit(writer_store, "payment", {"order_id": "o1"})["receipt"]
    writer_store.time += 10
    launch(writer_store, "r1")
    # By default: events since the run was created (the early one is older; the later one counts).
    assert settled(wait(writer_store, "r1", "a1", {"order_id": "o1"}))["output"]["event_id"] == later["event_id"]
    launch(writer_store, "r2")
    found = settled(wait(writer_store, "r2", "a2", {"order_id": "o1"}, lookback_s=500))
    assert found["output"]["event_id"] == early["event_id"]  # the first within 500 s, in emit order


def test_a_paused_run_takes_its_event_when_resumed_and_a_timeout_fails_event_timeout(
        writer_store: WriterStore) -> None:
    for run_id in ("r1", "r2"):
        writer_store.writer.call("run.create", {"workflow": "w", "run_id": run_id, "input": {}})
        launch(writer_store, run_id)
        wait(writer_store, run_id, f"a-{run_id}", {"order_id": run_id}, timeout_s=10)
    writer_store.writer.call("run.pause", {"run_id": "r1"})
    assert emit(writer_store, "payment", {"order_id": "r1"})["receipt"]["woke"] == []  # paused: not taken
    writer_store.time += 11
    woken = writer_store.writer.call("waits.wake", {})["woken"]
    assert list(woken.values()) == ["timed_out"]  # r2's; r1's clock stands still while paused
    writer_store.writer.call("run.resume", {"run_id": "r1"})
    assert run_row(writer_store, "r1", "status")[0] == "queued"
    assert q(writer_store, "SELECT run_id FROM event_take") == [("r1",)]
    launch(writer_store, "r2")
    failed = wait(writer_store, "r2", "again", {"order_id": "r2"})
    assert failed["result"]["outcome"] == "failed" and failed["result"]["error_code"] == "event_timeout"


def _spec(workflow: str) -> dict[str, Any]:
    return {"workflow": workflow, "input": None}


def test_deliveries_start_one_run_per_event_behind_the_cursor_fence(writer_store: WriterStore) -> None:
    writer_store.writer.call("event.subscriptions", {"subscriptions": [
        {"name": "ship", "event_name": "order.created", "summary": {}}]})
    ids = [emit(writer_store, "order.created", {"n": n})["receipt"]["event_id"] for n in range(3)]
    deliver = {"subscription": "ship", "from_seq": 0, "to_seq": 3, "deliveries": [
        {"event_id": ids[0], "outcome": "started", "spec": _spec("ship")},
        {"event_id": ids[1], "outcome": "filtered"},
        {"event_id": ids[2], "outcome": "failed", "error": "ValueError: no"}]}
    first = writer_store.writer.call("event.deliver", deliver)
    assert len(first["started"]) == 1 and first["stale"] is False
    assert writer_store.writer.call("event.deliver", deliver) == {"stale": True, "cursor": 3}  # applied once
    assert q(writer_store, "SELECT count(*) FROM run") == [(1,)]
    assert [(d["outcome"], d["error"]) for d in get_event(writer_store.reader, ids[2])["deliveries"]] == [
        ("failed", "ValueError: no")]
    # A subscription recorded later starts at the newest event: no backfill.
    cursors = writer_store.writer.call("event.subscriptions", {"subscriptions": [
        {"name": "ship", "event_name": "order.created", "summary": {}},
        {"name": "late", "event_name": "order.created", "summary": {}}]})["cursors"]
    assert cursors == {"ship": 3, "late": 3}


def test_batches_take_every_event_once_by_count_or_by_time(writer_store: WriterStore) -> None:
    writer_store.writer.call("event.subscriptions", {"subscriptions": [
        {"name": "collect", "event_name": "item", "summary": {}}]})
    ids = [emit(writer_store, "item", {"n": n})["receipt"]["event_id"] for n in range(5)]
    batching = {"max_items": 2, "max_wait_s": 30, "template": _spec("collect")}
    done = writer_store.writer.call("event.deliver", {
        "subscription": "collect", "from_seq": 0, "to_seq": 5, "batch": batching,
        "deliveries": [{"event_id": event_id, "outcome": "batched", "key": "a" if n < 4 else "b"}
                       for n, event_id in enumerate(ids)]})
    assert len(done["started"]) == 2  # two full batches of key a; b's batch (one event) stays open
    assert writer_store.writer.call("event.batches_due", {"subscription": "collect",
                                                          "template": _spec("collect")})["started"] == []
    writer_store.time += 31
    late = writer_store.writer.call("event.batches_due", {"subscription": "collect", "template": _spec("collect")})
    assert len(late["started"]) == 1
    inputs = sorted((row[0] for row in q(writer_store, "SELECT input_json FROM run")), key=len)
    import json
    batches = [json.loads(text) for text in inputs]
    assert sorted(len(b["events"]) for b in batches) == [1, 2, 2]
    assert sorted(e["event_id"] for b in batches for e in b["events"]) == sorted(ids)
    assert {b["key"] for b in batches if len(b["events"]) == 1} == {"b"}
    assert q(writer_store, "SELECT status, count(*) FROM event_batch GROUP BY status") == [("started", 3)]


def test_prune_drops_old_events_but_an_open_batch_and_the_newest(writer_store: WriterStore) -> None:
    writer_store.writer.call("event.subscriptions", {"subscriptions": [
        {"name": "collect", "event_name": "item", "summary": {}}]})
    old = [emit(writer_store, "item", {"n": n})["receipt"]["event_id"] for n in range(3)]
    writer_store.writer.call("event.deliver", {
        "subscription": "collect", "from_seq": 0, "to_seq": 1, "deliveries": [
            {"event_id": old[0], "outcome": "batched", "key": ""}],
        "batch": {"max_items": 10, "max_wait_s": 3600, "template": _spec("collect")}})
    writer_store.time += 100
    receipt = writer_store.writer.call("state.prune", {"before": writer_store.time - 10, "apply": True,
                                                       "client_id": "c", "idempotency_key": "p",
                                                       "payload": {"before": writer_store.time - 10, "apply": True}})
    assert receipt["receipt"]["emitted_events"] == 1  # old[1]; old[0] is in an open batch, old[2] is the newest
    assert [row[0] for row in q(writer_store, "SELECT event_id FROM event ORDER BY seq")] == [old[0], old[2]]
    assert emit(writer_store, "item", {"n": 9})["receipt"]["seq"] == 4  # the sequence goes on
