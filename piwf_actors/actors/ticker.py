"""Wake-ups owned by an actor.

pykka has no timers. A Ticker is a small thread that tells its owner a
message every `interval_s` until stopped; an Alarm tells it once at the time
last armed (the nearest due time of many things: one thread, not one timer per
thing). The owner starts them in `on_start` and stops them in
`release_resources`, so no loop outlives its actor. An Alarm's times are
read on its `clock` (timer time, piwf_actors/clock.py, for the housekeeper);
`nudge()` makes it look again after that clock jumped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pykka


class Ticker:
    def __init__(self, owner: pykka.ActorRef[Any], message: Any, interval_s: float, name: str) -> None:
        self._owner = owner
        self._message = message
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ticker-{name}", daemon=True)

    def start(self) -> Ticker:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._owner.tell(self._message)
            except pykka.ActorDeadError:
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)


class Alarm:
    """Tells `owner` `message` once when the armed time comes; `arm` moves it earlier."""

    def __init__(self, owner: pykka.ActorRef[Any], message: Any, name: str,
                 clock: Callable[[], float] = time.time) -> None:
        self._owner = owner
        self._clock = clock
        self._message = message
        self._lock = threading.Lock()
        self._at: float | None = None
        self._changed = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"alarm-{name}", daemon=True)

    def start(self) -> Alarm:
        self._thread.start()
        return self

    def arm(self, at: float) -> None:
        """Ring at `at` (seconds since the epoch) unless an earlier time is armed already."""
        with self._lock:
            if self._at is not None and self._at <= at:
                return
            self._at = at
        self._changed.set()

    def nudge(self) -> None:
        """The clock jumped (a test skipped timer time): work out the wait again now. Any thread."""
        self._changed.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                at = self._at
            # At most an hour at a time: Event.wait refuses a timeout past threading.TIMEOUT_MAX (a
            # sleep until the year 2300), and a clock stepped back is noticed within the hour.
            timeout = None if at is None else min(max(0.0, at - self._clock()), 3600.0)
            if self._changed.wait(timeout):
                self._changed.clear()
                continue
            with self._lock:
                if self._at != at or (at is not None and at > self._clock()):
                    continue  # moved, or woken early by the hour's cap: wait again
                self._at = None
            try:
                self._owner.tell(self._message)
            except pykka.ActorDeadError:
                return

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._changed.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
