"""TimerClock, timer_sleep and the host parts that follow timer time, in one process: the offset only
grows, is written for the workers, a skip ends a worker's back-off and rings an alarm set on it, and
the housekeeper judges deadlines by timer time and pruning by host time (piwf_actors/clock.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pykka
import pytest
from testsupport import thread_waits_in, wait_for

from piwf_actors.actors.housekeeping import HousekeepingState, Retention, plan
from piwf_actors.actors.ticker import Alarm
from piwf_actors.clock import OFFSET_FILE_ENV, TimerClock, timer_sleep


def test_skip_and_advance_to_move_timer_time_forward_only(tmp_path: Path) -> None:
    base = [1000.0]
    clock = TimerClock(tmp_path / "offset", base=lambda: base[0])
    assert clock.now() == 1000.0 and (tmp_path / "offset").read_text() == "0.0"
    assert clock.skip(60) == 1060.0
    assert clock.advance_to(2000.0) == 2000.0 and clock.offset() == 1000.0
    assert float((tmp_path / "offset").read_text()) == 1000.0
    base[0] = 1010.0  # host time goes on; timer time goes on with it
    assert clock.now() == 2010.0
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance_to(1500.0)
    with pytest.raises(ValueError, match="seconds >= 0"):
        clock.skip(-1)
    with pytest.raises(ValueError, match="seconds >= 0"):
        clock.skip(float("nan"))
    assert clock.offset() == 1000.0


def test_listeners_hear_every_move_until_they_unsubscribe() -> None:
    clock = TimerClock()
    heard: list[float] = []
    stop = clock.subscribe(lambda: heard.append(clock.offset()))
    clock.skip(5)
    clock.skip(5)
    stop()
    clock.skip(5)
    assert heard == [5.0, 10.0]
    assert clock.worker_env() == {}  # without a file, workers cannot follow it


def test_timer_sleep_ends_when_the_clock_is_skipped(tmp_path: Path) -> None:
    clock = TimerClock(tmp_path / "offset")
    environ = clock.worker_env()
    assert environ == {OFFSET_FILE_ENV: str(tmp_path / "offset")}
    slept = threading.Event()

    def sleeper() -> None:
        timer_sleep(3600, environ=environ)  # an hour of timer time, ended by the skip
        slept.set()

    thread = threading.Thread(target=sleeper, name="timer-sleeper", daemon=True)
    thread.start()
    wait_for(lambda: thread_waits_in("timer-sleeper", "timer_sleep", "until"), 10, "timer_sleep to sleep")
    assert not slept.is_set()
    clock.skip(3600)
    assert slept.wait(30), "timer_sleep went on sleeping after the skip"


def test_timer_sleep_without_a_clock_file_sleeps_plainly() -> None:
    started = time.monotonic()
    timer_sleep(0.05, environ={})
    assert time.monotonic() - started >= 0.05


class _Owner(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.rings = 0

    def on_receive(self, message: Any) -> Any:
        if message == "rings":
            return self.rings
        self.rings += 1
        return None


def test_an_alarm_on_timer_time_rings_when_the_clock_is_skipped_past_it() -> None:
    clock = TimerClock()
    owner = _Owner.start()
    alarm = Alarm(owner, "ring", "test", clock=clock.now).start()
    try:
        hour = clock.now() + 3600
        alarm.arm(hour)
        wait_for(lambda: thread_waits_in("alarm-test", "_run", at=hour), 10, "the alarm's thread to wait for the hour")
        assert owner.ask("rings") == 0
        clock.skip(3600)
        alarm.nudge()  # what the housekeeper does when its clock moves
        wait_for(lambda: owner.ask("rings") == 1, 10, "the alarm rings after the skip")
    finally:
        alarm.stop()
        owner.stop()


def test_housekeeping_compares_deadlines_with_timer_time_and_prunes_on_host_time() -> None:
    retention = Retention(runs_s=86400.0, idempotency_s=0.0, prune_every_s=3600.0)
    idle = {"active": []}
    host_now, timer_now = 100_000.0, 100_000.0 + 30 * 86400
    step = plan(HousekeepingState(last_prune=0.0), idle, host_now + 3600, host_now, retention,
                next_wake=host_now + 60, timer_now=timer_now)
    assert step.expire and step.wake  # an hour and a minute of host time away, but passed in timer time
    assert step.prune is not None and step.prune["before"] == host_now - 86400.0
    not_yet = plan(HousekeepingState(last_prune=host_now), idle, timer_now + 1, host_now, retention,
                   next_wake=timer_now + 1, timer_now=timer_now)
    assert not not_yet.expire and not not_yet.wake and not_yet.prune is None
