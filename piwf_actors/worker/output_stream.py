"""A running shell node's output on its way to the host while the node runs (what `piwf logs -f` follows)."""

from __future__ import annotations

import codecs
import time
from typing import Any


class OutputStreamer:
    """A running shell node's output, forwarded to the host while it runs (`piwf logs -f`).

    Bounded and rate-limited so a chatty command cannot flood the host: at most
    one `node_output` frame per stream every `interval_s` (or when `chunk`
    bytes are waiting), at most `budget` bytes per node in all (the node's full
    output is stored with its result anyway). Text is decoded incrementally, so
    a UTF-8 character split between two reads is not mangled.
    """

    def __init__(self, send: Any, node_id: str, attempt_id: str, *, interval_s: float = 0.1,
                 chunk: int = 16 * 1024, budget: int = 1024 * 1024) -> None:
        self._send = send
        self._node_id, self._attempt_id = node_id, attempt_id
        self._interval_s, self._chunk, self._budget = interval_s, chunk, budget
        self._pending: dict[str, bytearray] = {}
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        self._sent = 0
        self._last = 0.0
        self._cut = False

    def feed(self, stream: str, data: bytes) -> None:
        """Take `data` of `stream`; no data (the command is quiet) only sends what waits once the interval
        passed, so a line printed before a long silence is not held back until the command ends."""
        if self._cut:
            return
        if data:
            self._pending.setdefault(stream, bytearray()).extend(data)
        now = time.monotonic()
        if now - self._last >= self._interval_s or len(self._pending.get(stream, b"")) >= self._chunk:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        self._last = time.monotonic() if now is None else now
        for stream, data in self._pending.items():
            if not data or self._cut:
                continue
            room = self._budget - self._sent
            piece, self._pending[stream] = bytes(data[:room]), bytearray()
            self._sent += len(piece)
            text = self._decoders[stream].decode(piece)
            if len(piece) < len(data):
                self._cut = True
                text += "\n…[live output cut here; the full output is stored with the node's result]\n"
            self._send({"kind": "node_output", "node_id": self._node_id, "attempt_id": self._attempt_id,
                        "stream": stream, "data": text})
