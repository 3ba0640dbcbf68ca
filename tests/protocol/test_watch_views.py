"""The watched views over the wire equal a fresh read of the database, however they were kept.

The host keeps the `runs` view and the run counts in memory and patches them
from change notices (`RunWindow`). Here a live host goes through many kinds
of change — runs that finish, fail, park, are cancelled, paused, restarted,
more of them than the view shows, then a prune — and each time things
settle, a watcher's last `runs` and `host` events must equal what a fresh
read-only connection reads, and what a new watch gets first; `run.list` must
answer what the query answers. Also: `run.list` sees a run as soon as
`run.start` was answered, and a burst of changes reaches a `runs` watcher,
its last event current (how many events a burst makes: bench/latency.py).
And a write the writer commits before it registered the gateway for change
notices (the gateway had started and answered already) still reaches the
watches.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors.actors.gateway import ClientGateway
from piwf_actors.actors.writer import DatabaseWriter, Subscribe, WriterHandle
from piwf_actors.protocol import views
from piwf_actors.store import queries
from piwf_actors.store.commands import registry
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteCommand

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow

    def _boom(ctx):
        raise RuntimeError("boom")

    fails = define_workflow(name="fails", start_at="a", nodes={"a": compute(run=_boom)}, edges=[])
''')


def _watch(conn, subscription_id: str, topic: str) -> None:
    answer = conn.request("watch", {"subscription_id": subscription_id, "topic": topic})
    assert answer["outcome"] == "accepted", answer


def _fresh(host) -> tuple[dict, dict]:
    """(runs view, run counts) read afresh, through a connection of the test's own."""
    reader = StoreReader(host.paths.database)
    try:
        return views.runs_view(reader), queries.run_counts(reader)
    finally:
        reader.close()


def _latest(conn, subscription_id: str, quiet_s: float = 0.15) -> dict | None:
    """The payload of the last event of `subscription_id` that arrived until none came for `quiet_s`."""
    latest = None
    while True:
        try:
            latest = conn.event(subscription_id, timeout=quiet_s)["payload"]
        except TimeoutError:
            return latest


def _settle(host, conn, proto, last: dict) -> dict:
    """Wait until no run is on its way, then until the watcher's `runs` and `host` views equal a fresh
    read; returns the last `runs` payload. `last` keeps the newest payload per subscription."""
    def settled() -> bool:
        counts = conn.ok("host.status")["receipt"]["runs"]
        return not (counts["queued"] or counts["starting"] or counts["running"])

    proto.wait_for(settled, 30, "every run to end or park")

    def caught_up() -> bool:
        for subscription_id in ("all", "hq"):
            payload = _latest(conn, subscription_id)
            if payload is not None:
                last[subscription_id] = payload
        fresh_runs, fresh_counts = _fresh(host)
        return last["all"] == fresh_runs and last["hq"]["runs"] == fresh_counts

    proto.wait_for(caught_up, 10, lambda: f"the watched views to equal a fresh read: {last['all']['counts']}")
    return last["all"]


