"""What bounds one node attempt in the worker: its deadline (SIGALRM) and the traceback kept of its failure.

Apart from the engine because reconcile.py (a resource manager's reconcile) bounds its callback the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import traceback
from collections.abc import Iterator


class NodeTimeout(Exception):
    pass


class _Alarm:
    """SIGALRM as a per-node deadline. The handler is installed once per worker process; a node
    only sets and clears the timer (two system calls), which matters on the hot path: every
    compute node has a default timeout."""

    installed = False
    armed_for: float | None = None

    @classmethod
    def fire(cls, _signum: int, _frame: object) -> None:
        if cls.armed_for is not None:
            raise NodeTimeout(f"timed out after {cls.armed_for:g} s")


@contextlib.contextmanager
def deadline(timeout_s: float | None) -> Iterator[None]:
    """Raise NodeTimeout in the main thread when `timeout_s` passes (SIGALRM)."""
    if not timeout_s:
        yield
        return
    if not _Alarm.installed:
        signal.signal(signal.SIGALRM, _Alarm.fire)
        _Alarm.installed = True
    _Alarm.armed_for = timeout_s
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _Alarm.armed_for = None


#: A stored traceback keeps at most this many frames (the innermost) and characters.
TRACEBACK_FRAMES = 20
TRACEBACK_CHARS = 8000
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_traceback(exc: BaseException) -> str:
    """The frames of `exc` that are the user's code (the workflow file, what it imports), not this
    package's engine, formatted like Python's own traceback and bounded; the exception line last."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR + os.sep)]
    dropped = max(0, len(frames) - TRACEBACK_FRAMES)
    lines = ["Traceback (most recent call last):\n"]
    if dropped:
        lines.append(f"  … {dropped} earlier frame(s) left out\n")
    lines += traceback.format_list(frames[dropped:])
    lines += traceback.format_exception_only(type(exc), exc)
    text = "".join(lines)
    return text if len(text) <= TRACEBACK_CHARS else "…" + text[-(TRACEBACK_CHARS - 1):]


def one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:1000]
