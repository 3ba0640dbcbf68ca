"""The standby's step function (`actors.standby.decide`) with a chosen `now`, and the watch actor
against a real writer on a shared database with an injected clock."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pykka
import pytest
from testsupport import wait_for

from piwf_actors.actors.lease import acquire_lease
from piwf_actors.actors.standby import (
    LeaseSeen,
    LeaseTaken,
    StandbyState,
    StandbyWatch,
    attempt_refused,
    decide,
    poll_interval,
)
from piwf_actors.actors.writer import start_writer
from piwf_actors.store import queries
from piwf_actors.store.database import open_store
from piwf_actors.store.reader import StoreReader

HELD = LeaseSeen(epoch=3, host_id="host-a", expires_at=110.0)


def test_a_live_lease_is_watched_and_reported_once() -> None:
    step = decide(StandbyState(), HELD, 100.0)
    assert not step.acquire
    assert step.report == "host host-a is active at epoch 3 (lease expires in 10.0 s)"
    again = decide(step.state, LeaseSeen(3, "host-a", 112.0), 101.0)  # renewed: same holder, no new line
    assert not again.acquire and again.report is None


def test_a_lease_that_ran_out_or_was_released_is_taken_at_once() -> None:
    watching = decide(StandbyState(), HELD, 100.0).state
    expired = decide(watching, HELD, 110.0)  # expires_at <= now: the holder's time is up
    assert expired.acquire and expired.state.acquiring_since == 110.0
    assert expired.report is None  # the same holder and epoch: nothing new to say
    released = decide(StandbyState(), LeaseSeen(3, None, None), 5.0)
    assert released.acquire and released.report == "no host holds the lease (released at epoch 3)"


def test_one_attempt_at_a_time_until_it_is_answered_or_too_old() -> None:
    trying = decide(StandbyState(), HELD, 120.0).state
    assert trying.acquiring_since == 120.0
    assert not decide(trying, HELD, 121.0).acquire  # still with the writer
    assert decide(trying, HELD, 121.0, attempt_timeout_s=0.5).acquire  # lost answer: try again
    refused = attempt_refused(trying)
    assert refused.acquiring_since is None
    # Another standby won: the row names it with a live lease; watch it.
    step = decide(refused, LeaseSeen(4, "host-c", 125.0), 121.0)
    assert not step.acquire and step.report is not None and "host-c is active at epoch 4" in step.report


def test_the_poll_interval_is_a_fraction_of_the_lease() -> None:
    assert poll_interval(2.0) == pytest.approx(0.2)
    assert poll_interval(15.0) == 0.5
    assert poll_interval(0.1) == 0.05


class _Collector(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.got: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "got":
            return list(self.got)
        self.got.append(message)
        return None


def test_the_watch_takes_the_lease_when_its_clock_passes_the_expiry(state_dir: Path) -> None:
    """Two writers on one database: the first holds the lease; the watch, whose clock is ours to
    move, takes it (epoch + 1) only once its clock is past the expiry."""
    db = state_dir / "shared.db"
    open_store(db).close()
    now = [time.time()]
    holder = start_writer(db)
    standby_writer = start_writer(db, clock=lambda: now[0])  # lease.acquire judges by this clock
    supervisor = _Collector.start()
    watch = None
    try:
        reader = StoreReader(db)
        try:
            claim = acquire_lease(holder, lambda: queries.lease_holder(reader), lease_s=3600, state_dir=str(state_dir),
                                  host_id="host-a", lock_guards_database=False)
        finally:
            reader.close()
        watch = StandbyWatch.start(standby_writer, db, supervisor=supervisor, host_id="host-b", lease_s=3600,
                                   state_dir=str(state_dir / "b"), clock=lambda: now[0], poll_s=0.02)
        time.sleep(0.2)  # several polls while the lease runs: nothing happens
        assert supervisor.ask("got") == []
        now[0] += 3601  # an hour later (the holder is paused, say): the lease has run out
        taken = wait_for(lambda: supervisor.ask("got"), 5, "LeaseTaken from the watch")
        assert isinstance(taken[0], LeaseTaken)
        assert taken[0].claim.epoch == claim.epoch + 1 and taken[0].claim.host_id == "host-b"
        reader = StoreReader(db)
        try:
            row = queries.lease_row(reader, time.time())
        finally:
            reader.close()
        assert (row["epoch"], row["host_id"]) == (claim.epoch + 1, "host-b")
    finally:
        if watch is not None:
            watch.stop()
        supervisor.stop()
        holder.ref.stop()
        standby_writer.ref.stop()
