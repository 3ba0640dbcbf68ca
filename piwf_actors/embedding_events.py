"""Events on the embedding handle: `event.emit` made as the socket makes it, and the event reads (a part
of `HostHandle`, embedding.py). Called from the application's threads."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from piwf_actors.store.event_queries import get_event, list_events, subscriptions
from piwf_actors.store.reader import StoreReader


def embedded_peer() -> dict[str, Any]:
    """Who answers through the embedding API: this process (recorded with the answer)."""
    return {"via": "embedded", "pid": os.getpid(), "uid": os.getuid()}


class EventControls:
    """Mixed into `HostHandle`, which provides `_write` and `_read` (declared here for the type checker
    only)."""

    _write: Callable[..., Any]
    _read: Callable[[Callable[[StoreReader], Any]], Any]

    def emit_event(self, name: str, data: Any = None, *, key: str | None = None, client_id: str | None = None,
                   idempotency_key: str | None = None) -> dict[str, Any]:
        """Emit event `name` with `data` (`event.emit`): recorded once per `key` when given (an emit again
        is the same event: `adopted_event`); with `client_id` and `idempotency_key` a resend is adopted.
        Workflows with `on_event(name)` start on it (the host's event keeper); waits that match it
        settle in the same transaction. Returns the receipt {event_id, name, key, seq, emitted_at,
        woke, adopted (a resend under the same idempotency key)}. Raises Rejected (a bad name, key, or data over 64 KiB of JSON)."""
        payload = {"name": name, "data": data, **({} if key is None else {"key": key})}
        answer = self._write("event.emit", payload, client_id=client_id, idempotency_key=idempotency_key,
                             peer=embedded_peer())
        return {**answer["receipt"], "adopted": answer["outcome"] == "adopted"}

    def list_events(self, name: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The newest `limit` events (of `name`), newest first, with how many runs each started and woke."""
        return self._read(lambda r: list_events(r, name, limit))

    def get_event(self, event_id: str) -> dict[str, Any] | None:
        """One event with what it started (per subscriber) and the waits it settled; None if no such event."""
        return self._read(lambda r: get_event(r, event_id))

    def list_event_subscriptions(self) -> list[dict[str, Any]]:
        """The workflows the host's event keeper starts on events, as it recorded them ({name, event_name,
        cursor_seq, summary})."""
        return self._read(subscriptions)