def test_watched_views_equal_a_fresh_read_after_many_changes(host, connect, proto, tmp_path: Path) -> None:
    (tmp_path / "fails.py").write_text(FLOWS)
    watcher, actor = connect(host), connect(host)
    _watch(watcher, "all", "runs")
    _watch(watcher, "hq", "host")
    last = {"all": watcher.event("all")["payload"], "hq": watcher.event("hq")["payload"]}

    def start(workflow: str, **payload) -> str:
        return actor.ok("run.start", {"workflow": workflow, **payload})["receipt"]["run_id"]

    # More runs than the view's 50, finishing, failing, parking; some cancelled, some paused.
    done = [start(proto.flow("quick"), input={"i": i}) for i in range(40)]
    failed = [start(f"{tmp_path / 'fails.py'}:fails") for _ in range(6)]
    parked = [start(proto.flow("asks")) for _ in range(6)]
    slow = [start(proto.flow("three"), input={"sleep": 0.3}) for _ in range(3)]
    for run_id in parked[:3]:
        proto.wait_run(actor, run_id, ("parked",))
        actor.ok("run.cancel", run_id=run_id)
    actor.ok("run.pause", run_id=slow[0])
    settled = _settle(host, watcher, proto, last)
    statuses = {run["status"] for run in settled["runs"]}
    assert {"done", "failed", "parked", "cancelled"} <= statuses, statuses
    assert len(settled["runs"]) == 50 and sum(settled["counts"].values()) == 55

    # Restarts add runs and touch their parents (outside the view by now).
    for run_id in (done[0], failed[0]):
        revision = actor.ok("run.get", run_id=run_id)["revision"]
        actor.ok("run.restart", run_id=run_id, expected_revision=revision)
    actor.ok("run.resume", run_id=slow[0])
    settled = _settle(host, watcher, proto, last)
    assert sum(settled["counts"].values()) == 57

    # A new watch's first event is the same view.
    other = connect(host)
    _watch(other, "again", "runs")
    assert other.event("again")["payload"] == settled

    # run.list, from memory or not, answers what the query answers.
    reader = StoreReader(host.paths.database)
    try:
        for payload, args in (({}, (None, 100)), ({"limit": 7}, (None, 7)), ({"status": "failed"}, ("failed", 100)),
                              ({"status": "parked", "limit": 2}, ("parked", 2)),
                              ({"workflow": "quick", "limit": 30}, (None, 30, "quick"))):
            expected = queries.run_list(reader, args[0], args[1], workflow=args[2] if len(args) > 2 else None)
            assert actor.ok("run.list", payload)["receipt"]["runs"] == expected, payload
    finally:
        reader.close()

    # A prune deletes finished runs, inside the view and beyond it.
    for run_id in parked[3:]:
        actor.ok("run.cancel", run_id=run_id)
    pruned = actor.ok("state.prune", {"before": time.time() + 60, "apply": True})["receipt"]
    assert pruned["run_count"] == 57
    settled = _settle(host, watcher, proto, last)
    assert settled["runs"] == [] and sum(settled["counts"].values()) == 0


def test_run_list_shows_a_run_as_soon_as_run_start_is_answered(host, connect, proto) -> None:
    """Read your writes: with the list served from memory (a `runs` watch keeps it), a run.list sent
    right after run.start's answer, on the same connection or another, includes the new run."""
    watcher, one, two = connect(host), connect(host), connect(host)
    _watch(watcher, "all", "runs")
    watcher.event("all")
    for index in range(40):
        run_id = one.ok("run.start", {"workflow": proto.flow("quick"), "input": {"i": index}})["receipt"]["run_id"]
        lister = one if index % 2 else two
        listed = [run["run_id"] for run in lister.ok("run.list", {"limit": 5})["receipt"]["runs"]]
        assert run_id in listed, (index, run_id, listed)


def test_a_burst_of_changes_reaches_a_runs_watcher_and_its_last_event_is_current(host, connect, proto) -> None:
    """Forty runs started back to back change the `runs` view a few hundred times; the watcher's
    events end with the view as it is when they are over. (At most one event per LIST_INTERVAL_S is
    the rule of test_watch_timing.py, with a chosen clock; how many events a live burst makes is a
    figure of bench/latency.py.)"""
    watcher, actor = connect(host), connect(host)
    _watch(watcher, "all", "runs")
    watcher.event("all")
    for batch in range(2):  # within the in-flight cap of 32
        sent = [actor.send_request("run.start", {"workflow": proto.flow("quick"), "input": {"i": batch * 20 + i}})
                for i in range(20)]
        for request_id in sent:
            assert actor.response(request_id)["outcome"] == "accepted"
    events = []

    def all_done() -> bool:
        while True:
            try:
                events.append(watcher.event("all", timeout=0.1)["payload"])
            except TimeoutError:
                return bool(events) and events[-1]["counts"]["done"] == 40

    proto.wait_for(all_done, 60, lambda: f"the watcher to see 40 runs done ({len(events)} events)")
    assert events[-1] == _fresh(host)[0]
    assert [run["status"] for run in events[-1]["runs"]] == ["done"] * 40


