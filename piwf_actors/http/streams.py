"""Server-Sent Events: a gateway watch (`watch` operation, protocol/watches.py) as a `text/event-stream`.

The stream opens a connection id of its own in the door's `Exchange` and
subscribes with the same `watch` request a socket client sends; the
gateway's first answer decides the response (a refused watch is answered
with its status, like any request), then every event of the watch becomes
one SSE event: `event:` the topic, `id:` the watch's revision, `data:` the
view as JSON. The gateway packs each view once for all its watchers; the
stream unpacks it here, on the door's event-loop thread. A stream that
falls `stream_backlog` events behind is closed (like the socket's overflow:
the client reconnects and gets the current view first). A comment line
every `heartbeat_s` keeps proxies from closing a quiet stream and tells
the door when a client went away: one timer of the door's (`Heartbeat`)
wakes every open stream at once, so that an idle stream costs the host no
wake-up of its own (a timer per stream, 50 streams: 50 wake-ups of the
event loop per interval, each with a task of `wait_for`'s). A run's stream
ends after the event that shows the run finished. When the stream ends,
the gateway drops the watch (`DoorPort.drop`).
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from starlette.responses import Response, StreamingResponse

from piwf_actors.http.answers import Answer, error
from piwf_actors.http.routes import STATUS_OF_OUTCOME
from piwf_actors.protocol.doors import DoorPeer
from piwf_actors.statuses import TERMINAL_STATUSES
from piwf_actors.wire import unpack


class StreamDoor(Protocol):
    """What a stream uses of the app's `Door`: its port, its limits, its count of open streams, its heartbeat."""

    port: Any
    limits: Any
    streams: int
    heartbeat: Heartbeat


class Beating(Protocol):
    def beat(self) -> None:
        """Wake up to send a keep-alive comment (on the event-loop thread)."""


class Heartbeat:
    """One timer for every open stream of a door: every `interval_s` it calls each stream's `beat` (which
    wakes the stream to send a comment line). The timer runs only while a stream is open. Event-loop
    thread only (the loop is the one running when the first stream joins)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._streams: set[Beating] = set()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._streams)

    @property
    def ticking(self) -> bool:
        return self._timer is not None

    def join(self, stream: Beating) -> None:
        self._streams.add(stream)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._beat)

    def leave(self, stream: Beating) -> None:
        self._streams.discard(stream)
        if not self._streams and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _beat(self) -> None:
        for stream in list(self._streams):
            stream.beat()
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self._beat) if self._streams else None


class _Wake:
    """A stream's wake-up: set by the gateway's callbacks (through the loop) and by the heartbeat."""

    __slots__ = ("ready", "beat_due")

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.beat_due = False

    def beat(self) -> None:
        self.beat_due = True
        self.ready.set()


def _sse(topic: str, revision: int, data: Any) -> bytes:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"event: {topic}\nid: {revision}\ndata: {text}\n\n".encode()


async def event_stream(door: StreamDoor, frame: dict[str, Any], peer: DoorPeer) -> Response:
    """Subscribe with `frame` (a watch request) and answer with the stream, or with the refusal."""
    limits = door.limits
    if door.streams >= limits.max_streams:
        return error(503, f"at most {limits.max_streams} event streams at once")
    loop = asyncio.get_running_loop()
    #: (topic or "answer", the view, revision, whether the view is still packed), in arrival order.
    items: collections.deque[tuple[str, Any, int, bool]] = collections.deque()
    wake_up = _Wake()
    ready = wake_up.ready
    overflowed = False

    def wake() -> None:
        try:
            loop.call_soon_threadsafe(ready.set)
        except RuntimeError:
            pass  # the loop has closed: the door is stopping

    def on_answer(response: dict[str, Any]) -> None:  # on a gateway thread
        if response.get("type") == "event":  # a frame of the watch's own (a run's live node output)
            items.append((str(response.get("topic")), response.get("payload"), int(response.get("revision") or 0),
                          False))
        else:
            items.append(("answer", response, 0, False))
        wake()

    def on_event(topic: str, revision: int, payload: bytes) -> None:  # on a gateway thread
        nonlocal overflowed
        if len(items) >= limits.stream_backlog:
            overflowed = True
        else:
            items.append((topic, payload, revision, True))
        wake()

    conn_id = door.port.exchange.open(on_answer, on_event)
    door.streams += 1
    handed_over = False
    try:
        if not door.port.send(conn_id, frame, peer):
            return error(503, "the host is stopping")
        try:
            await asyncio.wait_for(ready.wait(), limits.answer_timeout_s)
        except TimeoutError:
            return error(503, f"no answer from the host within {limits.answer_timeout_s:g} s")
        kind, first, _, _ = items.popleft()
        if kind != "answer" or first.get("outcome") != "accepted":
            outcome = first.get("outcome", "rejected") if kind == "answer" else "rejected"
            body = {key: first[key] for key in ("outcome", "error") if key in first}
            return Answer(body, STATUS_OF_OUTCOME.get(outcome, 500))
        handed_over = True
    finally:
        if not handed_over:
            door.streams -= 1
            door.port.exchange.close(conn_id)
            door.port.drop(conn_id)

    async def events() -> AsyncIterator[bytes]:
        door.heartbeat.join(wake_up)
        try:
            yield b": subscribed\n\n"
            while True:
                if not items and not wake_up.beat_due:
                    ready.clear()
                    if not items:
                        await ready.wait()  # the gateway's callbacks or the door's heartbeat set it
                if wake_up.beat_due:
                    wake_up.beat_due = False
                    if not items:
                        yield b": keep-alive\n\n"
                        continue
                while items:
                    topic, payload, revision, packed = items.popleft()
                    if topic == "answer":
                        continue
                    view = unpack(payload) if packed else payload
                    yield _sse(topic, revision, view)
                    if topic == "run" and isinstance(view, dict) and view.get("status") in TERMINAL_STATUSES:
                        return  # a finished run's stream has said everything
                if overflowed:
                    yield b"event: overflow\ndata: {}\n\n"
                    return
        finally:
            door.heartbeat.leave(wake_up)
            door.streams -= 1
            door.port.exchange.close(conn_id)
            door.port.drop(conn_id)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
