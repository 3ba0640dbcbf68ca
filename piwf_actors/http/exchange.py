"""`Exchange`: the HTTP door's requests and streams that wait for the gateway, by connection id.

The door numbers each request (and each event stream) from `HTTP_FIRST_ID`
up and registers what to do with its answer; the gateway posts answers and
events here (`DoorSink`, protocol/doors.py) from its own threads, and the
callbacks hand them to the event loop that waits (`call_soon_threadsafe`).
Thread-safe: `open`, `close`, `answer` and `event` may run on any thread.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from piwf_actors.protocol.doors import HTTP_FIRST_ID

OnAnswer = Callable[[dict[str, Any]], None]
OnEvent = Callable[[str, int, bytes], None]


class Exchange:
    def __init__(self) -> None:
        self._ids = itertools.count(HTTP_FIRST_ID)
        self._lock = threading.Lock()
        self._open: dict[int, tuple[OnAnswer, OnEvent | None]] = {}
        #: Counts the committed token additions and revocations (`tokens_changed`, on the gateway's thread,
        #: before the answer): the door's token cache holds an entry only while this is unchanged.
        self.token_generation = 0

    def tokens_changed(self) -> None:
        with self._lock:
            self.token_generation += 1

    def __len__(self) -> int:
        return len(self._open)

    def open(self, on_answer: OnAnswer, on_event: OnEvent | None = None) -> int:
        """A new connection id whose answer (and events) go to these callbacks (called on the gateway's threads)."""
        with self._lock:
            conn_id = next(self._ids)
            self._open[conn_id] = (on_answer, on_event)
        return conn_id

    def close(self, conn_id: int) -> None:
        """Nothing more goes to this id's callbacks (an answer that comes later is dropped)."""
        with self._lock:
            self._open.pop(conn_id, None)

    def answer(self, conn_id: int, frame: dict[str, Any]) -> None:
        with self._lock:
            found = self._open.get(conn_id)
        if found is not None:
            found[0](frame)

    def event(self, conn_id: int, topic: str, revision: int, payload: bytes) -> None:
        with self._lock:
            found = self._open.get(conn_id)
        if found is not None and found[1] is not None:
            found[1](topic, revision, payload)
