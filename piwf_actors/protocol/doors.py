"""Where the gateway's answers and watch events go: the socket, or another door that opened the request.

The gateway dispatches every door's requests through the one table of
operations (`protocol.catalog`); a request is known by its connection id,
and so is every answer and event it brings. The Unix socket's connections
are numbered by `SocketLoop` from 1 up; another door (the HTTP door,
actors/http_door.py) numbers its requests and streams from a base of its own
(`HTTP_FIRST_ID`), far above any socket connection, and attaches a `DoorSink`
that takes what the gateway posts for them. `DoorPosts` routes by the id, so
the operations, the pending writes and the live views need not know which
door a request came through.

Thread-safety: `post` and `post_event` are called from the gateway's thread,
its maintenance executor and the user-code threads (posting is thread-safe
for the socket loop; a sink must be too). `attach` runs in the gateway's thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from piwf_actors.protocol.socket_loop import SocketLoop

#: The first connection id of the HTTP door: socket connections never reach it (they count from 1).
HTTP_FIRST_ID = 1 << 48


class DoorSink(Protocol):
    """A door's side of `DoorPosts`: safe to call from any thread, and quick (it hands over, never blocks)."""

    def answer(self, conn_id: int, frame: dict[str, Any]) -> None:
        """The response to the request opened as `conn_id` (or a later frame of its stream)."""

    def event(self, conn_id: int, topic: str, revision: int, payload: bytes) -> None:
        """A watch event of the stream opened as `conn_id`: the view, packed (msgpack)."""

    def tokens_changed(self) -> None:
        """A token was added or revoked (committed): called before that request is answered."""


@dataclass(frozen=True, slots=True)
class DoorPeer:
    """Who sent a request through a door other than the socket, as that door authenticated it: recorded
    with the answers, submissions, messages and resolutions it makes (docs/security.md)."""

    via: str
    token: str
    remote: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"via": self.via, "token": self.token, "remote": self.remote}


class DoorPosts:
    """The gateway's outlet: the socket loop for socket connections, a door's sink for the ids it opened."""

    def __init__(self, socket: SocketLoop) -> None:
        self._socket = socket
        #: (first id, sink), replaced whole by `attach` (readers on other threads see one or the other).
        self._doors: tuple[tuple[int, DoorSink], ...] = ()

    def attach(self, first_id: int, sink: DoorSink) -> None:
        """Route the connection ids from `first_id` up (below the next door's) to `sink`."""
        self._doors = tuple(sorted((*self._doors, (first_id, sink)), key=lambda door: door[0]))

    def _sink(self, conn_id: int) -> DoorSink | None:
        found = None
        for first_id, sink in self._doors:
            if conn_id >= first_id:
                found = sink
        return found

    def post(self, conn_id: int, frame: dict[str, Any], *, is_response: bool = True) -> None:
        sink = self._sink(conn_id) if conn_id >= HTTP_FIRST_ID else None
        if sink is not None:
            sink.answer(conn_id, frame)
        elif conn_id < HTTP_FIRST_ID:
            self._socket.post(conn_id, frame, is_response=is_response)

    def post_event(self, conn_id: int, head: bytes, revision: int, payload: bytes, *, subscription_id: str,
                   topic: str) -> None:
        sink = self._sink(conn_id) if conn_id >= HTTP_FIRST_ID else None
        if sink is not None:
            sink.event(conn_id, topic, revision, payload)
        elif conn_id < HTTP_FIRST_ID:
            self._socket.post_event(conn_id, head, revision, payload, subscription_id=subscription_id, topic=topic)

    def tokens_changed(self) -> None:
        """Tell every door that the HTTP tokens changed (a door that caches them reads them again)."""
        for _first_id, sink in self._doors:
            sink.tokens_changed()

    def alarm_at(self, deadline: float) -> None:
        """The gateway's one timed wake-up stays with the socket loop's thread."""
        self._socket.alarm_at(deadline)
