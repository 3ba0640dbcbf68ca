"""The housekeeper's Alarm: one thread that rings its owner once at the nearest time armed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pykka
import pytest
from testsupport import thread_waits_in, wait_for

from piwf_actors.actors.ticker import Alarm


class Owner(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.rings: list[float] = []

    def on_receive(self, message: Any) -> Any:
        if message == "rings":
            return list(self.rings)
        self.rings.append(time.time())
        return None


@pytest.fixture
def owner() -> Iterator[pykka.ActorRef[Any]]:
    ref = Owner.start()
    yield ref
    ref.stop()


def test_a_time_far_past_the_timeout_limit_does_not_stop_the_alarm(owner: pykka.ActorRef[Any]) -> None:
    alarm = Alarm(owner, "ring", "test").start()
    try:
        far = time.time() + 1e10  # a sleep until the year 2300: past threading.TIMEOUT_MAX
        alarm.arm(far)
        wait_for(lambda: thread_waits_in("alarm-test", "_run", at=far), 10, "the alarm's thread to wait for it")
        alarm.arm(time.time() + 0.05)  # an earlier one moves it
        wait_for(lambda: owner.ask("rings"), 10, "the alarm rings at the earlier time")
        alarm.arm(time.time() + 0.05)
        wait_for(lambda: len(owner.ask("rings")) == 2, 10, "and again when armed again")
    finally:
        alarm.stop()


def test_a_later_time_does_not_move_an_earlier_one(owner: pykka.ActorRef[Any]) -> None:
    alarm = Alarm(owner, "ring", "test").start()
    try:
        start = time.time()
        alarm.arm(start + 0.1)
        alarm.arm(start + 3600)
        wait_for(lambda: owner.ask("rings"), 10, "the alarm rings at the earlier time")
        assert owner.ask("rings")[0] >= start + 0.1
    finally:
        alarm.stop()
