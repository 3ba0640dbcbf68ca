"""Timer time: the clock a workflow's timers are set and compared by (a leaf: imports nothing of the package).

A host keeps two kinds of time. **Host time** (`time.time()`, or the
database server's clock on PostgreSQL) fences the host: its lease, run
claims, heartbeats, the watchdog. **Timer time** is what a workflow waits
for: durable sleeps, message-wait timeouts, decision, checkpoint and agent
deadlines, retry back-offs and schedules. Timer time is host time plus an
offset that only grows. In production the offset is 0 for good, so the two
are the same clock; a test moves it forward (`TimerClock.skip`,
`advance_to`, what `piwf_actors.testing` does) and every timer comes due at
once while the leases and claims, on host time, stay as they were.

Worker processes follow the offset through a file: a clock made with an
`offset_file` writes its offset there on every move, the host passes the
path to its workers in `$PIWF_TIMER_OFFSET_FILE` (`worker_env`), and
`timer_sleep` (a node's retry back-off) polls it. Without that variable a
worker sleeps plainly, as it always did.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: The environment variable that gives a worker process the path of its host's offset file.
OFFSET_FILE_ENV = "PIWF_TIMER_OFFSET_FILE"

#: How often `timer_sleep` looks at the offset file while a test clock is configured.
POLL_S = 0.02


class TimerClock:
    """Host time plus an offset that only moves forward (see the module docstring).

    Thread-safe: a test thread moves it while the host's actors read it. `subscribe(fn)` calls `fn()`
    in the mover's thread after every move (the housekeeper looks at its timers at once instead of at
    its next tick); `fn` must be quick and must not block.
    """

    def __init__(self, offset_file: str | Path | None = None, *,
                 base: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._offset = 0.0
        self._base = base
        self._file = None if offset_file is None else Path(offset_file)
        self._listeners: list[Callable[[], None]] = []
        if self._file is not None:
            self._write(0.0)

    @property
    def offset_file(self) -> Path | None:
        return self._file

    def offset(self) -> float:
        """Seconds timer time is ahead of host time."""
        return self._offset  # a float read is atomic; the lock only orders moves

    def now(self) -> float:
        """Timer time, in seconds since the epoch."""
        return self._base() + self._offset

    def skip(self, seconds: float) -> float:
        """Move timer time `seconds` forward (>= 0); returns the new timer time."""
        seconds = float(seconds)
        if not (math.isfinite(seconds) and seconds >= 0):  # an infinite skip would leave every timer due forever
            raise ValueError(f"skip needs a finite number of seconds >= 0, got {seconds!r}")
        with self._lock:
            self._offset += seconds
            self._write(self._offset)
        self._notify()
        return self.now()

    def advance_to(self, when: float) -> float:
        """Move timer time forward to `when` (seconds since the epoch, or an aware datetime); a time
        that has passed already is refused: timer time never goes back."""
        stamp = when.timestamp() if hasattr(when, "timestamp") else float(when)
        if not math.isfinite(stamp):  # NaN compares as "not in the past" and would poison the offset
            raise ValueError(f"advance_to needs a finite time, got {stamp!r}")
        with self._lock:
            now = self._base() + self._offset
            if stamp < now:
                raise ValueError(f"advance_to({stamp:.3f}) is {now - stamp:.3f} s in the past of timer time "
                                 f"{now:.3f}; timer time only moves forward")
            self._offset += stamp - now
            self._write(self._offset)
        self._notify()
        return self.now()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener()` after every move; returns the function that ends it."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def worker_env(self) -> dict[str, str]:
        """What a worker process's environment needs to follow this clock (nothing without a file)."""
        return {} if self._file is None else {OFFSET_FILE_ENV: str(self._file)}

    def _write(self, offset: float) -> None:
        if self._file is None:
            return
        # Written whole and renamed into place: a worker never reads half a number.
        part = self._file.with_name(self._file.name + ".part")
        part.write_text(repr(offset))
        os.replace(part, self._file)

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()


def _file_offset(path: str, last: float) -> float:
    try:
        return float(Path(path).read_text())
    except (OSError, ValueError):
        return last  # gone with its host, or unreadable for a moment: keep the last value seen


def timer_sleep(seconds: float, *, environ: dict[str, str] | None = None) -> None:
    """Sleep `seconds` of timer time (a worker's retry back-off).

    Without `$PIWF_TIMER_OFFSET_FILE` (production) this is `time.sleep`. With it, it ends once host
    time plus the file's offset reaches the target, polling every POLL_S: a skip on the test's clock
    ends it at once.
    """
    path = (os.environ if environ is None else environ).get(OFFSET_FILE_ENV)
    if not path:
        time.sleep(seconds)
        return
    offset = _file_offset(path, 0.0)
    until = time.time() + offset + seconds
    while True:
        offset = _file_offset(path, offset)
        left = until - (time.time() + offset)
        if left <= 0:
            return
        time.sleep(min(left, POLL_S))
