"""Watch subscriptions: which view each one follows, and when to send an event.

Owned by the ClientGateway (used only from its thread). A writer change
notice marks the subscriptions whose view it may affect; at the next flush
each marked view is built once, packed once and shared by every watch of it
(`Renderer`), and an event goes out only to a watch whose last payload was
different, with a revision that counts the events of that subscription.

The list views (`runs`, `host`, `interactions`) change with nearly every
commit of every run, so a burst of changes is coalesced in time too: a
subscription gets at most one event per LIST_INTERVAL_S. The first change
after a quiet interval goes out at once; later ones wait for the interval's
end, and the latest view then always follows. A `run` watch follows one run
and gets every change at once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.board import HostBoard
from piwf_actors.protocol import views
from piwf_actors.protocol.envelope import event_head
from piwf_actors.protocol.run_window import RunWindow
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice
from piwf_actors.wire import pack

TOPICS = ("runs", "run", "host", "interactions")
MAX_PER_CONNECTION = 32
#: The least time between two events of one `runs`, `host` or `interactions` subscription. One event
#: costs the host about as much CPU as a run's commit (build, pack, send): sending one per commit would
#: double what a busy host spends; 20 ms is far below what a person watching a list notices.
LIST_INTERVAL_S = 0.02

#: Tables whose change may alter the `host` and `interactions` views. A `run` watch follows the
#: notices that name its run, a `runs` watch those that name any run (see RunWindow).
_TABLES = {
    "host": {"run", "host_state", "run_worker"},
    "interactions": {"interactive_request", "session_message", "interactive_submission"},
}

#: Payloads up to this size are kept for comparison; larger ones only by digest.
_KEEP_BYTES = 16 * 1024

#: `send(watch, payload)`: post one event of `watch` carrying the packed `payload`.
Send = Callable[["Watch", bytes], None]


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
    sent: bytes = b""  # the last payload sent, or its digest when it is large
    dirty: bool = False
    due_at: float = 0.0  # time.monotonic() before which no event of a list view is sent
    head: bytes = b""  # the packed start of this subscription's events (envelope.event_head)

    def __post_init__(self) -> None:
        self.head = event_head(self.subscription_id, self.topic)

    def changed_to(self, payload: bytes, now: float) -> bool:
        """Whether `payload` differs from the last one sent; if so it becomes the last one (revision + 1)."""
        # A small payload is kept as it is (comparing is cheaper than hashing); a large one by digest.
        kept = payload if len(payload) <= _KEEP_BYTES else hashlib.blake2b(payload, digest_size=16).digest()
        if kept == self.sent:
            return False
        self.sent = kept
        self.revision += 1
        if self.topic != "run":
            self.due_at = now + LIST_INTERVAL_S
        return True


class Renderer:
    """The views of one flush, each built and packed at most once, whatever number of watches share it.

    `window` supplies the `runs` view and the run counts of the `host` view; it is synced by the
    caller before the flush. `timer_now` is what a `run` view's `remaining_s` count to (timer time).
    """

    def __init__(self, reader: StoreReader, board: HostBoard, window: Callable[[], RunWindow],
                 timer_now: Callable[[], float] = time.time) -> None:
        self._reader = reader
        self._board = board
        self._window = window
        self._timer_now = timer_now
        self._built: dict[tuple[str, str | None], bytes] = {}

    def payload(self, watch: Watch) -> bytes:
        key = (watch.topic, watch.run_id if watch.topic == "run" else watch.session_id)
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._build(watch)
        return built

    def _build(self, watch: Watch) -> bytes:
        if watch.topic == "runs":
            return self._window().runs_payload()
        view: Any
        if watch.topic == "run":
            view = views.run_view(self._reader, watch.run_id or "", self._timer_now())
        elif watch.topic == "host":
            view = views.host_view(self._reader, self._board, include_rates=False, counts=self._window().counts())
        else:
            view = views.interactions_view(self._reader, watch.session_id)
        return pack(view)


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

    def need_run_window(self) -> bool:
        """Whether a watch shows what the run window keeps (the `runs` view, the `host` view's counts)."""
        return any(w.topic in ("runs", "host") for w in self._watches.values())

    def mark(self, notice: ChangeNotice) -> float | None:
        """Mark the watches `notice` may affect; the earliest time a marked watch may send (None: none is
        marked)."""
        tables = set(notice.tables)
        earliest: float | None = None
        for watch in self._watches.values():
            if watch.topic == "run":
                hit = watch.run_id in notice.runs
            elif watch.topic == "runs":
                hit = bool(notice.runs) or "run" in tables
            else:
                hit = bool(tables & _TABLES[watch.topic])
            watch.dirty = watch.dirty or hit
            if watch.dirty and (earliest is None or watch.due_at < earliest):
                earliest = watch.due_at
        return earliest

    def mark_all(self) -> float | None:
        """Mark every watch (the database changed in ways no notice told); as `mark`."""
        earliest: float | None = None
        for watch in self._watches.values():
            watch.dirty = True
            if earliest is None or watch.due_at < earliest:
                earliest = watch.due_at
        return earliest

    def following(self, run_id: str) -> list[Watch]:
        """The `run` watches of `run_id` (they also get the run's live `node_output` events)."""
        return [w for w in self._watches.values() if w.topic == "run" and w.run_id == run_id]

    def take_due(self, now: float) -> tuple[list[Watch], float | None]:
        """The marked watches that may send now (unmarked), and when the next marked one may (or None)."""
        due: list[Watch] = []
        next_due: float | None = None
        for watch in self._watches.values():
            if not watch.dirty:
                continue
            if watch.due_at <= now:
                watch.dirty = False
                due.append(watch)
            elif next_due is None or watch.due_at < next_due:
                next_due = watch.due_at
        return due, next_due

    @staticmethod
    def refresh(watches: list[Watch], renderer: Renderer, send: Send, now: float) -> None:
        """Send each of `watches` its view if it changed since its last event."""
        for watch in watches:
            payload = renderer.payload(watch)
            if watch.changed_to(payload, now):
                send(watch, payload)
