"""The gateway's socket I/O: one selector thread, owned by the ClientGateway actor.

The thread accepts connections, checks the peer's uid, reads and decodes
frames, and writes queued frames out. It never interprets a request: every
decoded frame is handed to the actor (`on_frame`), and answers come back
through `post`, which any thread may call. A connection is closed — only
that one — on a malformed frame, on a frame body that does not arrive
within the deadline (slowloris), or when its send queue overflows (a
watcher that does not read): the writer and other clients are never held
up by one slow peer.

The thread also keeps the owner's one alarm (`alarm_at`): its select waits
no longer than the alarm, so the owner gets a timed wake-up without a timer
thread of its own (the gateway uses it to send coalesced watch events).
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import selectors
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from piwf_actors.errors import DecodeError, EncodeError, HostError, UnsafePath
from piwf_actors.protocol.envelope import SCHEMA, event_body
from piwf_actors.wire import FrameDecoder, encode_frame
from piwf_actors.wire.frames import frame_of_body
from piwf_actors.wire.limits import Limits

log = logging.getLogger(__name__)


#: How long a connection that overflowed its send queue gets to take the overflow event.
OVERFLOW_GRACE_S = 2.0
#: The longest select: how often deadlines are checked while nothing happens.
_SELECT_S = 0.5



@dataclass(frozen=True, slots=True)
class Peer:
    """Who is at the other end of a connection, by the kernel's word (SO_PEERCRED at connect):
    recorded with every answer it gives (docs/security.md)."""

    pid: int
    uid: int

    def to_wire(self) -> dict[str, int]:
        return {"pid": self.pid, "uid": self.uid}


@dataclass
class _Conn:
    conn_id: int
    sock: socket.socket
    decoder: FrameDecoder
    peer: Peer
    outbox: collections.deque[bytes] = field(default_factory=collections.deque)
    outbox_bytes: int = 0
    inflight: int = 0
    frame_started: float | None = None
    close_when_flushed: bool = False
    overflowed_at: float | None = None
    closed: bool = False
    writing: bool = False  # registered for EVENT_WRITE too (a modify is a syscall: only when it changes)


def _peer(sock: socket.socket) -> Peer:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return Peer(pid, uid)


def prepare_socket_path(path: Path) -> None:
    """Remove a stale socket file left by a dead host; refuse anything else.

    Only a socket (never a symlink or a regular file) is removed, and only
    when nothing answers on it.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(str(path), "socket path is a symbolic link")
    if not stat.S_ISSOCK(info.st_mode):
        raise UnsafePath(str(path), "socket path exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)
        return
    except OSError as exc:
        raise HostError(f"cannot probe existing socket {path}: {exc}") from exc
    finally:
        probe.close()
    raise HostError(f"another process is listening on {path}")


class SocketLoop:
    # The callbacks' return values are ignored (`object`): the actor's `safe_tell` returns whether it told.
    def __init__(self, path: Path, *, on_open: Callable[[int], dict[str, Any]],
                 on_frame: Callable[[int, dict[str, Any], Peer], object], on_closed: Callable[[int], object],
                 limits: Limits = Limits(), on_alarm: Callable[[], object] | None = None) -> None:
        self._path = path
        self._on_alarm = on_alarm
        self._alarm: float | None = None  # time.monotonic() when on_alarm is due; guarded by _posts_lock
        self._on_open = on_open
        self._on_frame = on_frame
        self._on_closed = on_closed
        self._limits = limits
        self._selector = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._posts: collections.deque[tuple[int, bytes, bool, bool]] = collections.deque()
        self._posts_lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._bound_inode: int | None = None
        self._next_id = 0

    # --- lifecycle (called from the owning actor's thread) -------------------------

    def start(self) -> None:
        prepare_socket_path(self._path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket file is created 0600
        try:
            listener.bind(str(self._path))
        finally:
            os.umask(old)
        os.chmod(self._path, 0o600)
        self._bound_inode = os.lstat(self._path).st_ino
        listener.listen(128)
        listener.setblocking(False)
        self._listener = listener
        self._wake_r.setblocking(False)
        self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name="piwf-gateway-io", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        for conn in list(self._conns.values()):
            self._close(conn, notify=False)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            try:  # unlink only the socket we bound, never a replacement
                if os.lstat(self._path).st_ino == self._bound_inode:
                    os.unlink(self._path)
            except FileNotFoundError:
                pass
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # --- posting (any thread) -------------------------------------------------------

    def post(self, conn_id: int, frame: dict[str, Any], *, is_response: bool = True, close_after: bool = False) -> None:
        """Queue `frame` for the connection. Responses release one in-flight slot."""
        try:
            data = encode_frame(frame, self._limits.max_frame_bytes)
        except EncodeError as exc:
            log.error("cannot encode a frame for connection %d: %s", conn_id, exc)
            if is_response:
                data = encode_frame({**{k: frame[k] for k in ("schema", "type", "request_id") if k in frame},
                                     "outcome": "rejected", "error": f"response could not be encoded: {exc}"})
            else:
                data = self._truncated(frame.get("subscription_id"), frame.get("topic"), frame.get("revision"),
                                       exc.one_line(300))
        self._queue(conn_id, data, is_response, close_after)

    def post_event(self, conn_id: int, head: bytes, revision: int, payload: bytes, *, subscription_id: str,
                   topic: str) -> None:
        """Queue an event whose payload is packed already (`envelope.event_head` and `event_body`)."""
        try:
            data = frame_of_body(event_body(head, revision, payload), self._limits.max_frame_bytes)
        except EncodeError as exc:
            data = self._truncated(subscription_id, topic, revision, exc.one_line(300))
        self._queue(conn_id, data, False, False)

    @staticmethod
    def _truncated(subscription_id: Any, topic: Any, revision: Any, reason: str) -> bytes:
        # The watcher is told, rather than left with a view it thinks is current.
        return encode_frame({"schema": SCHEMA, "type": "event", "subscription_id": subscription_id, "topic": topic,
                             "revision": revision,
                             "payload": {"truncated": True, "reason": f"the view could not be sent: {reason}"}})

    def _queue(self, conn_id: int, data: bytes, is_response: bool, close_after: bool) -> None:
        with self._posts_lock:
            first = not self._posts
            self._posts.append((conn_id, data, is_response, close_after))
        if first:
            # Only the first post of a batch wakes the loop; it drains them all.
            self._wake()

    def alarm_at(self, deadline: float) -> None:
        """Call `on_alarm` in the loop's thread at `deadline` (time.monotonic()); an earlier alarm already
        set stands. Any thread may call this."""
        with self._posts_lock:
            if self._alarm is not None and self._alarm <= deadline:
                return
            self._alarm = deadline
            # The select under way may wait past the new deadline; unless a queued post is about to
            # wake the loop anyway (it sets its next timeout only after applying the posts).
            wake = not self._posts
        if wake:
            self._wake()

    def _ring_alarm(self) -> float:
        """Call on_alarm if it is due; the longest the next select may wait."""
        with self._posts_lock:
            alarm = self._alarm
            due = alarm is not None and alarm <= time.monotonic()
            if due:
                self._alarm = None
        if due and self._on_alarm is not None:
            self._on_alarm()
            return _SELECT_S
        return _SELECT_S if alarm is None or due else max(0.0, min(_SELECT_S, alarm - time.monotonic()))

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass

    # --- the loop -------------------------------------------------------------------

    def _run(self) -> None:
        timeout = _SELECT_S
        while not self._stopping.is_set():
            try:
                events = self._selector.select(timeout=timeout)
            except OSError:
                if self._stopping.is_set():
                    return
                raise
            for key, mask in events:
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    self._drain_wake()
                else:
                    conn = key.data
                    if mask & selectors.EVENT_READ and not conn.closed:
                        self._read(conn)
                    if mask & selectors.EVENT_WRITE and not conn.closed:
                        self._flush(conn)
            self._apply_posts()
            self._check_deadlines()
            timeout = self._ring_alarm()

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                return
            try:
                peer = _peer(sock)
            except OSError:
                sock.close()
                continue
            if peer.uid != os.getuid():
                log.warning("refused a connection from uid %d (pid %d)", peer.uid, peer.pid)
                sock.close()
                continue
            sock.setblocking(False)
            self._next_id += 1
            conn = _Conn(self._next_id, sock, FrameDecoder(self._limits.max_frame_bytes), peer)
            self._conns[conn.conn_id] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)
            if len(self._conns) > self._limits.max_connections:
                conn.close_when_flushed = True  # set first: the flush below then closes it
                self._enqueue(conn, encode_frame({
                    "schema": "piwf.client.v1", "type": "response", "request_id": None, "outcome": "unavailable",
                    "error": f"too many connections; retry in {self._limits.retry_after_s:g} s"}), force=True)
                continue
            self._enqueue(conn, encode_frame(self._on_open(conn.conn_id)))

    def _drain_wake(self) -> None:
        # One read: wake-ups are single bytes, and any left over only make the next select return at once.
        try:
            self._wake_r.recv(4096)
        except (BlockingIOError, InterruptedError):
            pass

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        try:
            frames = conn.decoder.feed(data)
        except DecodeError as exc:
            log.info("connection %d sent a malformed frame (%s); closing it", conn.conn_id, exc.one_line(200))
            self._close(conn)
            return
        # The body deadline runs per frame: a frame that began in this read (after
        # completing others) starts its own clock.
        if not conn.decoder.mid_frame:
            conn.frame_started = None
        elif frames or conn.frame_started is None:
            conn.frame_started = time.monotonic()
        for frame in frames:
            if conn.inflight >= self._limits.max_inflight:
                request_id = frame.get("request_id") if isinstance(frame.get("request_id"), str) else None
                self._enqueue(conn, encode_frame({
                    "schema": "piwf.client.v1", "type": "response", "request_id": request_id,
                    "outcome": "unavailable",
                    "error": f"too many requests in flight; retry in {self._limits.retry_after_s:g} s"}))
                continue
            conn.inflight += 1
            self._on_frame(conn.conn_id, frame, conn.peer)

    def _apply_posts(self) -> None:
        while True:
            with self._posts_lock:
                if not self._posts:
                    return
                conn_id, data, is_response, close_after = self._posts.popleft()
            conn = self._conns.get(conn_id)
            if conn is None or conn.closed:
                continue
            if conn.overflowed_at is not None:
                continue  # being let go: nothing more is queued for it
            if is_response:
                conn.inflight = max(conn.inflight - 1, 0)
            elif conn.outbox_bytes + len(data) > self._limits.max_outbox_bytes:
                self._overflow(conn)
                continue
            self._enqueue(conn, data)
            if close_after:
                conn.close_when_flushed = True

    def _overflow(self, conn: _Conn) -> None:
        """A watcher that does not read: drop what it has not taken, tell it why, let it go.

        Queued frames not yet started are discarded (the client must watch
        again anyway); the overflow event is sent if the socket takes it, and
        the connection is closed after a short grace whether or not it did.
        """
        log.info("connection %d does not read its events; closing it", conn.conn_id)
        conn.overflowed_at = time.monotonic()
        while len(conn.outbox) > 1:
            conn.outbox_bytes -= len(conn.outbox.pop())
        self._enqueue(conn, encode_frame({"schema": "piwf.client.v1", "type": "event", "subscription_id": None,
                                          "topic": "overflow", "revision": 0,
                                          "payload": {"reason": "send queue full; reconnect and watch again"}}),
                      force=True)
        conn.close_when_flushed = True

    def _enqueue(self, conn: _Conn, data: bytes, force: bool = False) -> None:
        if conn.close_when_flushed and not force:
            return
        conn.outbox.append(data)
        conn.outbox_bytes += len(data)
        self._flush(conn)

    def _flush(self, conn: _Conn) -> None:
        while conn.outbox:
            chunk = conn.outbox[0]
            try:
                sent = conn.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                    log.debug("send to connection %d failed: %s", conn.conn_id, exc)
                self._close(conn)
                return
            conn.outbox_bytes -= sent
            if sent < len(chunk):
                conn.outbox[0] = chunk[sent:]
                break
            conn.outbox.popleft()
        if conn.closed:
            return
        if not conn.outbox and conn.close_when_flushed:
            self._close(conn)
            return
        writing = bool(conn.outbox)
        if writing != conn.writing:
            conn.writing = writing
            self._selector.modify(conn.sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0), conn)

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for conn in list(self._conns.values()):
            if conn.overflowed_at is not None and now - conn.overflowed_at > OVERFLOW_GRACE_S:
                self._close(conn)
                continue
            if conn.frame_started is not None and now - conn.frame_started > self._limits.frame_deadline_s:
                log.info("connection %d did not finish a frame within %.0f s; closing it", conn.conn_id,
                         self._limits.frame_deadline_s)
                self._close(conn)

    def _close(self, conn: _Conn, notify: bool = True) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.pop(conn.conn_id, None)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        conn.sock.close()
        if notify:
            self._on_closed(conn.conn_id)

    def connection_count(self) -> int:
        return len(self._conns)
