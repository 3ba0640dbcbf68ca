"""The schedule commands with a chosen `now`: a fire is recorded with its run in one transaction, a fire
key is used once, the cursor only moves forward, pause/resume/trigger; and migration v7 on a v6 file."""

from __future__ import annotations

import sqlite3

import pytest
from test_store_regressions import Store

from piwf_actors.errors import NotFound, Rejected
from piwf_actors.store.database import StoreOptions, open_store, schema_version
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.queries import run_view
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.schedule_queries import recent_fires, schedule_rows
from piwf_actors.workflows.schedule_time import fire_key, fire_run_id


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


def _sync(store: Store, cursor: float | None = 1010.0, timing_key: str = "every-10", digest: str = "d1",
          now: float = 1000.0) -> dict:
    return store.call("schedule.sync", {"schedules": [{"name": "tick", "digest": digest, "timing_key": timing_key,
                                                       "summary": {"workflow": "w"}, "cursor": cursor}]}, now)


def _fire(t: float, kind: str = "scheduled", spec: bool = True) -> dict:
    key = fire_key(t)
    fire = {"fire_key": key, "fire_time": t, "kind": kind, "run_id": fire_run_id("tick", key, t)}
    if spec:
        fire["spec"] = {"workflow": "w", "input": {"at": t}}
    else:
        fire["error"] = "RuntimeError: input failed"
    return fire


def _row(store: Store) -> tuple:
    return store.db.execute_sql("SELECT paused, next_fire_at, last_fire_at, fire_count, skipped_count, last_error "
                                "FROM schedule WHERE name = 'tick'").fetchone()


def _runs(store: Store) -> list[str]:
    return [row[0] for row in store.db.execute_sql("SELECT run_id FROM run ORDER BY run_id").fetchall()]


def test_a_fire_starts_its_run_once_whatever_is_replayed(store) -> None:
    _sync(store)
    fired = store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0)], "cursor": 1020.0, "skipped": 0},
                       1010.1)
    run_id = fire_run_id("tick", fire_key(1010.0), 1010.0)
    assert fired["fired"] == [{"fire_time": 1010.0, "kind": "scheduled", "run_id": run_id, "error": None}]
    assert _runs(store) == [run_id]
    assert _row(store) == (0, 1020.0, 1010.0, 1, 0, None)
    # The same fire again (a keeper that did not see the answer, a restarted host): nothing more.
    again = store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0)], "cursor": 1020.0}, 1010.2)
    assert again["fired"] == [] and _runs(store) == [run_id]
    # A fire before the cursor is never started late, even under a key never used.
    late = store.call("schedule.fire", {"name": "tick", "fires": [_fire(1015.0)], "cursor": 1020.0}, 1016.0)
    assert late["fired"] == [] and _runs(store) == [run_id]
    assert _row(store)[3] == 1
    reader = StoreReader(store.location)
    try:
        assert run_view(reader, run_id)["schedule"] == {"name": "tick", "fire_time": 1010.0, "kind": "scheduled"}
        assert recent_fires(reader, "tick") == [{"fire_time": 1010.0, "kind": "scheduled", "run_id": run_id,
                                                 "error": None}]
    finally:
        reader.close()


def test_the_cursor_only_moves_forward_and_counts_skipped_fires(store) -> None:
    _sync(store)
    store.call("schedule.fire", {"name": "tick", "fires": [_fire(1050.0, "catch_up")], "cursor": 1060.0,
                                 "skipped": 4}, 1055.0)
    assert _row(store)[1:5] == (1060.0, 1050.0, 1, 4)
    store.call("schedule.fire", {"name": "tick", "fires": [], "cursor": 1030.0}, 1056.0)  # a stale keeper's view
    assert _row(store)[1] == 1060.0


def test_a_fire_that_could_not_build_its_run_is_recorded_with_its_error(store) -> None:
    _sync(store)
    fired = store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0, spec=False)], "cursor": 1020.0},
                       1010.1)
    assert fired["fired"][0]["run_id"] is None and _runs(store) == []
    assert _row(store)[1:] == (1020.0, 1010.0, 1, 0, "RuntimeError: input failed")
    # It is not retried: the fire is recorded.
    assert store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0)], "cursor": 1020.0})["fired"] == []


def test_sync_keeps_the_cursor_unless_the_timing_changed(store) -> None:
    _sync(store, cursor=1010.0)
    _sync(store, cursor=1500.0, digest="d2")  # another input, same timing: the cursor stays
    assert _row(store)[1] == 1010.0
    _sync(store, cursor=1500.0, timing_key="every-60", digest="d3")  # another series of fire times
    assert _row(store)[1] == 1500.0
    reader = StoreReader(store.location)
    try:
        row = schedule_rows(reader)["tick"]
    finally:
        reader.close()
    assert row["definition_digest"] == "d3" and row["summary"] == {"workflow": "w"} and row["paused"] is False


