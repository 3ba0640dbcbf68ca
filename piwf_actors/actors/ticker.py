"""A periodic wake-up owned by an actor.

pykka has no timers. A Ticker is a small thread that tells its owner a
message every `interval_s` until stopped; the owner starts it in `on_start`
and stops it in `release_resources`, so no loop outlives its actor.
"""

from __future__ import annotations

import threading
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
