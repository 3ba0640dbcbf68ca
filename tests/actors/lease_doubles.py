"""Test doubles for the lease actors (`HostLease`, `RunnerLease`): a hand-driven clock, an in-memory
writer that records what a lease submits and calls, and a probe supervisor."""

from __future__ import annotations

import queue
from typing import Any

import pykka

from piwf_actors.store.requests import WriteCommand


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeWriter:
    """Records what the lease submits and calls; `call` answers `call_result` (the release)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[WriteCommand, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.call_result: Any = True
        self.expires_at: float | None = None
        self.epoch: int | None = None

    def submit(self, command: WriteCommand, reply_to: Any = None) -> None:
        self.submitted.append((command, reply_to))

    def call(self, name: str, args: dict[str, Any], **_kwargs: Any) -> Any:
        self.calls.append((name, args))
        return self.call_result

    def lease_renewed(self, expires_at: float) -> None:
        self.expires_at = expires_at

    def advance_epoch(self, epoch: int) -> None:
        self.epoch = epoch


class Recorder(pykka.ThreadingActor):
    """A probe supervisor: puts every message it is told into a queue."""

    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self._inbox = inbox

    def on_receive(self, message: Any) -> None:
        self._inbox.put(message)
