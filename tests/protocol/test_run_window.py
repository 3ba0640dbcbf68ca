"""The run window against the database it mirrors: after any sequence of changes it shows exactly
what a fresh read shows, and it gets there by reading only the runs the notices name.

A small simulated writer changes `run` rows the way the real one does (a new run is inserted
`queued`; every status change bumps the revision; a terminal status is final; only prune deletes,
and only terminal runs) and, like the real one, names every run it changed in the commit's
change notice. The notices are delivered to the window late and in bursts, as the gateway's
mailbox may deliver them: the database is then ahead of the notices taken in, the case the
window's counting has to get right.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import msgpack
import pytest

from piwf_actors.protocol import views
from piwf_actors.protocol.run_window import RunWindow
from piwf_actors.statuses import RUN_STATUSES, TERMINAL_STATUSES
from piwf_actors.store import queries
from piwf_actors.store.database import open_store
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice

NEXT = {"queued": ["starting", "cancelled"], "starting": ["running", "queued", "failed"],
        "running": ["running", "parked", "done", "failed", "cancelled"], "parked": ["queued", "cancelled"]}
WORKFLOWS = ("alpha", "beta", "gamma")


class FakeWriter:
    """Writes run rows in its own transactions and keeps the change notices it would publish."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.db = open_store(path)
        self.conn: sqlite3.Connection = self.db.connection()
        self.rng = rng
        self.now = 1_800_000_000.0
        self.seq = 0
        self.notices: list[ChangeNotice] = []
        self.created = 0

    def close(self) -> None:
        self.db.close()

    def _commit(self, runs: list[str], tables: tuple[str, ...] = ("run", "run_event")) -> None:
        self.seq += 1
        self.notices.append(ChangeNotice(self.seq, tables, tuple(sorted(set(runs))), self.now))

    def _tick(self) -> None:
        # Mostly forward, sometimes the same instant (ties in created_at), now and then backwards
        # (a wall clock stepped back): the order (created_at, run_id) must hold in every case.
        self.now += self.rng.choice([0.0, 0.0, 0.001, 0.5, 2.0, -3.0])

    def create(self, count: int = 1) -> list[str]:
        self._tick()
        ids = []
        self.conn.execute("BEGIN IMMEDIATE")
        for _ in range(count):
            self.created += 1
            run_id = f"run_{self.rng.choice('abcdef')}{self.created:05d}"
            self.conn.execute(
                "INSERT INTO run (run_id, workflow, status, revision, progress, steps, pause_requested, "
                "cancel_requested, created_at, updated_at) VALUES (?, ?, 'queued', 1, 0, 0, 0, 0, ?, ?)",
                (run_id, self.rng.choice(WORKFLOWS), self.now, self.now))
            ids.append(run_id)
        self.conn.execute("COMMIT")
        self._commit(ids)
        return ids

    def live(self) -> list[tuple[str, str]]:
        return self.conn.execute(f"SELECT run_id, status FROM run WHERE status NOT IN {tuple(TERMINAL_STATUSES)}"
                                 " ORDER BY run_id").fetchall()

    def advance(self) -> None:
        """One commit moving one to three live runs on (a status change, or a node step)."""
        live = self.live()
        if not live:
            return
        self._tick()
        chosen = self.rng.sample(live, min(len(live), self.rng.randint(1, 3)))
        self.conn.execute("BEGIN IMMEDIATE")
        for run_id, status in chosen:
            new = self.rng.choice(NEXT[status])
            if new == status:  # a node committed: steps and current node move, the status stays
                self.conn.execute("UPDATE run SET steps = steps + 1, current_node = ? WHERE run_id = ?",
                                  (self.rng.choice("abc"), run_id))
                continue
            self.conn.execute(
                "UPDATE run SET status = ?, park_reason = ?, finished_at = ?, error_code = ?, revision = revision + 1,"
                " updated_at = ? WHERE run_id = ?",
                (new, "waiting" if new == "parked" else None, self.now if new in TERMINAL_STATUSES else None,
                 "boom" if new == "failed" else None, self.now, run_id))
        self.conn.execute("COMMIT")
        self._commit([run_id for run_id, _ in chosen])

    def set_status(self, run_id: str, status: str) -> None:
        self._tick()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("UPDATE run SET status = ?, finished_at = ?, revision = revision + 1, updated_at = ? "
                          "WHERE run_id = ?",
                          (status, self.now if status in TERMINAL_STATUSES else None, self.now, run_id))
        self.conn.execute("COMMIT")
        self._commit([run_id])

    def prune(self) -> None:
        """Delete some terminal runs, old ones and new ones alike (prune names each run it deletes)."""
        ended = [r[0] for r in self.conn.execute(
            f"SELECT run_id FROM run WHERE status IN {tuple(TERMINAL_STATUSES)} ORDER BY run_id")]
        doomed = self.rng.sample(ended, min(len(ended), self.rng.randint(1, 6)))
        if not doomed:
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("DELETE FROM run WHERE run_id = ?", [(run_id,) for run_id in doomed])
        self.conn.execute("COMMIT")
        self._commit(doomed, ("run", "run_event", "node_attempt"))

    def touch_only(self) -> None:
        """A commit that names a run without changing its row (an event appended, a child registered)."""
        row = self.conn.execute("SELECT run_id FROM run ORDER BY random() LIMIT 1").fetchone()
        if row is not None:
            self._commit([row[0]], ("run_event",))


def deliver(window: RunWindow, writer: FakeWriter, count: int | None = None) -> None:
    """Hand the window the oldest `count` notices not delivered yet (all when None)."""
    take = len(writer.notices) if count is None else min(count, len(writer.notices))
    for notice in writer.notices[:take]:
        window.note(notice)
    del writer.notices[:take]