class _WriterHeldAtGatewayStart:
    """Holds the host's writer inside a batch from just before its gateway starts until `release`.

    The gateway tells the writer `Subscribe` when it starts; the writer gets to that message after the
    Drain ahead of it in its mailbox, and a Drain applies batch after batch until its queue is empty,
    so every command queued meanwhile commits before the gateway is registered, also one a client
    sent after the gateway answered it. Under load that happens for real (a warm worker's
    registration was the batch ahead, and a client's first run.start went with it); here a command
    of the test's own (`HOLD`, in the writer's transaction) keeps the writer in that Drain for as
    long as the test needs. `order` records, in the writer's thread, the commands of each batch
    applied and the gateway's registration.
    """

    HOLD = "test.hold_writer"

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.holding = threading.Event()
        self._released = threading.Event()
        self._queued: dict[str, threading.Event] = {}
        self.order: list[str] = []

    def arm(self) -> None:
        """Hold the writer when the next gateway starts (and record the order from now on)."""
        held, patch = self, self._monkeypatch
        real_on_start, real_submit = ClientGateway.on_start, WriterHandle.submit
        real_apply, real_subscribe = DatabaseWriter._apply, DatabaseWriter._subscribe

        def on_start(gateway: ClientGateway) -> None:  # the gateway's thread
            gateway._writer.submit(WriteCommand(held.HOLD, {}))
            assert held.holding.wait(30), "the writer did not take the holding command"
            real_on_start(gateway)

        def submit(handle: WriterHandle, command: WriteCommand, reply_to: Any = None) -> None:
            real_submit(handle, command, reply_to)
            held._queued.setdefault(command.name, threading.Event()).set()

        def apply(writer: DatabaseWriter, batch: list) -> None:
            real_apply(writer, batch)
            held.order.extend(command.name for command, _ in batch)

        def subscribe(writer: DatabaseWriter, message: Subscribe) -> None:
            real_subscribe(writer, message)
            held.order.append(f"registered {message.subscriber.actor_class.__name__}")

        patch.setitem(registry._COMMANDS, self.HOLD, registry.CommandSpec(self.HOLD, self._hold, False))
        patch.setattr(ClientGateway, "on_start", on_start)
        patch.setattr(WriterHandle, "submit", submit)
        patch.setattr(DatabaseWriter, "_apply", apply)
        patch.setattr(DatabaseWriter, "_subscribe", subscribe)

    def _hold(self, _ctx: registry.WriteContext, _args: dict[str, Any]) -> None:
        """Runs in the writer's thread, inside its transaction, until released (at most a minute)."""
        self.holding.set()
        self._released.wait(60)

    def release_once_queued(self, command_name: str) -> None:
        """Let the writer go on once a `command_name` command is queued for it."""
        queued = self._queued.setdefault(command_name, threading.Event())
        assert queued.wait(30), f"no {command_name} was queued for the writer"
        self._released.set()

    def release(self) -> None:
        self._released.set()


@pytest.fixture
def writer_held(make_host, monkeypatch: pytest.MonkeyPatch) -> Iterator[_WriterHeldAtGatewayStart]:
    """`_WriterHeldAtGatewayStart`, released in teardown before the hosts stop (after make_host's set-up,
    so before its teardown)."""
    held = _WriterHeldAtGatewayStart(monkeypatch)
    yield held
    held.release()


def test_a_write_committed_before_the_writer_registered_the_gateway_reaches_the_watches(
        make_host, writer_held: _WriterHeldAtGatewayStart, connect, proto) -> None:
    """A run parked under an earlier host is cancelled while the new host's writer has not registered
    its gateway yet: that commit's notice never reaches the gateway, and no later one names the run.
    The watched `runs` and `host` views must show the cancel anyway, and run.list must answer what
    the query answers."""
    first = make_host()
    setup = connect(first)
    parked = setup.ok("run.start", {"workflow": proto.flow("asks")})["receipt"]["run_id"]
    proto.wait_run(setup, parked, ("parked",))
    setup.close()
    first.stop("the next host starts on the same state")

    writer_held.arm()
    host = make_host(lease_s=60.0)  # the held writer renews no lease meanwhile
    assert writer_held.holding.is_set()
    watcher, actor = connect(host), connect(host)
    _watch(watcher, "all", "runs")
    _watch(watcher, "hq", "host")
    last = {"all": watcher.event("all")["payload"], "hq": watcher.event("hq")["payload"]}
    assert [(run["run_id"], run["status"]) for run in last["all"]["runs"]] == [(parked, "parked")]

    request_id = actor.send_request("run.cancel", run_id=parked)
    writer_held.release_once_queued("run.cancel")
    assert actor.response(request_id)["outcome"] == "accepted"
    proto.wait_for(lambda: "registered ClientGateway" in writer_held.order, 30, "the gateway's registration")
    order = writer_held.order
    assert order.index("run.cancel") < order.index("registered ClientGateway"), order  # the case at hand

    settled = _settle(host, watcher, proto, last)
    assert [(run["run_id"], run["status"]) for run in settled["runs"]] == [(parked, "cancelled")]
    reader = StoreReader(host.paths.database)
    try:
        assert actor.ok("run.list")["receipt"]["runs"] == queries.run_list(reader)
    finally:
        reader.close()
