"""Two hosts on one shared database, in this process: one active, one standby.

What a standby serves (host.status with its role and the active host, reads,
watches that follow the other host's writes) and refuses (mutations:
`unavailable` with a hint, on the socket and through the embedding API);
a clean stop of the active host hands over without waiting out the lease (it is released),
and the standby then serves as active: its gateway takes mutations and its
scheduler runs what was queued.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from testsupport import wait_for

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client
from piwf_actors.errors import StandbyHost
from piwf_actors.protocol.catalog import OPERATIONS

FLOW = Path(__file__).resolve().parent / "wf" / "recovery_flows.py"
#: A lease no wait of these tests comes near, and the wait for a takeover on release.
LONG_LEASE_S = 300.0
TAKEOVER_WAIT_S = 60.0


@pytest.fixture
def two_hosts(state_dir: Path, other_state_dir: Path):
    shared = f"sqlite://{other_state_dir}/shared.db"
    started = []

    def start(name: str, **config):
        settings = {"lease_s": 2.0, "max_workers": 1, "warm_workers": 0, "reap_grace_s": 0.5, **config}
        host = start_host(HostConfig(state_dir=state_dir / name, database=shared, host_id=f"host-{name}",
                                     **settings))
        started.append(host)
        return host

    try:
        yield start
    finally:
        for host in reversed(started):
            host.stop("test teardown")


def test_a_standby_serves_reads_refuses_mutations_and_takes_over_on_release(two_hosts, tmp_path) -> None:
    # A lease far longer than any wait here: a takeover seen within a wait came from the release.
    active = two_hosts("a", lease_s=LONG_LEASE_S)
    standby = two_hosts("b", lease_s=LONG_LEASE_S)
    assert (active.role, standby.role) == ("active", "standby")
    assert standby.epoch is None and standby.claim is None
    oracle = tmp_path / "oracle"
    run_id = active.start_run(f"{FLOW}:four", {"oracle": str(oracle), "sleep": 0.01})["receipt"]["run_id"]
    active.wait_for_run(run_id, timeout=20)

    with Client(standby.paths.root) as client:
        status = client.status()
        assert status["role"] == "standby" and status["host_id"] == "host-b"
        assert status["active"]["host_id"] == "host-a" and status["active"]["epoch"] == active.epoch
        assert status["active"]["live"] and status["active"]["expires_at"] > time.time()
        # Reads see what the active host wrote.
        assert client.get(run_id)["status"] == "done"
        listed = client.request("run.list").receipt["runs"]
        assert [r["run_id"] for r in listed] == [run_id]
        events = client.request("run.events", run_id=run_id)
        assert events.ok and events.receipt["events"]
        assert client.request("interaction.list").ok
        assert client.request("state.status").ok
        # Mutations: unavailable, one line, naming the active host and the way out.
        refused = client.request("run.start", {"workflow": f"{FLOW}:four", "input": {"oracle": str(oracle)}})
        assert refused.outcome == "unavailable"
        assert refused.error == (f"standby host; the active host is host-a (epoch {active.epoch}); "
                                 "retry there or after takeover")
        for name in ("run.cancel", "run.pause", "run.resume"):
            assert client.request(name, run_id=run_id).outcome == "unavailable"
        assert client.request("state.prune", {"before": time.time()}).outcome == "unavailable"
    # Every operation the catalog does not mark as served by a standby is refused the same way.
    assert {name for name, op in OPERATIONS.items() if not op.served_by_standby} >= {
        "run.start", "run.cancel", "decision.answer", "checkpoint.answer", "effect.resolve", "state.prune",
        "channel.reload", "channel.recover", "interaction.submit"}
    with pytest.raises(StandbyHost, match="the active host is host-a"):
        standby.start_run(f"{FLOW}:four", {"oracle": str(oracle)})
    embedded = standby.status()
    assert embedded["role"] == "standby" and embedded["scheduler"] is None
    assert embedded["lease"]["host_id"] == "host-a"

    # A runs watch on the standby follows the active host's writes (no change notice reaches it).
    with Client(standby.paths.root) as watcher:
        events = watcher.watch("runs", timeout=10)
        first = next(events)["payload"]
        assert [r["run_id"] for r in first["runs"]] == [run_id]
        second_run = active.start_run(f"{FLOW}:four", {"oracle": str(oracle), "sleep": 0.01})["receipt"]["run_id"]
        seen = wait_for(lambda: second_run in [r["run_id"] for r in next(events)["payload"]["runs"]], 10,
                        "the standby's runs watch to show the new run")
        assert seen
        active.wait_for_run(second_run, timeout=20)

    # A clean stop releases the lease: the standby takes over on the release, not when the lease
    # (LONG_LEASE_S) would run out. How soon after the stop: bench/latency.py.
    old_epoch = active.epoch
    active.stop("handing over")
    assert standby.wait_active(TAKEOVER_WAIT_S), (
        f"the standby to take over within {TAKEOVER_WAIT_S} s of the active host releasing its lease "
        f"(the lease itself runs {LONG_LEASE_S} s)")
    assert standby.role == "active" and standby.epoch == old_epoch + 1
    with Client(standby.paths.root) as client:
        status = client.status()
        assert status["role"] == "active" and status["active"]["host_id"] == "host-b"
        receipt = client.start(f"{FLOW}:four", {"oracle": str(oracle), "sleep": 0.01})
        assert client.wait(receipt["run_id"], timeout=20)["status"] == "done"


def test_without_standby_a_second_host_still_refuses(two_hosts) -> None:
    from piwf_actors.errors import HostAlreadyRunning

    two_hosts("a")
    with pytest.raises(HostAlreadyRunning):
        two_hosts("b", standby=False)


def test_a_host_on_its_own_state_db_behaves_as_before(state_dir: Path) -> None:
    """No --database: the lock file guards the state directory; no standby role exists."""
    host = start_host(HostConfig(state_dir=state_dir, lease_s=5, max_workers=1, warm_workers=0))
    try:
        assert host.role == "active" and host.epoch == 1
        with Client(state_dir) as client:
            status = client.status()
            assert status["role"] == "active" and status["active"]["epoch"] == 1
    finally:
        host.stop()


def test_only_the_active_host_fires_schedules(two_hosts, tmp_path) -> None:
    """Both hosts load the same project; the standby fires nothing until it takes over."""
    project = tmp_path / "proj"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "tick.py").write_text(
        "from piwf_actors.workflows import compute, define_schedule, define_workflow\n"
        "tick = define_workflow(name='tick', start_at='t', edges=[],\n"
        "                       nodes={'t': compute(run=lambda ctx: {'ok': True})})\n"
        "every = define_schedule(name='every', workflow=tick, every_s=1)\n")
    active = two_hosts("a", projects=(str(project),))
    standby = two_hosts("b", projects=(str(project),))
    with Client(standby.paths.root) as client:
        assert client.request("schedule.list").receipt["running"] is False
    wait_for(lambda: len(active.list_runs()) >= 2, 15, "two fires on the active host")
    fired_before_stop = {run["run_id"] for run in active.list_runs()}
    active.stop("hand over")
    standby.wait_active(timeout=10)
    with Client(standby.paths.root) as client:
        assert client.request("schedule.list").receipt["running"] is True
        wait_for(lambda: len(client.request("run.list").receipt["runs"]) >= len(fired_before_stop) + 2, 15,
                 "the new active host to fire")
        runs = client.request("run.list").receipt["runs"]
    # The new active host's fires come after the old one's: each run was started by a schedule fire.
    assert {run["run_id"] for run in runs} >= fired_before_stop
    with Client(standby.paths.root) as client:
        assert all(client.get(run["run_id"])["schedule"] for run in runs)
