"""`UserCode`: the threads on which a host runs workflow code, each piece bounded in time.

A host runs code of its users in its own process in three places: loading a workflow (or schedule,
or resource manager) file, which executes it; a workflow's concurrency key function; a schedule's
input function. None of them may run on a door's thread (the gateway, the embedding handle's
caller) or hold up the host's stop, so they run here:

- `submit(work, done)` runs `work()` on a user-code thread and calls `done(result, error)` exactly
  once: when `work` returns or raises, or — if sooner — when the limit of the phase it is in runs out
  (`error` is then `UserCodeTimeout`, one line naming what and the limit). `call(work)` is the
  blocking form (inline when already on a user-code thread of this object).
- Inside `work`, `phase(kind, subject)` marks workflow code: the call's deadline becomes now + the
  limit of `kind` (`LOAD`: `UserCodeLimits.load_timeout_s`, `KEY`: `key_timeout_s`) until the phase
  ends. Outside a phase nothing is timed (the host's own code between phases). Outside a user-code
  thread (a worker process, the CLI) `phase` and `shared` do nothing but run the code.
- `shared(key, kind, subject, fn)`: concurrent calls with one key (the same file's bytes) share one
  execution of `fn`; the others wait for it no longer than its own deadline, so a file whose import
  blocks occupies one thread, whoever asks for it again.

Code that overruns its limit cannot be stopped (Python has no way to kill a thread): its call is
answered and its thread *abandoned*. The thread is a daemon, so it never holds up the process's
exit, and it rejoins the pool if the code ever returns (its result is dropped). At most
`UserCodeLimits.max_hung` calls may hang at once; beyond that every submission is refused at once
with `UserCodeUnavailable` (one line naming the oldest), until one returns or the host restarts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from piwf_actors.errors import UserCodeTimeout, UserCodeUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Phase kinds: loading a file (executing it), and a short function (a key, a schedule's input).
LOAD = "load"
KEY = "key"
_VERB = {LOAD: "did not finish", KEY: "did not return"}
_SETTING = {LOAD: "load_timeout_s", KEY: "key_timeout_s"}

#: User-code threads working at once (hung ones not counted); more submissions wait their turn.
MAX_WORKING = 32
#: An idle thread exits after this long.
IDLE_S = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class UserCodeLimits:
    """How long workflow code may run on the host (docs/workflows.md, "Limits on workflow code the host runs")."""

    key_timeout_s: float = 5.0  # a concurrency key function, a schedule's input function
    load_timeout_s: float = 30.0  # executing one workflow, schedule or resource manager file
    max_hung: int = 8  # calls past their limit that may still be running before more are refused

    def __post_init__(self) -> None:
        for name in ("key_timeout_s", "load_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be positive, got {value!r}")
        if isinstance(self.max_hung, bool) or not isinstance(self.max_hung, int) or self.max_hung < 1:
            raise ValueError(f"max_hung_user_code must be a positive integer, got {self.max_hung!r}")

    def seconds(self, kind: str) -> float:
        return self.load_timeout_s if kind == LOAD else self.key_timeout_s


Done = Callable[[Any, BaseException | None], None]


class _Call:
    """One submission: its work, its answer (given once), and the phase its code is in."""

    __slots__ = ("work", "done", "runner", "answered", "deadline", "subject", "kind", "hung_since", "order")

    def __init__(self, runner: UserCode, work: Callable[[], Any], done: Done, order: int) -> None:
        self.work, self.done, self.runner, self.order = work, done, runner, order
        self.answered = False  # guarded by runner._lock
        self.deadline = float("inf")  # monotonic; inf outside a phase
        self.subject = ""
        self.kind = KEY
        self.hung_since: float | None = None

    def timeout(self) -> UserCodeTimeout:
        return UserCodeTimeout(self.subject, _VERB[self.kind], self.runner.limits.seconds(self.kind),
                               _SETTING[self.kind])


@dataclasses.dataclass
class _SharedRun:
    deadline: float
    timeout: UserCodeTimeout
    finished: threading.Event = dataclasses.field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    waiting: int = 0  # calls waiting for this run (guarded by the runner's lock)


class _Local(threading.local):
    call: _Call | None = None


_local = _Local()


class UserCode:
    """The user-code threads of one host (or one resolver). Thread-safe; see the module docstring.

    Threads start when work comes (none before) and are daemons; `close()` answers what is still
    running and lets idle threads go, without waiting for any."""

    def __init__(self, limits: UserCodeLimits | None = None) -> None:
        self.limits = limits or UserCodeLimits()
        self._lock = threading.Condition()
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._running: dict[int, _Call] = {}  # by order; answered or not (hung ones stay until they return)
        self._deadlines: list[tuple[float, int]] = []  # (deadline, order) heap, for the watcher; stale entries skipped
        self._shared_runs: dict[Hashable, _SharedRun] = {}
        self._threads = 0
        self._idle = 0  # threads waiting for work in _serve
        self._queued = 0  # submissions put on the queue and not taken yet
        self._hung = 0
        self._order = itertools.count()
        self._watcher: threading.Thread | None = None
        self._closed = False

    # --- submitting -----------------------------------------------------------------------------

    def submit(self, work: Callable[[], T], done: Callable[[T | None, BaseException | None], None]) -> None:
        """Run `work` on a user-code thread; `done(result, error)` is called exactly once, from that thread,
        from the watcher (a limit ran out) or from here (refused: too many hung calls, or closed)."""
        call = _Call(self, work, done, next(self._order))
        with self._lock:
            refusal = self._refusal()
            if refusal is None:
                if self._watcher is None:
                    self._watcher = threading.Thread(target=self._watch, name="piwf-user-code-watch", daemon=True)
                    self._watcher.start()
                # A new thread unless an idle one is left for this call once the queued ones are taken.
                if self._idle <= self._queued and self._threads - self._hung < MAX_WORKING:
                    self._threads += 1
                    threading.Thread(target=self._serve, name="piwf-user-code", daemon=True).start()
                self._queued += 1
                self._queue.put(call)
        if refusal is not None:
            done(None, refusal)

    def call(self, work: Callable[[], T]) -> T:
        """`work()` on a user-code thread, waited for; raises what it raised, or UserCodeTimeout /
        UserCodeUnavailable. Already on one of this object's threads: `work()` right here."""
        current = _local.call
        if current is not None and current.runner is self:
            return work()
        answered = threading.Event()
        outcome: list[Any] = []

        def done(result: Any, error: BaseException | None) -> None:
            outcome.append((result, error))
            answered.set()

        self.submit(work, done)
        answered.wait()
        result, error = outcome[0]
        if error is not None:
            raise error
        return result  # type: ignore[no-any-return]

    def _refusal(self) -> UserCodeUnavailable | None:
        if self._closed:
            return UserCodeUnavailable("the host is stopping")
        if self._hung < self.limits.max_hung:
            return None
        oldest = min((c for c in self._running.values() if c.hung_since is not None), key=lambda c: c.order)
        assert oldest.hung_since is not None
        return UserCodeUnavailable(
            f"{self._hung} calls of workflow code are still running past their limits (the oldest: "
            f"{oldest.subject}, for {time.monotonic() - oldest.hung_since + self.limits.seconds(oldest.kind):.0f} s); "
            "the host runs no more workflow code until one returns or the host restarts (max_hung_user_code)")

    # --- the threads ----------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                call = self._queue.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._queued == 0:  # else one was queued while this thread counted as idle: it stays for it
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                if call is None:
                    self._threads -= 1
                    return
                self._queued -= 1
                closed = self._closed
            if closed:  # queued before the stop: answered, never run
                self._answer(call, None, UserCodeUnavailable("the host is stopping"))
                continue
            self._run(call)

    def _run(self, call: _Call) -> None:
        with self._lock:
            self._running[call.order] = call
        _local.call = call
        result: Any = None
        error: BaseException | None = None
        try:
            result = call.work()
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit too
            error = exc
        finally:
            _local.call = None
        with self._lock:
            del self._running[call.order]
            if call.hung_since is not None:
                self._hung -= 1
                log.warning("%s returned after %.1f s past its limit", call.subject,
                            time.monotonic() - call.hung_since)
            first = not call.answered
            call.answered = True
        if first:
            self._answer(call, result, error)

    def _answer(self, call: _Call, result: Any, error: BaseException | None) -> None:
        try:
            call.done(result, error)
        except Exception:  # the answer's own failure must not take the thread down
            log.exception("answering a call of workflow code failed")

    def _watch(self) -> None:
        """The watcher: answers each call whose phase outlived its limit, and marks it hung."""
        while True:
            expired: list[_Call] = []
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    deadline, order = heapq.heappop(self._deadlines)
                    call = self._running.get(order)
                    if call is None or call.answered or call.deadline != deadline:
                        continue  # finished, or in another phase by now
                    call.answered = True
                    call.hung_since = now
                    self._hung += 1
                    expired.append(call)
                wait = self._deadlines[0][0] - now if self._deadlines else None
                if not expired:
                    self._lock.wait(wait)
            for call in expired:
                log.warning("%s; its thread is abandoned (%d calls of workflow code hang)", call.timeout().one_line(),
                            self._hung)
                self._answer(call, None, call.timeout())

    def _deadline(self, call: _Call, deadline: float, kind: str, subject: str) -> None:
        """Enter or leave a phase. Under the lock, so the watcher never answers a call with the words of
        one phase and the deadline of another."""
        with self._lock:
            call.deadline, call.kind, call.subject = deadline, kind, subject
            if deadline != float("inf"):
                heapq.heappush(self._deadlines, (deadline, call.order))
                if self._deadlines[0] == (deadline, call.order):
                    self._lock.notify()  # an earlier wake-up than the watcher planned

    # --- phases and shared runs -------------------------------------------------------------------

    def _shared(self, call: _Call, key: Hashable, kind: str, subject: str, fn: Callable[[], T]) -> T:
        with self._lock:
            run = self._shared_runs.get(key)
            owner = run is None
            if run is None:
                run = _SharedRun(time.monotonic() + self.limits.seconds(kind),
                                 UserCodeTimeout(subject, _VERB[kind], self.limits.seconds(kind), _SETTING[kind]))
                self._shared_runs[key] = run
            else:
                run.waiting += 1
        if not owner:
            try:
                finished = run.finished.wait(max(0.0, run.deadline - time.monotonic()))
            finally:
                with self._lock:
                    run.waiting -= 1
            if not finished:
                raise run.timeout
            if run.error is not None:
                raise run.error
            return run.value  # type: ignore[no-any-return]
        try:
            with _phase(call, kind, subject):
                run.value = fn()
            return run.value  # type: ignore[no-any-return]
        except BaseException as exc:
            run.error = exc
            raise
        finally:
            run.finished.set()
            with self._lock:
                if self._shared_runs.get(key) is run:
                    del self._shared_runs[key]

    # --- stop and status --------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new work, answer what still runs ("the host is stopping"), let idle threads go. Waits
        for nothing: a thread still in workflow code is a daemon and is left to the process's exit."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = [call for call in self._running.values() if not call.answered]
            for call in pending:
                call.answered = True
            threads = self._threads
            self._lock.notify_all()
        for _ in range(threads):
            self._queue.put(None)
        for call in pending:
            self._answer(call, None, UserCodeUnavailable("the host is stopping"))
        while True:  # submissions still queued: answered, never run
            try:
                queued = self._queue.get_nowait()
            except queue.Empty:
                break
            if queued is not None:
                self._answer(queued, None, UserCodeUnavailable("the host is stopping"))
            else:
                self._queue.put(None)
                break

    def status(self) -> dict[str, Any]:
        """Calls running (of which `waiting` wait for another's run of the same file) and hung, for
        host.status."""
        with self._lock:
            hung = sorted((c for c in self._running.values() if c.hung_since is not None), key=lambda c: c.order)
            return {"running": len(self._running) - len(hung), "hung": len(hung),
                    "waiting": sum(run.waiting for run in self._shared_runs.values()),
                    "oldest_hung": hung[0].subject if hung else None, "max_hung": self.limits.max_hung,
                    "key_timeout_s": self.limits.key_timeout_s, "load_timeout_s": self.limits.load_timeout_s}


