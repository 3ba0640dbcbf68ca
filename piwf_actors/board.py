"""Live figures the actors publish for status views (host.status, piwf-top).

A leaf at the bottom of the house (plain data behind a lock, not an actor):
the actors write it, and `protocol/`, `metrics.py` and the embedding read it
without importing `actors/`. Section and stream names are the constants
below, so a reader finds every writer and reader of one with a search.

Each actor writes its own section after it changes; readers (the gateway,
the embedding API) take a snapshot without asking the actor, so a status
request never blocks on a busy writer or scheduler and no actor waits on
another. Values are replaced whole (never mutated in place).

It also carries a few live streams that are not state (a running shell
node's output): `emit` hands a payload to every listener `listen`ed for that
stream, in the emitting thread; a listener must only hand it on (tell an
actor), never block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Section:
    """The board's sections, each written by one part of the host (its owner in the comment)."""

    WRITER = "writer"  # DatabaseWriter: queue depth, commit rates, disk_full
    LEASE = "lease"  # HostLease: epoch, renewals, suspended
    RUNNER_LEASE = "runner_lease"  # RunnerLease (a runner host's own lease)
    RUNNERS = "runners"  # RunnerWatch: the runner hosts that share the queue ({live, runners})
    ROLE = "role"  # the host wiring: active | standby | runner, and the host id
    STANDBY = "standby"  # StandbyWatch: the lease a standby watches
    SCHEDULER = "scheduler"  # Scheduler: slots, claims, queue
    CHANNELS = "channels"  # ChannelManager: profiles and their health
    SCHEDULES = "schedules"  # ScheduleKeeper: loaded definitions, failures, clashes
    METRICS = "metrics"  # HostMetrics: the exporter's address


class Stream:
    """The board's live streams (`emit` / `listen`), which carry events, not state."""

    NODE_OUTPUT = "node_output"  # a running shell node's output lines (RunnerSupervisor → gateway)


class HostBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sections: dict[str, dict[str, Any]] = {}
        self._listeners: dict[str, list[Callable[[dict[str, Any]], None]]] = {}

    def publish(self, section: str, values: dict[str, Any]) -> None:
        with self._lock:
            self._sections[section] = values

    def snapshot(self, section: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._sections.get(section, {}))

    def listen(self, stream: str, listener: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            self._listeners.setdefault(stream, []).append(listener)

    def unlisten(self, stream: str, listener: Callable[[dict[str, Any]], None]) -> None:
        with self._lock:
            if listener in self._listeners.get(stream, []):
                self._listeners[stream].remove(listener)

    def emit(self, stream: str, payload: dict[str, Any]) -> None:
        with self._lock:
            listeners = list(self._listeners.get(stream, ()))
        for listener in listeners:
            listener(payload)
