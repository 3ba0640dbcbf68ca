"""`LiveViews`: what the client gateway keeps up to date from the writer's change notices.

It owns the watch subscriptions (`WatchSet`) and the run window
(`RunWindow`): it takes each notice in, decides which watches may send and
when (`watches.LIST_INTERVAL_S`), builds each view once per flush, posts the
events to the socket loop, and answers `run.list` from the window when the
window holds the answer. Used from the gateway's thread only; the gateway
keeps what belongs to an actor: its mailbox (when to flush) and its replies.

The window costs nothing while nobody looks: it exists only while a `runs`
or `host` watch needs it or `run.list` used it in the last WINDOW_IDLE_S,
and until something reads it, a notice only adds the run ids it names to a
set.

Notices are complete only from the moment the writer registered the
gateway (`registered`): the writer gets to the gateway's `Subscribe` after
the batches ahead of it, which take every command queued by then, also a
client's write sent after the gateway started answering. Until then the
views trust no notice: run.list and a watch's first event read the
database, and at registration every view is read again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from piwf_actors.board import HostBoard
from piwf_actors.protocol.doors import DoorPosts
from piwf_actors.protocol.envelope import event
from piwf_actors.protocol.output_tail import KEYS as OUTPUT_KEYS
from piwf_actors.protocol.output_tail import OutputTail
from piwf_actors.protocol.run_window import RunWindow
from piwf_actors.protocol.watches import Renderer, Watch, WatchSet
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice

#: The run window is dropped when no watch needs it and no run.list used it for this long.
WINDOW_IDLE_S = 60.0


class LiveViews:
    def __init__(self, reader: StoreReader, board: HostBoard, loop: DoorPosts, *,
                 timer_now: Callable[[], float] = time.time) -> None:
        """`loop`: where events go (the socket's connections and the other doors' streams, by connection
        id); `timer_now`: the host's timer time (piwf_actors/clock.py), what a `run` view's clocks count to."""
        self.watches = WatchSet()
        self._timer_now = timer_now
        self.output_tail = OutputTail()  # what running shell nodes printed so far (piwf logs -f)
        self._reader = reader
        self._board = board
        self._loop = loop
        self._window: RunWindow | None = None
        self._window_used_at = 0.0
        #: The commit sequence of the latest write the gateway answered: a window that has not noted it
        #: yet may not answer run.list or a watch's first event (the client has seen that write).
        self._answered_seq = 0
        #: Another host writes the database (this one is a standby): no change notice tells what changed,
        #: so run.list reads the database and `poll_database` has every watch look again.
        self.external_writes = False
        #: The writer said it registered the gateway: every commit since sends it a notice (`registered`).
        self._registered = False

    @property
    def _notices_tell_all(self) -> bool:
        """Whether the change notices taken in name every change since the window's last read."""
        return self._registered and not self.external_writes

    def registered(self) -> float | None:
        """The writer registered the gateway for change notices (`writer.Subscribed`). A commit before
        may have sent none here, so every view is read again as by `poll_database` (whose answer this
        is); from now on the notices are trusted."""
        self._registered = True
        return self.poll_database()

    def answered(self, commit_seq: int) -> None:
        """The gateway answered a write committed under `commit_seq`."""
        self._answered_seq = max(self._answered_seq, commit_seq)

    # --- change notices ----------------------------------------------------------------------

    def take_in(self, notice: ChangeNotice, now: float) -> float | None:
        """Note `notice`; the earliest time (time.monotonic()) a watch it marked may send, None if it
        marked none. A watch that must wait for its interval gets the loop's alarm."""
        if self._window is not None:
            if now - self._window_used_at < WINDOW_IDLE_S or self.watches.need_run_window():
                self._window.note(notice)
            else:
                self._window = None  # nobody looks: keep nothing up to date
        earliest = self.watches.mark(notice)
        if earliest is not None and earliest > now:
            self._loop.alarm_at(earliest)
        return earliest

    def poll_database(self) -> float | None:
        """Another host may have changed anything: read the run window afresh and mark every watch (each
        sends only if its view changed). Returns when the first marked watch may send, like take_in."""
        if self._window is not None:
            self._window.invalidate()
        earliest = self.watches.mark_all()
        if earliest is not None and earliest > time.monotonic():
            self._loop.alarm_at(earliest)
        return earliest

    def flush(self) -> None:
        """Send the marked watches that may send now their views; set the alarm for the others."""
        now = time.monotonic()
        due, next_due = self.watches.take_due(now)
        self.refresh(due, now)
        if next_due is not None:
            self._loop.alarm_at(next_due)

    def refresh(self, watches: list[Watch], now: float, *, fresh: bool = False) -> None:
        """Send each of `watches` its view if it changed. `fresh` (a watch's first event): show every
        write answered so far, even one whose notice is still on its way."""
        if watches:
            WatchSet.refresh(watches, self._renderer(fresh), self._send, now)

    def first_view(self, watch: Watch) -> bytes:
        """`watch`'s view as its first event shows it, packed (`pack(None)` for a run that does not exist):
        the `watch` operation reads it before it answers, and sends it with `send_first` after."""
        return self._renderer(True).payload(watch)

    def send_first(self, watch: Watch, payload: bytes, now: float) -> None:
        """Send `payload` (from `first_view`) as `watch`'s first event."""
        if watch.changed_to(payload, now):
            self._send(watch, payload)

    def _renderer(self, fresh: bool) -> Renderer:
        window: RunWindow | None = None

        def synced_window() -> RunWindow:
            nonlocal window
            if window is None:
                window = self._run_window(fresh=fresh)
                window.sync(self._reader)
            return window

        return Renderer(self._reader, self._board, synced_window, self._timer_now)

    def _send(self, watch: Watch, payload: bytes) -> None:
        self._loop.post_event(watch.conn_id, watch.head, watch.revision, payload,
                              subscription_id=watch.subscription_id, topic=watch.topic)

    def node_output(self, payload: dict[str, Any]) -> None:
        """Live output of a shell node, to the `run` watches of its run (they share the revision counter),
        and kept in the run's output tail for the watches that come later (`replay_output`)."""
        self.output_tail.add(payload)
        for watch in self.watches.following(str(payload.get("run_id"))):
            self._post_output(watch, payload)

    def replay_output(self, watch: Watch) -> None:
        """Send a new `run` watch what its run's running node printed so far (`watch` with
        `output_so_far`), before anything printed later: both go out from this thread, in order."""
        for chunk in self.output_tail.so_far(str(watch.run_id)):
            self._post_output(watch, chunk)

    def _post_output(self, watch: Watch, payload: dict[str, Any]) -> None:
        watch.revision += 1
        self._loop.post(watch.conn_id, event(watch.subscription_id, "node_output", watch.revision,
                                             {key: payload.get(key) for key in OUTPUT_KEYS}),
                        is_response=False)

    # --- run.list ------------------------------------------------------------------------------

    def run_list(self, status: str | None, limit: int, workflow: str | None,
                 since: float | None) -> list[dict[str, Any]]:
        """From the run window when it has noted every write the gateway answered and holds the answer
        (the newest runs, or all of them); otherwise from the database."""
        if not self._notices_tell_all:
            return queries.run_list(self._reader, status, limit, workflow=workflow, since=since)
        window = self._run_window(fresh=False)
        if window.seq >= self._answered_seq:
            window.sync(self._reader)
            runs = window.list_runs(status, limit, workflow, since)
            if runs is not None:
                return runs
        return queries.run_list(self._reader, status, limit, workflow=workflow, since=since)

    def _run_window(self, *, fresh: bool) -> RunWindow:
        window = self._window
        if window is None:
            window = self._window = RunWindow()
            window.seq = self._answered_seq  # its first sync reads everything committed by now
        elif fresh and (not self._notices_tell_all or window.seq < self._answered_seq):
            window.invalidate()
            window.seq = self._answered_seq
        self._window_used_at = time.monotonic()
        return window