def test_pause_resume_and_their_refusals(store) -> None:
    _sync(store)
    with pytest.raises(NotFound):
        store.call("schedule.pause", {"name": "nope"})
    assert store.call("schedule.pause", {"name": "tick"})["receipt"] == {"name": "tick", "paused": True}
    with pytest.raises(Rejected, match="already paused"):
        store.call("schedule.pause", {"name": "tick"})
    # Paused: the clock fires nothing.
    assert store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0)], "cursor": 1020.0})["paused"]
    assert _runs(store) == []
    assert store.call("schedule.resume", {"name": "tick"}, 2000.0)["receipt"] == {"name": "tick", "paused": False}
    # Resumed: no cursor until the keeper records the next fire after now (the pause is not caught up).
    assert _row(store)[:2] == (0, None)
    _sync(store, cursor=2010.0, now=2000.0)
    assert _row(store)[1] == 2010.0
    with pytest.raises(Rejected, match="not paused"):
        store.call("schedule.resume", {"name": "tick"})


def test_pause_is_recorded_under_the_idempotency_key(store) -> None:
    _sync(store)
    args = {"name": "tick", "client_id": "c1", "idempotency_key": "k1", "payload": {"name": "tick"}}
    assert store.call("schedule.pause", args)["outcome"] == "accepted"
    assert store.call("schedule.pause", args)["outcome"] == "adopted"


def test_trigger_fires_now_once_per_request(store) -> None:
    _sync(store)
    store.call("schedule.pause", {"name": "tick"})
    key = "manual:c1:k1"
    fire = {"fire_key": key, "fire_time": 1234.5, "kind": "manual", "run_id": fire_run_id("tick", key, 1234.5),
            "spec": {"workflow": "w", "input": {}}}
    args = {"name": "tick", "fire": fire, "client_id": "c1", "idempotency_key": "k1", "payload": {"name": "tick"}}
    first = store.call("schedule.trigger", args, 1234.5)
    assert first["outcome"] == "accepted" and first["receipt"]["run_id"] == fire["run_id"]
    assert _runs(store) == [fire["run_id"]]  # a paused schedule can still be fired by hand
    assert store.call("schedule.trigger", args, 1240.0)["outcome"] == "adopted"
    # The same fire key under another idempotency key (a resent request): still that one run.
    resent = {**fire, "fire_time": 1250.0, "run_id": fire_run_id("tick", key, 1250.0)}  # the time leads the id
    other = store.call("schedule.trigger", {**args, "idempotency_key": "k2", "fire": resent}, 1250.0)
    assert other["outcome"] == "adopted" and other["receipt"]["fire_time"] == 1234.5
    assert other["receipt"]["run_id"] == fire["run_id"]  # the recorded fire's run, not the resent id
    assert _runs(store) == [fire["run_id"]]
    assert _row(store)[0] == 1 and _row(store)[3] == 1
    with pytest.raises(NotFound):
        store.call("schedule.trigger", {**args, "name": "nope", "idempotency_key": "k3"})


def test_migration_v7_adds_the_schedule_tables_to_a_v6_file(state_dir) -> None:
    path = state_dir / "state.db"
    open_store(path, StoreOptions(synchronous="OFF")).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE schedule_fire")
    conn.execute("DROP TABLE schedule")
    conn.execute("PRAGMA user_version = 6")
    conn.commit()
    conn.close()
    db = open_store(path, StoreOptions(synchronous="OFF"))
    try:
        assert schema_version(db) == LATEST_VERSION
        tables = {row[0] for row in db.execute_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
        indexes = {row[0] for row in db.execute_sql("SELECT name FROM sqlite_master WHERE type = 'index' "
                                                    "AND tbl_name = 'schedule_fire'")}
        assert {"schedule", "schedule_fire"} <= tables
        assert {"schedule_fire_run_id", "schedule_fire_schedule_fire_time"} <= indexes
    finally:
        db.close()


def test_prune_takes_a_fires_record_with_its_run_and_the_cursor_still_holds(store) -> None:
    _sync(store)
    store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0)], "cursor": 1020.0}, 1010.1)
    run_id = fire_run_id("tick", fire_key(1010.0), 1010.0)
    with store.db.atomic():
        store.db.connection().execute("UPDATE run SET status = 'done', finished_at = ? WHERE run_id = ?",
                                      (1011.0, run_id))
    pruned = store.call("state.prune", {"before": 2000.0, "apply": True}, 3000.0)
    assert pruned["receipt"]["runs"] == [run_id] and _runs(store) == []
    assert store.db.execute_sql("SELECT count(*) FROM schedule_fire").fetchone()[0] == 0
    # The record is gone, the cursor is not: the same fire is not started again.
    again = store.call("schedule.fire", {"name": "tick", "fires": [_fire(1010.0)], "cursor": 1020.0}, 3000.1)
    assert again["fired"] == [] and _runs(store) == []
