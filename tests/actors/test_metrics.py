"""The Prometheus exporter (`piwf_actors.metrics`, `HostConfig.metrics_address`).

Hosts listen on 127.0.0.1 port 0; the bound address is read from the host's
board (`host._parts.board.snapshot("metrics")`), and every scrape goes over
HTTP from 127.0.0.1 and is parsed with prometheus_client's own parser. The
figures are compared with the state database, read by the test itself.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from testsupport import rows, wait_for

from piwf_actors import HostConfig, start_host
from piwf_actors.actors.writer import start_writer
from piwf_actors.errors import HostError
from piwf_actors.metrics import AttemptFollower, RunFollower, parse_metrics_address
from piwf_actors.store.database import open_store
from piwf_actors.store.metrics_queries import AttemptRow, RunRow

pytestmark = pytest.mark.timeout(120, method="thread")

HOST = {"lease_s": 5.0, "max_workers": 2, "warm_workers": 1, "reap_grace_s": 0.5}
LOOPBACK_ANY_PORT = "127.0.0.1:0"

WORKFLOWS = '''
import os
import time

from piwf_actors.workflows import action, checkpoint, choice, compute, define_workflow, edge, human_decision


def _boom(ctx):
    raise RuntimeError("boom")


def _hold(ctx):
    deadline = time.monotonic() + 60
    while not os.path.exists(ctx.input["release"]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"held": True}


ok = define_workflow(
    name="ok", start_at="a",
    nodes={"a": compute(run=lambda ctx: {"n": 1}),
           "b": action(run=lambda ctx: {"acted": True}),
           "c": compute(run=lambda ctx: {"n": ctx.outputs["a"]["n"] + 1})},
    edges=[edge("a", "b"), edge("b", "c")],
)
boom = define_workflow(name="boom", start_at="a", nodes={"a": compute(run=_boom)}, edges=[])
ask = define_workflow(name="ask", start_at="q", nodes={"q": checkpoint(prompt="anything?")}, edges=[])
decide = define_workflow(
    name="decide", start_at="d",
    nodes={"d": human_decision(audience="operator", choices={"yes": choice(label="Yes")},
                               request=lambda ctx: {"title": "Ship?", "summary": "tests passed"})},
    edges=[],
)
hold = define_workflow(name="hold", start_at="h", nodes={"h": compute(run=_hold)}, edges=[])
'''


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture
def flows(state_dir: Path) -> Path:
    path = state_dir / "metrics_flows.py"
    path.write_text(WORKFLOWS)
    return path


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metrics_url(host: Any) -> str:
    """Where the host's exporter listens, as it published it on the host's board."""
    info = host._parts.board.snapshot("metrics")
    assert info, "the host publishes no metrics address"
    return info["url"]


class Scrape:
    """One scrape, parsed: sample values by (name, labels)."""

    def __init__(self, url: str) -> None:
        assert url.startswith("http://127.0.0.1:")
        with _NO_PROXY.open(url, timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                        for family in self.families.values() for s in family.samples}

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def total(self, name: str) -> float:
        """The sum of a sample over all its label values (e.g. every node kind's _count)."""
        return sum(value for (sample, _), value in self.samples.items() if sample == name)


def db_count(state_dir: Path, sql: str) -> int:
    return int(next(iter(rows(state_dir, sql)[0].values())))


def metrics_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "piwf-metrics"]


