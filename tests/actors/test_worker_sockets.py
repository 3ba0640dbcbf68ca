"""WorkerSockets: frames read from real sockets, and sends from any thread that never block.

The writer's thread sends a worker its answers through `send`; a worker slow to read
must not stall the writer, and what does not fit the socket's buffer must still go out
in order, after everything sent before it.
"""

from __future__ import annotations

import socket
import threading

from piwf_actors.actors.worker_sockets import WorkerSockets
from piwf_actors.wire.frames import FrameDecoder, encode_frame


def _pair(send_buffer: int | None = None) -> tuple[socket.socket, socket.socket]:
    host_end, worker_end = socket.socketpair()
    if send_buffer is not None:
        host_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    return host_end, worker_end


def _read_frames(sock: socket.socket, count: int, timeout: float = 10.0) -> list[dict]:
    decoder = FrameDecoder()
    frames: list[dict] = []
    sock.settimeout(timeout)
    while len(frames) < count:
        data = sock.recv(65536)
        assert data, "the host end closed"
        frames += decoder.feed(data)
    return frames


def test_frames_from_a_worker_reach_the_callback_in_order() -> None:
    sockets = WorkerSockets().start()
    host_end, worker_end = _pair()
    got: list[dict] = []
    done = threading.Event()

    def on_frames(frames: list[dict]) -> None:
        got.extend(frames)
        if len(got) >= 50:
            done.set()

    try:
        sockets.add(host_end, on_frames, lambda detail: None)
        worker_end.sendall(b"".join(encode_frame({"kind": "request", "n": n}) for n in range(50)))
        assert done.wait(10)
        assert [frame["n"] for frame in got] == list(range(50))
    finally:
        sockets.close()
        host_end.close()
        worker_end.close()


def test_a_send_larger_than_the_buffer_returns_at_once_and_arrives_whole_and_in_order() -> None:
    sockets = WorkerSockets().start()
    host_end, worker_end = _pair(send_buffer=4096)
    try:
        sockets.add(host_end, lambda frames: None, lambda detail: None)
        big = {"kind": "response", "n": 0, "blob": b"x" * 2_000_000}
        sent: list[bool] = []
        all_sent = threading.Event()

        def sender() -> None:
            sent.append(sockets.send(host_end, encode_frame(big)))
            # Nobody reads yet: the rest waits in the socket's own buffer, and later sends queue behind it.
            sent.extend(sockets.send(host_end, encode_frame({"kind": "response", "n": n})) for n in range(1, 20))
            all_sent.set()

        threading.Thread(target=sender, daemon=True).start()
        # The worker reads nothing until every send returned: a send that waited for it would wait forever.
        assert all_sent.wait(30), "a send blocked on a worker that does not read"
        assert sent == [True] * 20
        frames = _read_frames(worker_end, 20)
        assert [frame["n"] for frame in frames] == list(range(20))
        assert frames[0]["blob"] == big["blob"]
    finally:
        sockets.close()
        host_end.close()
        worker_end.close()


def test_sends_from_several_threads_keep_each_senders_order() -> None:
    sockets = WorkerSockets().start()
    host_end, worker_end = _pair(send_buffer=4096)
    try:
        sockets.add(host_end, lambda frames: None, lambda detail: None)

        def sender(name: str) -> None:
            for n in range(200):
                sockets.send(host_end, encode_frame({"kind": "response", "by": name, "n": n, "pad": "p" * 300}))

        threads = [threading.Thread(target=sender, args=(name,)) for name in ("a", "b", "c")]
        for thread in threads:
            thread.start()
        frames = _read_frames(worker_end, 600)
        for thread in threads:
            thread.join()
        for name in ("a", "b", "c"):
            assert [frame["n"] for frame in frames if frame["by"] == name] == list(range(200))
    finally:
        sockets.close()
        host_end.close()
        worker_end.close()


def test_nothing_is_sent_to_a_socket_after_it_was_removed() -> None:
    sockets = WorkerSockets().start()
    host_end, worker_end = _pair(send_buffer=4096)
    try:
        sockets.add(host_end, lambda frames: None, lambda detail: None)
        assert sockets.send(host_end, encode_frame({"kind": "response", "n": 0}))
        sockets.remove(host_end)
        assert not sockets.send(host_end, encode_frame({"kind": "response", "n": 1}))
        assert [frame["n"] for frame in _read_frames(worker_end, 1)] == [0]
        worker_end.setblocking(False)
        try:
            leftover = worker_end.recv(65536)
        except BlockingIOError:
            leftover = b""
        assert leftover == b""
    finally:
        sockets.close()
        host_end.close()
        worker_end.close()


def _loop_turned(sockets: WorkerSockets) -> None:
    """Return once the sockets' thread has gone through a whole turn of its loop from now on: it
    reports a socket added now going away, and one added after that report (which a turn already
    under way cannot hold)."""
    for _ in range(2):
        host_end, worker_end = _pair()
        reported = threading.Event()
        sockets.add(host_end, lambda frames: None, lambda detail, reported=reported: reported.set())
        worker_end.close()
        try:
            assert reported.wait(10), "the sockets' thread does not turn"
        finally:
            sockets.remove(host_end)
            host_end.close()


def test_a_worker_that_goes_away_is_reported_once() -> None:
    sockets = WorkerSockets().start()
    host_end, worker_end = _pair()
    gone: list[str] = []
    reported = threading.Event()

    def on_gone(detail: str) -> None:
        gone.append(detail)
        reported.set()

    try:
        sockets.add(host_end, lambda frames: None, on_gone)
        worker_end.close()
        assert reported.wait(10)
        _loop_turned(sockets)  # a second report would come in the next turns of the loop
        assert gone == ["worker closed its connection"]
    finally:
        sockets.close()
        host_end.close()
