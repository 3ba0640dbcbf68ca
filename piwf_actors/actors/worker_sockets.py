"""`WorkerSockets`: one thread that reads the sockets of every worker process, and the way to write to them.

A thread per worker (blocked in `recv`) costs a thread start per launch and
a context switch per frame; one `selectors` loop reads whatever any worker
sent, decodes the complete frames and hands each socket's frames, in order
and as one list, to that socket's callback. The callbacks run in this
thread: they must be quick (the runner supervisor's puts a worker's requests
straight into the writer's queue, see worker_link.py).

Writes come from any thread (the writer's, with the answers to a worker's
requests; the supervisor's, with a launch): `send` tries a non-blocking send
at once under the socket's lock and keeps what did not fit, which this
thread writes out when the socket can take more, so frames leave in the
order they were sent and no sender ever blocks on a worker that is slow to
read. `remove` takes the same lock, so no send reaches a socket after it was
removed (and closed by its owner, whose file descriptor may be reused).

Owned by the Scheduler, which starts it in `on_start` and closes it in
`release_resources`; sockets are added and removed from any thread (a
wake-up pair interrupts the `select`). Reads and writes use `MSG_DONTWAIT`,
so the socket itself can stay blocking.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from piwf_actors.errors import DecodeError
from piwf_actors.wire.frames import FrameDecoder

log = logging.getLogger(__name__)

#: Bytes read from one socket per wake-up; a larger burst is read on the next turn of the loop.
READ_BYTES = 256 * 1024

# Their return values are ignored (a `safe_tell` returns whether it told).
OnFrames = Callable[[list[dict[str, Any]]], object]
OnGone = Callable[[str], object]


@dataclass(slots=True)
class _Reader:
    sock: socket.socket
    decoder: FrameDecoder
    on_frames: OnFrames
    on_gone: OnGone
    #: Held around every send and by `remove`: sends are ordered, and none comes after the removal.
    lock: threading.Lock = field(default_factory=threading.Lock)
    unsent: bytearray = field(default_factory=bytearray)  # what a send could not write yet
    removed: bool = False


class WorkerSockets:
    def __init__(self, name: str = "worker-sockets") -> None:
        """Stores arguments only; `start` opens the selector and starts the thread."""
        self._name = name
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._lock = threading.Lock()
        self._changes: list[tuple[str, socket.socket, _Reader | None]] = []
        self._readers: dict[socket.socket, _Reader] = {}  # the sockets added and not removed (under _lock)
        self._closing = False
        self._thread: threading.Thread | None = None

    def start(self) -> WorkerSockets:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()
        return self

    def add(self, sock: socket.socket, on_frames: OnFrames, on_gone: OnGone) -> None:
        """Read `sock` from now on. `on_gone(detail)` is called once when it closes or breaks (and
        the socket is then no longer read); it is not called after `remove`."""
        reader = _Reader(sock, FrameDecoder(), on_frames, on_gone)
        with self._lock:
            self._readers[sock] = reader
        self._change("add", sock, reader)

    def remove(self, sock: socket.socket) -> None:
        """Stop reading and writing `sock` (before closing it). Frames already handed over stay
        handed over; what was sent and not written yet is dropped with the socket."""
        with self._lock:
            reader = self._readers.pop(sock, None)
        if reader is not None:
            with reader.lock:  # waits for a send in progress; none starts after this
                reader.removed = True
                reader.unsent.clear()
        self._change("remove", sock, None)

    def send(self, sock: socket.socket, data: bytes) -> bool:
        """Write `data` to `sock` after everything sent to it before, from any thread, without
        blocking. False when `sock` is not (or no longer) added or its connection broke: the
        reading side reports a broken connection to its `on_gone`."""
        with self._lock:
            reader = self._readers.get(sock)
        if reader is None or not data:
            return reader is not None
        with reader.lock:
            if reader.removed:
                return False
            if reader.unsent:  # earlier frames are still waiting: these go after them
                reader.unsent += data
                return True
            try:
                sent = sock.send(data, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                return False
            if sent == len(data):
                return True
            reader.unsent += memoryview(data)[sent:]
        self._change("write", sock, reader)
        return True

    def close(self) -> None:
        """Stop the thread; call once, from the owner."""
        with self._lock:
            self._closing = True
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        if self._selector is not None:
            self._selector.close()

    # --- the thread ---------------------------------------------------------------------------

    def _change(self, what: str, sock: socket.socket, reader: _Reader | None) -> None:
        with self._lock:
            self._changes.append((what, sock, reader))
        self._wake()

    def _wake(self) -> None:
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending (buffer full), or we are closing

    def _apply_changes(self) -> bool:
        assert self._selector is not None
        with self._lock:
            changes, self._changes = self._changes, []
            closing = self._closing
        for what, sock, reader in changes:
            try:
                if what == "add":
                    self._selector.register(sock, selectors.EVENT_READ, reader)
                elif what == "write":
                    self._selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, reader)
                else:
                    self._selector.unregister(sock)
            except (KeyError, ValueError, OSError):
                pass  # removed twice, or closed before it was added: nothing to read either way
        return not closing

    def _loop(self) -> None:
        assert self._selector is not None and self._wake_r is not None
        while self._apply_changes():
            for key, events in self._selector.select():
                reader: _Reader | None = key.data
                if reader is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                    continue
                if events & selectors.EVENT_WRITE:
                    self._write(reader)
                if events & selectors.EVENT_READ:
                    self._read(reader)

    def _write(self, reader: _Reader) -> None:
        """Write out what sends left behind; read-only again once it is all out."""
        assert self._selector is not None
        with reader.lock:
            if reader.removed:
                return
            try:
                sent = reader.sock.send(reader.unsent, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                reader.unsent.clear()  # the reading side reports the broken connection
                sent = 0
            del reader.unsent[:sent]
            if reader.unsent:
                return
            try:
                self._selector.modify(reader.sock, selectors.EVENT_READ, reader)
            except (KeyError, ValueError, OSError):
                pass

    def _read(self, reader: _Reader) -> None:
        try:
            data = reader.sock.recv(READ_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._gone(reader, f"worker connection failed: {exc}")
            return
        if not data:
            self._gone(reader, "worker closed its connection")
            return
        try:
            frames = reader.decoder.feed(data)
        except DecodeError as exc:
            self._gone(reader, f"worker sent a bad frame: {exc.one_line()}")
            return
        if frames:
            try:
                reader.on_frames(frames)
            except Exception:  # a callback's bug must not end the reading of every other worker
                log.exception("a worker frame callback failed")

    def _gone(self, reader: _Reader, detail: str) -> None:
        assert self._selector is not None
        try:
            self._selector.unregister(reader.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            reader.on_gone(detail)
        except Exception:
            log.exception("a worker gone callback failed")