def listening_ports() -> set[int]:
    """TCP ports this process listens on (from /proc: the kernel's view, not the code's)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def start(workflows: Path, host: Any, name: str, **input: Any) -> str:
    return host.start_run(f"{workflows}:{name}", input or None)["receipt"]["run_id"]


# --- the figures match the database ------------------------------------------------------


def test_scrape_matches_the_database(hosts, state_dir, flows):
    host = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    url = metrics_url(host)

    release = state_dir / "release"
    held = start(flows, host, "hold", release=str(release))
    wait_for(lambda: len(host._parts.board.snapshot("scheduler").get("active", [])) == 1
             and host.get_run(held)["status"] == "running", 30, "the held run to be running")
    busy = Scrape(url)
    assert busy.value("piwf_workers_busy") == 1
    assert busy.value("piwf_workers_max") == 2
    assert busy.value("piwf_runs", status="running") == 1
    release.touch()
    assert host.wait_for_run(held)["status"] == "done"

    done = [start(flows, host, "ok") for _ in range(3)]
    failed = start(flows, host, "boom")
    asked = start(flows, host, "ask")
    decided = start(flows, host, "decide")
    for run_id in done:
        assert host.wait_for_run(run_id)["status"] == "done"
    assert host.wait_for_run(failed)["status"] == "failed"
    for run_id in (asked, decided):
        assert host.wait_for_run(run_id, statuses=("parked",))["status"] == "parked"
    host.cancel_run(asked)
    assert host.wait_for_run(asked)["status"] == "cancelled"
    wait_for(lambda: not host._parts.board.snapshot("scheduler").get("active"), 30, "every worker to be free")

    scrape = Scrape(url)
    # Runs: counters since the exporter started (a fresh database: all of them) and gauges by status.
    assert scrape.value("piwf_runs_started_total") == db_count(
        state_dir, "SELECT count(*) FROM run_event WHERE kind = 'run_started'") == 7
    for status, expected in (("done", 4), ("failed", 1), ("cancelled", 1)):
        assert scrape.value("piwf_runs_finished_total", status=status) == expected == db_count(
            state_dir, f"SELECT count(*) FROM run WHERE status = '{status}'")
    for status in ("queued", "starting", "running", "parked", "done", "failed", "cancelled"):
        assert scrape.value("piwf_runs", status=status) == db_count(
            state_dir, f"SELECT count(*) FROM run WHERE status = '{status}'")
    assert scrape.value("piwf_runs", status="parked") == 1
    # Node attempts: each finished one observed once, labelled with its kind.
    finished_attempts = db_count(state_dir, "SELECT count(*) FROM node_attempt WHERE finished_at IS NOT NULL")
    # hold 1 + ok 3×3 + boom 1; the checkpoint of the cancelled run and the pending decision never finished.
    assert finished_attempts == 11
    assert scrape.total("piwf_node_duration_seconds_count") == finished_attempts
    assert scrape.value("piwf_node_duration_seconds_count", kind="effect") == 3 == db_count(
        state_dir, "SELECT count(DISTINCT attempt_id) FROM effect")
    assert scrape.value("piwf_node_duration_seconds_count", kind="compute") == 8  # hold, ok a+c ×3, boom
    assert scrape.value("piwf_node_duration_seconds_count", kind="decision") == 0  # still waiting
    assert scrape.value("piwf_node_duration_seconds_bucket", kind="compute", le="+Inf") == 8
    # Interactions and effects waiting for people.
    assert scrape.value("piwf_decisions_pending") == 1 == db_count(
        state_dir, "SELECT count(*) FROM interactive_request WHERE kind = 'decision' AND status = 'pending'")
    assert scrape.value("piwf_effects_ambiguous") == 0
    assert scrape.value("piwf_channel_deliveries_ambiguous") == 0
    # The writer's own histograms.
    assert scrape.value("piwf_writer_batch_commands_count") > 0
    assert scrape.value("piwf_writer_commit_seconds_count") == scrape.value("piwf_writer_batch_commands_count")
    assert scrape.value("piwf_writer_batch_commands_sum") >= scrape.value("piwf_writer_batch_commands_count")
    assert scrape.value("piwf_writer_failed_batches_total") == 0
    assert scrape.value("piwf_workers_busy") == 0

    # A second scrape with nothing new counts nothing twice.
    again = Scrape(url)
    assert again.total("piwf_node_duration_seconds_count") == finished_attempts
    assert again.value("piwf_runs_started_total") == 7


def test_counters_do_not_drop_when_runs_are_pruned(hosts, state_dir, flows):
    host = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, retention_days=0, **HOST)
    url = metrics_url(host)
    for run_id in [start(flows, host, "ok") for _ in range(2)]:
        assert host.wait_for_run(run_id)["status"] == "done"
    assert Scrape(url).value("piwf_runs_finished_total", status="done") == 2
    receipt = host.writer.call("state.prune", {"before": time.time() + 1, "apply": True})["receipt"]
    assert receipt["run_count"] == 2
    assert db_count(state_dir, "SELECT count(*) FROM run") == 0
    after = Scrape(url)
    assert after.value("piwf_runs", status="done") == 0
    assert after.value("piwf_runs_finished_total", status="done") == 2
    assert after.value("piwf_runs_started_total") == 2
    assert after.total("piwf_node_duration_seconds_count") == 6
    ran = start(flows, host, "ok")
    assert host.wait_for_run(ran)["status"] == "done"
    last = Scrape(url)
    assert last.value("piwf_runs_finished_total", status="done") == 3
    assert last.total("piwf_node_duration_seconds_count") == 9


# --- ownership: one registry and port per host, nothing when off, nothing after stop ------


def test_two_hosts_export_separately(hosts, state_dir, other_state_dir, flows):
    first = hosts(state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    second = hosts(other_state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST)
    assert first._parts.metrics.registry is not second._parts.metrics.registry
    assert metrics_url(first) != metrics_url(second)
    for run_id in [start(flows, first, "ok") for _ in range(2)]:
        assert first.wait_for_run(run_id)["status"] == "done"
    assert second.wait_for_run(start(flows, second, "boom"))["status"] == "failed"

    one, two = Scrape(metrics_url(first)), Scrape(metrics_url(second))
    assert one.value("piwf_runs_started_total") == 2
    assert one.value("piwf_runs_finished_total", status="done") == 2
    assert one.value("piwf_runs_finished_total", status="failed") == 0
    assert two.value("piwf_runs_started_total") == 1
    assert two.value("piwf_runs_finished_total", status="failed") == 1
    assert one.value("piwf_writer_batch_commands_count") != two.value("piwf_writer_batch_commands_count")
    # Nothing of either host lands in prometheus_client's process-global registry.
    assert not [m for m in REGISTRY.collect() if m.name.startswith("piwf_")]


def test_metrics_are_off_by_default(hosts, state_dir, flows):
    ports_before = listening_ports()
    host = hosts(state_dir, **HOST)
    assert host.config.metrics_address is None
    assert host.wait_for_run(start(flows, host, "ok"))["status"] == "done"
    assert host._parts.metrics is None
    assert host._parts.board.snapshot("metrics") == {}
    assert metrics_threads() == []
    assert listening_ports() == ports_before


def test_exporter_is_gone_after_stop(state_dir):
    ports_before = listening_ports()
    host = start_host(HostConfig(state_dir=state_dir, metrics_address=LOOPBACK_ANY_PORT, **HOST))
    try:
        port = host._parts.board.snapshot("metrics")["port"]
        assert port in listening_ports()
        assert [t.is_alive() for t in metrics_threads()] == [True]
        assert Scrape(metrics_url(host)).value("piwf_runs_started_total") == 0
    finally:
        host.stop()
    wait_for(lambda: not metrics_threads(), 10, "the metrics thread to end")
    assert listening_ports() == ports_before
    assert host._parts.board.snapshot("metrics") == {}
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_taken_port_refuses_the_start_and_leaves_nothing(state_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(HostError, match="metrics: cannot listen on 127.0.0.1"):
            start_host(HostConfig(state_dir=state_dir, metrics_address=f"127.0.0.1:{port}", **HOST))
    assert metrics_threads() == []
    # The lock was released: the next host starts on the same directory.
    start_host(HostConfig(state_dir=state_dir, **HOST)).stop()


# --- pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("9464", ("127.0.0.1", 9464)),
    (":9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:9464", ("0.0.0.0", 9464)),
    ("localhost:0", ("localhost", 0)),
    ("[::1]:9464", ("::1", 9464)),
])
def test_metrics_address_defaults_to_loopback(text, expected):
    assert parse_metrics_address(text) == expected


@pytest.mark.parametrize("text", ["", "host:", "host:port", "1:2:3", "127.0.0.1:65536", "-1"])
def test_bad_metrics_addresses_are_refused(text):
    with pytest.raises(ValueError, match="metrics address"):
        parse_metrics_address(text)


def test_run_follower_counts_each_start_and_end_once():
    follower = RunFollower()
    follower.baseline(2, [RunRow(1, "running", True), RunRow(2, "queued", False)])
    changes = follower.step([RunRow(1, "running", True), RunRow(2, "running", True), RunRow(3, "done", True),
                             RunRow(4, "cancelled", False)], max_rowid=4)
    assert (changes.started, changes.finished) == (2, {"done": 1, "cancelled": 1})  # 2 and 3, not 1
    assert sorted(follower.watched) == [1, 2] and follower.after == 4
    changes = follower.step([RunRow(1, "failed", True), RunRow(2, "queued", True)], max_rowid=4)
    assert (changes.started, changes.finished) == (0, {"failed": 1})  # 2 went back to the queue: not again
    assert list(follower.watched) == [2]
    # The newest rows were deleted and rowids are handed out again: follow from the new top.
    changes = follower.step([], max_rowid=1)
    assert list(follower.watched) == [] and follower.after == 1


def test_attempt_follower_observes_each_finished_attempt_once():
    follower = AttemptFollower()
    follower.baseline(1, [1])
    finished = follower.step([AttemptRow(1, True, 2.0, "effect", True), AttemptRow(2, False, None, None, True),
                              AttemptRow(3, True, 0.5, "compute", False), AttemptRow(4, False, None, None, True)],
                             max_rowid=4)
    assert finished == [("effect", 2.0), ("compute", 0.5)]
    assert sorted(follower.watched) == [2, 4]
    # 2 finished; 4's run was cancelled while it waited: it will never finish, so it is no longer watched.
    assert follower.step([AttemptRow(2, True, 9.0, "decision", True), AttemptRow(4, False, None, None, False)],
                         max_rowid=4) == [("decision", 9.0)]
    assert follower.watched == []


def test_writer_calls_its_batch_observer_and_survives_a_failing_one(state_dir):
    open_store(state_dir / "state.db").close()
    seen: list[tuple[int, float, bool]] = []

    def observe(commands: int, seconds: float, committed: bool) -> None:
        seen.append((commands, seconds, committed))
        if len(seen) == 1:
            raise RuntimeError("observer bug")

    writer = start_writer(state_dir / "state.db", batch_observer=observe)
    try:
        args = {"host_id": "h1", "token_hash": "t" * 64, "pid": os.getpid(), "process_start_identity": "1.0",
                "lease_s": 60}
        epoch = writer.call("lease.acquire", args)["epoch"]
        writer.with_epoch(epoch).call("run.create", {"workflow": "w", "input": {}})
        # The observer is called after the replies went out: wait for it.
        wait_for(lambda: len(seen) == 2, 10, "two observed batches")
        assert [(commands, committed) for commands, _, committed in seen] == [(1, True), (1, True)]
        assert all(seconds > 0 for _, seconds, _ in seen)
        assert writer.ref.is_alive()
    finally:
        writer.ref.stop()
