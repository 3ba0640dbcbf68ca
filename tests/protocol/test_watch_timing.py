"""When a watch sends (step functions with a chosen `now`), and the socket loop's alarm that wakes the
gateway for a coalesced event (a real loop on a real socket).

- A list view (`runs`, `host`, `interactions`) sends its first change at once and then at most one
  event per LIST_INTERVAL_S; a `run` watch sends every change at once.
- An unchanged payload is never sent, and does not count as an event.
- `alarm_at` calls the owner back in the loop's thread at the deadline; the earliest deadline wins,
  and the loop keeps one alarm at a time.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from piwf_actors.protocol.socket_loop import SocketLoop
from piwf_actors.protocol.watches import LIST_INTERVAL_S, WatchSet
from piwf_actors.store.requests import ChangeNotice


def _notice(seq: int, runs: tuple[str, ...] = ("run_a",), tables: tuple[str, ...] = ("run",)) -> ChangeNotice:
    return ChangeNotice(seq, tables, runs, 0.0)


def test_a_list_view_sends_at_once_then_at_most_once_per_interval() -> None:
    watches = WatchSet()
    runs = watches.add(1, "all", "runs", None, None)
    one = watches.add(1, "one", "run", "run_a", None)
    now = 1000.0

    # First change: both may send at once.
    assert watches.mark(_notice(1)) == 0.0
    due, later = watches.take_due(now)
    assert due == [runs, one] and later is None
    assert runs.changed_to(b"view-1", now) and one.changed_to(b"view-1", now)

    # A change 5 ms later: the run watch sends, the runs watch waits for the interval's end.
    now += 0.005
    assert watches.mark(_notice(2)) == 0.0  # the earliest marked watch (the run watch) may send now
    due, later = watches.take_due(now)
    assert due == [one] and later == 1000.0 + LIST_INTERVAL_S
    assert one.changed_to(b"view-2", now)

    # More changes before the interval ends change nothing about that.
    now += 0.005
    watches.mark(_notice(3))
    assert watches.take_due(now) == ([one], 1000.0 + LIST_INTERVAL_S)

    # At the interval's end the runs watch sends the view as it is then, once.
    now = 1000.0 + LIST_INTERVAL_S
    due, later = watches.take_due(now)
    assert due == [runs] and later is None
    assert runs.changed_to(b"view-4", now) and runs.revision == 2
    assert watches.take_due(now + 1) == ([], None)  # nothing marked since


def test_an_unchanged_view_is_not_sent_and_does_not_start_an_interval() -> None:
    watches = WatchSet()
    runs = watches.add(1, "all", "runs", None, None)
    assert runs.changed_to(b"view", 10.0) and runs.revision == 1
    assert not runs.changed_to(b"view", 10.5)
    assert runs.revision == 1 and runs.due_at == 10.0 + LIST_INTERVAL_S
    big = b"x" * 100_000  # kept as a digest, compared the same way
    assert runs.changed_to(big, 11.0) and not runs.changed_to(bytes(big), 11.5) and runs.revision == 2


def test_only_the_views_a_notice_can_change_are_marked() -> None:
    watches = WatchSet()
    runs = watches.add(1, "all", "runs", None, None)
    other_run = watches.add(1, "b", "run", "run_b", None)
    inbox = watches.add(2, "inbox", "interactions", None, None)
    host = watches.add(2, "host", "host", None, None)
    assert watches.mark(_notice(1, runs=("run_a",), tables=("run_event",))) == 0.0
    assert (runs.dirty, other_run.dirty, inbox.dirty, host.dirty) == (True, False, False, False)
    watches.take_due(0.0)
    assert watches.mark(_notice(2, runs=(), tables=("host_state",))) == 0.0
    assert (runs.dirty, other_run.dirty, inbox.dirty, host.dirty) == (False, False, False, True)
    watches.take_due(0.0)
    assert watches.mark(_notice(3, runs=(), tables=("channel_cursor",))) is None


def test_the_socket_loop_alarm_rings_at_its_deadline_in_the_loop_thread(tmp_path: Path) -> None:
    """Orderings only (how late an alarm rings is a figure of bench/latency.py): an alarm never rings
    before its deadline; an earlier one replaces a later one; a later one does not stand beside it."""
    rang: list[tuple[float, str]] = []
    ring = threading.Event()

    def on_alarm() -> None:
        rang.append((time.monotonic(), threading.current_thread().name))
        ring.set()

    loop = SocketLoop(tmp_path / "s.sock", on_open=lambda conn_id: {}, on_frame=lambda c, f, p: None,
                      on_closed=lambda c: None, on_alarm=on_alarm)
    loop.start()
    try:
        set_at = time.monotonic()
        loop.alarm_at(set_at + 3600.0)
        loop.alarm_at(set_at + 0.05)  # earlier: replaces it
        loop.alarm_at(set_at + 1800.0)  # later: the earlier one stands
        # Only the 0.05 s alarm can ring within the wait (the others are half an hour and more away).
        assert ring.wait(60), "the alarm set 0.05 s ahead (replacing one set an hour ahead) to ring"
        at, thread = rang[0]
        assert at >= set_at + 0.05, f"the alarm rang {set_at + 0.05 - at:.3f} s before its deadline"
        assert thread == "piwf-gateway-io"

        # One alarm at a time: after `first` replaced `replaced`, the loop kept no alarm at `replaced`
        # (the gateway asks again when it needs one). Had it kept it, it would ring at `replaced`,
        # before `last`; so the next ring must be `last`'s.
        ring.clear()
        now = time.monotonic()
        first, replaced, last = now + 0.05, now + 0.3, now + 0.6
        loop.alarm_at(replaced)
        loop.alarm_at(first)
        assert ring.wait(60), "the alarm set 0.05 s ahead (replacing one set 0.3 s ahead) to ring"
        assert len(rang) == 2 and rang[1][0] >= first
        ring.clear()
        loop.alarm_at(last)
        assert ring.wait(60), "the alarm set 0.6 s ahead to ring"
        assert rang[2][0] >= last, (f"an alarm rang {last - rang[2][0]:.3f} s before the one set for 0.6 s: "
                                    "the replaced 0.3 s alarm was kept")
        assert len(rang) == 3, rang
    finally:
        loop.stop()