# --- what code on a user-code thread calls ------------------------------------------------------


@contextlib.contextmanager
def _phase(call: _Call, kind: str, subject: str) -> Iterator[None]:
    runner = call.runner
    before = (call.deadline, call.kind, call.subject)
    runner._deadline(call, time.monotonic() + runner.limits.seconds(kind), kind, subject)
    try:
        yield
    finally:
        runner._deadline(call, *before)


@contextlib.contextmanager
def phase(kind: str, subject: str) -> Iterator[None]:
    """Workflow code of `kind` (LOAD or KEY) runs inside: on a user-code thread, its call is answered
    with `UserCodeTimeout` ("<subject> did not return within 5 s (key_timeout_s)") if the block
    outlives the limit. Elsewhere (a worker, the CLI) the block just runs."""
    call = _local.call
    if call is None:
        yield
        return
    with _phase(call, kind, subject):
        yield


def shared(key: Hashable, kind: str, subject: str, fn: Callable[[], T]) -> T:
    """`fn()` in a phase of `kind`, shared with concurrent calls of the same `key` on this thread's
    UserCode (see the module docstring); elsewhere just `fn()`."""
    call = _local.call
    if call is None:
        return fn()
    return call.runner._shared(call, key, kind, subject, fn)


def on_user_code_thread() -> bool:
    """Whether this thread is running a call of a `UserCode` (where `shared` shares and bounds); a
    worker's launch thread is not."""
    return _local.call is not None


def remaining() -> float | None:
    """Seconds left in the current phase on a user-code thread; None when nothing is timed."""
    call = _local.call
    if call is None or call.deadline == float("inf"):
        return None
    return max(0.0, call.deadline - time.monotonic())