def assert_same_as_fresh(window: RunWindow, reader: StoreReader, limit: int) -> None:
    fresh = views.runs_view(reader, limit)
    assert window.runs_view(limit) == fresh
    assert msgpack.unpackb(window.runs_payload(limit), raw=False) == fresh
    assert window.counts() == queries.run_counts(reader)


def check_lists(window: RunWindow, reader: StoreReader, rng: random.Random) -> int:
    """run.list from the window, for random filters, equals the query; how many it could answer."""
    answered = 0
    for _ in range(6):
        status = rng.choice([None, None, *RUN_STATUSES])
        workflow = rng.choice([None, None, *WORKFLOWS])
        since = rng.choice([None, None, 1_800_000_000.0 + rng.uniform(-20, 60)])
        limit = rng.randint(1, 12)
        found = window.list_runs(status, limit, workflow, since)
        if found is not None:
            answered += 1
            assert found == queries.run_list(reader, status, limit, workflow=workflow, since=since), (
                status, workflow, since, limit)
    return answered


@pytest.fixture
def store(tmp_path: Path):
    rng = random.Random(20261107)
    writer = FakeWriter(tmp_path / "state.db", rng)
    reader = StoreReader(tmp_path / "state.db")
    yield writer, reader, rng
    reader.close()
    writer.close()


def test_patched_window_equals_a_fresh_read_through_every_kind_of_change(store) -> None:
    writer, reader, rng = store
    window = RunWindow(capacity=12)
    writer.create(3)
    window.sync(reader)  # the first sync builds it
    answered = 0
    for step in range(700):
        roll = rng.random()
        if roll < 0.25:
            writer.create(rng.choice([1, 1, 2, 3]))
        elif roll < 0.85:
            writer.advance()
        elif roll < 0.9:
            writer.prune()
        else:
            writer.touch_only()
        if rng.random() < 0.4:
            # Notices arrive late and in bursts: the rows read are often newer than the notices taken in.
            deliver(window, writer, rng.randint(0, len(writer.notices)))
            window.sync(reader)
        if step % 7 == 0:
            deliver(window, writer)
            window.sync(reader)
            assert_same_as_fresh(window, reader, limit=rng.choice([1, 5, 12]))
            answered += check_lists(window, reader, rng)
    deliver(window, writer)
    window.sync(reader)
    assert_same_as_fresh(window, reader, limit=12)
    assert writer.created > 12 * 10  # runs went through the window many times over
    assert answered > 50  # run.list was answered from the window, not only refused


def test_without_deletions_the_window_is_patched_never_read_again(store) -> None:
    """Creations and status changes, with notices late and bunched, never need a second full read:
    the counts are patched exactly even when a run was created and ended between two syncs."""
    writer, reader, rng = store
    window = RunWindow(capacity=10)
    window.sync(reader)
    assert window.rebuilds == 1
    for _ in range(400):
        if rng.random() < 0.3:
            writer.create(rng.choice([1, 2]))
        else:
            writer.advance()
        if rng.random() < 0.3:
            deliver(window, writer, rng.randint(0, len(writer.notices)))
            window.sync(reader)
    deliver(window, writer)
    window.sync(reader)
    assert_same_as_fresh(window, reader, limit=10)
    assert window.rebuilds == 1, "a change the window should have patched made it read everything again"


def test_a_deleted_run_and_an_unnamed_change_rebuild(store) -> None:
    writer, reader, _ = store
    window = RunWindow(capacity=5)
    ids = writer.create(3)
    window.sync(reader)
    for _ in range(30):
        writer.advance()
    deliver(window, writer)
    window.sync(reader)
    assert window.rebuilds == 1
    # Runs changed, but the notice does not say which: only a full read can be right.
    writer.conn.execute("UPDATE run SET steps = 99 WHERE run_id = ?", (ids[0],))
    window.note(ChangeNotice(writer.seq + 1, ("run",), (), writer.now))
    window.sync(reader)
    assert window.rebuilds == 2
    assert_same_as_fresh(window, reader, limit=5)
    writer.prune()
    deliver(window, writer)
    window.sync(reader)
    assert window.rebuilds == 3
    assert_same_as_fresh(window, reader, limit=5)


def test_a_window_that_holds_every_run_answers_any_filter(store) -> None:
    writer, reader, _ = store
    window = RunWindow(capacity=50)
    writer.create(4)
    window.sync(reader)
    assert window.list_runs("failed", 10, None, None) == []  # complete: "none" is an answer
    writer.create(60)
    deliver(window, writer)
    window.sync(reader)
    # Now the window holds the newest 50 of 64: a filter matching fewer than its limit in the
    # window may have more matches further down, so it is left to the database.
    assert window.list_runs("failed", 10, None, None) is None
    assert window.list_runs(None, 10, None, None) == queries.run_list(reader, None, 10)


def test_live_runs_older_than_the_window_are_still_counted_exactly(store) -> None:
    """A backlog longer than the window: runs outside it start and end, and the counts follow
    without reading everything again."""
    writer, reader, _ = store
    window = RunWindow(capacity=5)
    window.sync(reader)
    backlog = []
    for _ in range(30):  # each new run pushes an older, still queued one out of the window
        backlog += writer.create()
        deliver(window, writer)
        window.sync(reader)
    for run_id in backlog[:12]:  # the oldest: far outside the window
        for status in ("starting", "running", "done"):
            writer.set_status(run_id, status)
        deliver(window, writer)
        window.sync(reader)
        assert_same_as_fresh(window, reader, limit=5)
    assert window.rebuilds == 1
