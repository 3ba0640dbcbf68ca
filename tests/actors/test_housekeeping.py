"""The housekeeper: its step function (`plan`) with a chosen `now`, then the actor against a real writer on
a temporary SQLite store whose clock the test moves. It prunes a finished run only while the scheduler's
board section shows no active run, and applies an interaction deadline once it has passed. Its ticks are
driven by the test (`ask(HousekeepingTick())`); the writer applies commands in the order they were sent,
so a barrier command after a tick shows whether that tick sent anything."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
from testsupport import wait_for
from writer_store import TOKEN, WriterStore

from piwf_actors.actors.housekeeping import (
    PRUNE_MAX_RUNS,
    Housekeeper,
    HousekeepingState,
    HousekeepingTick,
    Retention,
    plan,
    scheduler_idle,
)
from piwf_actors.board import HostBoard, Section
from piwf_actors.store.requests import WriteResult

DAY = 86400.0
RETENTION = Retention(runs_s=30 * DAY, idempotency_s=365 * DAY, prune_every_s=3600.0)
IDLE = {"active": [], "suspended": False}
BUSY = {"active": [{"run_id": "r1", "pid": 7, "generation": 1, "kind": "run"}], "suspended": False}


# --- plan: pure -------------------------------------------------------------------------------------


def test_an_idle_scheduler_gets_a_prune_once_the_interval_has_passed() -> None:
    state = HousekeepingState(last_prune=1000.0)
    early = plan(state, IDLE, None, 1000.0 + 3599.0, RETENTION)
    assert early.prune is None and early.state == state
    step = plan(state, IDLE, None, 1000.0 + 3600.0, RETENTION)
    now = 4600.0
    assert step.prune == {"before": now - 30 * DAY, "apply": True, "max_runs": PRUNE_MAX_RUNS,
                          "idempotency_before": now - 365 * DAY}
    assert step.state == HousekeepingState(last_prune=now, pruning=True)
    # One prune at a time: until its answer, nothing more.
    assert plan(step.state, IDLE, None, now + 7200.0, RETENTION).prune is None


def test_no_prune_while_a_run_is_active_with_retention_off_or_before_the_scheduler_published() -> None:
    state = HousekeepingState(last_prune=0.0)
    assert plan(state, BUSY, None, 10_000.0, RETENTION).prune is None
    assert plan(state, {}, None, 10_000.0, RETENTION).prune is None  # no section yet: not known to be idle
    off = Retention(runs_s=0.0, idempotency_s=365 * DAY, prune_every_s=3600.0)
    assert plan(state, IDLE, None, 10_000.0, off).prune is None
    assert not scheduler_idle(BUSY) and not scheduler_idle({}) and scheduler_idle(IDLE)


def test_idempotency_records_kept_for_ever_are_not_named_in_the_prune() -> None:
    keep = Retention(runs_s=DAY, idempotency_s=0.0, prune_every_s=1.0)
    step = plan(HousekeepingState(last_prune=0.0), IDLE, None, 10.0 * DAY, keep)
    assert step.prune == {"before": 9.0 * DAY, "apply": True, "max_runs": PRUNE_MAX_RUNS}


def test_a_passed_deadline_is_applied_once_at_a_time_busy_or_idle() -> None:
    state = HousekeepingState(last_prune=1000.0)
    assert not plan(state, BUSY, 1005.0, 1004.9, RETENTION).expire  # not yet
    step = plan(state, BUSY, 1005.0, 1005.0, RETENTION)
    assert step.expire and step.state.expiring and step.prune is None
    assert not plan(step.state, BUSY, 1005.0, 1006.0, RETENTION).expire  # its answer is awaited
    assert not plan(state, BUSY, None, 1006.0, RETENTION).expire  # no deadline pending


def test_nothing_is_sent_while_the_lease_is_suspended() -> None:
    state = HousekeepingState(last_prune=0.0)
    suspended = {"active": [], "suspended": True}
    step = plan(state, suspended, 5.0, 10 * DAY, RETENTION)
    assert step.state == state and not step.expire and step.prune is None


# --- the actor against a real writer -----------------------------------------------------------------


def _start(writer_store: WriterStore, board: HostBoard, **options: Any) -> pykka.ActorRef[Any]:
    # A tick an hour apart: the test's own ticks are the only ones.
    return Housekeeper.start(writer_store.writer, writer_store.database, supervisor=None, board=board, tick_s=3600.0,
                             clock=writer_store.now, **options)


def test_a_finished_run_past_retention_is_pruned_only_while_no_run_is_active(writer_store: WriterStore) -> None:
    writer_store.finished_run("old")
    assert writer_store.status("old") == "done"
    board = HostBoard()
    board.publish(Section.SCHEDULER, BUSY)
    keeper = _start(writer_store, board, retention_days=1.0, prune_every_s=60.0)
    try:
        writer_store.time += 2 * DAY  # past the retention and the prune interval
        keeper.ask(HousekeepingTick())
        writer_store.barrier()
        assert writer_store.status("old") == "done"  # a run is active: no prune was sent
        board.publish(Section.SCHEDULER, IDLE)
        keeper.ask(HousekeepingTick())
        writer_store.barrier()
        assert writer_store.status("old") is None
    finally:
        keeper.stop()


def test_a_recent_run_or_retention_off_prunes_nothing(writer_store: WriterStore) -> None:
    writer_store.finished_run("recent")
    board = HostBoard()
    board.publish(Section.SCHEDULER, IDLE)
    keeper = _start(writer_store, board, retention_days=3.0, prune_every_s=60.0)
    off = _start(writer_store, board, retention_days=0.0, prune_every_s=60.0)
    try:
        writer_store.time += 2 * DAY  # past the interval, within the retention
        keeper.ask(HousekeepingTick())
        off.ask(HousekeepingTick())
        writer_store.barrier()
        assert writer_store.status("recent") == "done"
    finally:
        keeper.stop()
        off.stop()


DECISION = {"kind": "decision", "audience": "ops", "title": "t", "choices": {"yes": {"label": "Y", "input": None}},
            "default_response": {"choice": "yes"}, "timeout_s": 10}


def _request_status(writer_store: WriterStore, request_id: str) -> str:
    row = writer_store.reader.one("SELECT status FROM interactive_request WHERE request_id = ?", (request_id,))
    assert row is not None
    return str(row[0])


def test_a_passed_deadline_is_applied_with_the_default_response(writer_store: WriterStore) -> None:
    writer_store.claimed_run("r1")
    writer_store.worker("r1", "ready", {"start_at": "n"})
    asked = writer_store.worker("r1", "interaction_request", {
        "node_id": "n", "attempt_id": "att1", "kind": "decision", "contract": DECISION, "after_s": 10,
        "default_response": DECISION["default_response"]})
    request_id = asked["request_id"]
    assert _request_status(writer_store, request_id) == "pending"
    board = HostBoard()
    board.publish(Section.SCHEDULER, IDLE)
    keeper = _start(writer_store, board)
    try:
        writer_store.time += 5  # before the deadline: nothing is sent
        keeper.ask(HousekeepingTick())
        writer_store.barrier()
        assert _request_status(writer_store, request_id) == "pending"
        writer_store.time += 6  # past it
        keeper.ask(HousekeepingTick())
        writer_store.barrier()
        assert _request_status(writer_store, request_id) == "settled"
        submissions = writer_store.reader.all("SELECT outcome, provenance FROM interactive_submission WHERE request_id = ?",
                                       (request_id,))
        assert len(submissions) == 1 and submissions[0][0] == "accepted" and '"timeout"' in submissions[0][1]
        assert writer_store.status("r1") == "queued"  # woken by the deadline
    finally:
        keeper.stop()


def test_answers_it_did_not_ask_for_are_ignored(writer_store: WriterStore) -> None:
    board = HostBoard()
    board.publish(Section.SCHEDULER, IDLE)
    keeper = _start(writer_store, board)
    try:
        for token in ("prune", "expire", None, "state.prune:0123456789ab"):
            keeper.ask(WriteResult(True, {"receipt": {"run_count": 3}}, correlation_id=token))
        assert keeper.is_alive()
        wait_for(lambda: keeper.ask(HousekeepingTick()) is None, 5, "the housekeeper to go on ticking")
    finally:
        keeper.stop()


def test_a_sleep_shorter_than_a_tick_wakes_by_the_alarm_the_writers_notice_armed(writer_store: WriterStore) -> None:
    """The housekeeper's tick is an hour here: only the change notice of the new wait (it arms the
    alarm at the wake-up time) can wake the sleeper within the test's wait."""
    follow = threading.Event()

    def real_time() -> None:  # the writer's and the housekeeper's clock follows the wall clock
        while not follow.wait(0.01):
            writer_store.time = time.time()

    clock = threading.Thread(target=real_time, daemon=True)
    writer_store.time = time.time()
    clock.start()
    keeper = _start(writer_store, HostBoard())
    try:
        keeper.ask(HousekeepingTick())  # answered after on_start, which subscribed to the writer …
        writer_store.barrier()  # … and the writer took the subscription before the commands below
        writer_store.writer.call("run.create", {"workflow": "w", "run_id": "nap", "input": {}})
        claimed = writer_store.writer.call("scheduler.claim_next", {"token_hash": TOKEN, "launch_id": "re-nap",
                                                             "claim_lease_s": 60})
        writer_store.claims["nap"] = claimed
        writer_store.worker("nap", "ready", {"want_state": False})
        writer_store.worker("nap", "wait_request", {"node_id": "s", "attempt_id": "a1", "kind": "sleep", "seconds": 0.3})
        assert writer_store.status("nap") == "parked"
        wait_for(lambda: writer_store.status("nap") == "queued", 30, "the sleeper is woken")
    finally:
        keeper.stop()
        follow.set()
        clock.join()
