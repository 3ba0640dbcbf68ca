"""`run_row_and_parts`: a run's view reads only the parts that have rows (store/run_parts.py), on both
engines, through the real writer: a run with none of them reads none, and each part that gains a row
(a sleep, an effect, a pending message, child runs) is read and shown again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from actors.writer_store import WriterStore
from store.test_waits import children_request, launch

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries
from piwf_actors.store.run_parts import RunParts, run_row_and_parts


@pytest.fixture
def writer_store(state_dir: Path, database: DatabaseLocation) -> Iterator[WriterStore]:
    store = WriterStore(state_dir, database=database)
    try:
        yield store
    finally:
        store.close()


def parts_of(writer_store: WriterStore, run_id: str) -> RunParts:
    with writer_store.reader.snapshot():
        found = run_row_and_parts(writer_store.reader, run_id)
    assert found is not None
    row, parts = found
    assert row["run_id"] == run_id and "status" in row  # the run's own columns, not the flags
    return parts


NONE = RunParts(waits=False, effects=False, requests=False, schedule=False, mailbox=False, children=False)


def test_a_run_without_waits_effects_messages_or_children_reads_none_of_them(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {"n": 1}})
    assert parts_of(writer_store, "r1") == NONE
    view = queries.run_view(writer_store.reader, "r1")
    assert view is not None
    assert (view["run_id"], view["input"], view["effects"], view["waiting"], view["waits"], view["mailbox"],
            view["schedule"]) == ("r1", {"n": 1}, [], [], [], {}, None)
    assert "children" not in view
    with writer_store.reader.snapshot():
        assert run_row_and_parts(writer_store.reader, "nobody") is None


def test_each_part_that_gains_a_row_is_read_again(writer_store: WriterStore) -> None:
    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    launch(writer_store, "r1")
    writer_store.worker("r1", "effect_reserve", {"node_id": "act", "attempt_id": "a0"})
    assert parts_of(writer_store, "r1") == RunParts(False, True, False, False, False, False)
    writer_store.worker("r1", "wait_request", {"node_id": "nap", "attempt_id": "a1", "kind": "sleep", "seconds": 30})
    assert parts_of(writer_store, "r1") == RunParts(True, True, False, False, False, False)
    view = queries.run_view(writer_store.reader, "r1", writer_store.time)
    assert view is not None
    assert [(e["node_id"], e["status"]) for e in view["effects"]] == [("act", "applying")]
    assert [(w["node_id"], w["kind"], w["remaining_s"]) for w in view["waits"]] == [("nap", "sleep", 30.0)]
    assert {n["node_id"]: n.get("wait_kind") for n in view["nodes"]}["nap"] == "sleep"

    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "p", "input": {}})
    launch(writer_store, "p")
    writer_store.worker("p", "wait_request", children_request(2, attempt_id="a-p"))
    parts = parts_of(writer_store, "p")
    assert parts.children and parts.waits and not parts.effects
    view = queries.run_view(writer_store.reader, "p")
    assert view is not None and view["children"]["total"] == 2 and len(view["children"]["runs"]) == 2

    writer_store.writer.call("run.create", {"workflow": "w", "run_id": "r2", "input": {}})
    writer_store.writer.call("message.send", {"to_run_id": "r2", "topic": "go", "message": 1, "client_id": "c",
                                              "idempotency_key": "k"})
    assert parts_of(writer_store, "r2") == RunParts(False, False, False, False, True, False)
    view = queries.run_view(writer_store.reader, "r2")
    assert view is not None and view["mailbox"] == {"go": 1}
