"""Watch subscriptions: which view each one follows, and when to send an event.

Owned by the ClientGateway (used only from its thread). A writer change
notice marks the subscriptions whose view it may affect; the gateway then
re-renders those views once and an event goes out only when a view's digest
changed, with a revision that counts the events of that subscription.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from piwf_actors.actors.board import HostBoard
from piwf_actors.canonical import fingerprint
from piwf_actors.protocol import views
from piwf_actors.protocol.envelope import event
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice

TOPICS = ("runs", "run", "host", "interactions")
MAX_PER_CONNECTION = 32

#: Tables whose change may alter each topic's view.
_TABLES = {
    "runs": {"run"},
    "host": {"run", "host_state", "run_worker"},
    "interactions": {"interactive_request", "session_message", "interactive_submission"},
}


class WatchRefused(ValueError):
    """A watch request that cannot be served (the message is the one-line reason)."""


@dataclass
class Watch:
    conn_id: int
    subscription_id: str
    topic: str
    run_id: str | None
    session_id: str | None
    revision: int = 0
    digest: str = ""
    dirty: bool = False


class WatchSet:
    def __init__(self) -> None:
        self._watches: dict[tuple[int, str], Watch] = {}

    def __len__(self) -> int:
        return len(self._watches)

    def add(self, conn_id: int, subscription_id: str, topic: str, run_id: str | None,
            session_id: str | None) -> Watch:
        if topic not in TOPICS:
            raise WatchRefused(f"watch: topic must be one of {', '.join(TOPICS)}")
        if topic == "run" and not run_id:
            raise WatchRefused("watch: topic run needs run_id")
        key = (conn_id, subscription_id)
        if key in self._watches:
            raise WatchRefused(f"watch: subscription {subscription_id} already exists")
        if sum(1 for c, _ in self._watches if c == conn_id) >= MAX_PER_CONNECTION:
            raise WatchRefused(f"at most {MAX_PER_CONNECTION} watches per connection")
        watch = Watch(conn_id, subscription_id, topic, run_id, session_id)
        self._watches[key] = watch
        return watch

    def remove(self, conn_id: int, subscription_id: str) -> bool:
        return self._watches.pop((conn_id, subscription_id), None) is not None

    def drop_connection(self, conn_id: int) -> None:
        for key in [k for k in self._watches if k[0] == conn_id]:
            del self._watches[key]

    def mark(self, notice: ChangeNotice) -> bool:
        """Mark the watches `notice` may affect; True if any watch is now waiting for a refresh."""
        tables = set(notice.tables)
        for watch in self._watches.values():
            if watch.topic == "run":
                hit = watch.run_id in notice.runs
            else:
                hit = bool(tables & _TABLES[watch.topic])
            watch.dirty = watch.dirty or hit
        return any(w.dirty for w in self._watches.values())

    def following(self, run_id: str) -> list[Watch]:
        """The `run` watches of `run_id` (they also get the run's live `node_output` events)."""
        return [w for w in self._watches.values() if w.topic == "run" and w.run_id == run_id]

    def take_dirty(self) -> list[Watch]:
        dirty = [w for w in self._watches.values() if w.dirty]
        for watch in dirty:
            watch.dirty = False
        return dirty

    @staticmethod
    def evaluate(watch: Watch, reader: StoreReader, board: HostBoard) -> dict[str, Any] | None:
        """The event to send for `watch`, or None when its view did not change."""
        if watch.topic == "run":
            view: Any = views.run_view(reader, watch.run_id or "")
        elif watch.topic == "runs":
            view = views.runs_view(reader)
        elif watch.topic == "host":
            view = views.host_view(reader, board, include_rates=False)
        else:
            view = views.interactions_view(reader, watch.session_id)
        digest = fingerprint(view)
        if digest == watch.digest:
            return None
        watch.digest = digest
        watch.revision += 1
        return event(watch.subscription_id, watch.topic, watch.revision, view)
