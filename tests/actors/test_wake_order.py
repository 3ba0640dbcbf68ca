"""Sleeps that come due while no host runs wake when the next host starts, before the scheduler takes
a fresh run, and leave the queue in wake order (they are queued among the woken, at their wake time)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from testsupport import wait_for

from piwf_actors import HostHandle
from piwf_actors.actors.writer import start_writer
from piwf_actors.paths import StatePaths
from piwf_actors.workflows import resolve

FLOWS = '''
import time
from piwf_actors.workflows import compute, define_workflow, edge, sleep

sleeper = define_workflow(name="sleeper", start_at="nap", nodes={
    "nap": sleep(until=lambda ctx: ctx.input["at"]),
    "up": compute(run=lambda ctx: {"woke": time.time()}),
}, edges=[edge("nap", "up")])

busy = define_workflow(name="busy", start_at="work", nodes={
    "work": compute(run=lambda ctx: time.sleep(ctx.input["s"]) or {}),
}, edges=[])
'''


def _claims(host: HostHandle, run_id: str) -> list[float]:
    return [event.created_at for event in host.run_events(run_id) if event.kind == "run_claimed"]


def test_sleeps_that_came_due_while_no_host_ran_wake_first_and_in_wake_order(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "flows.py").write_text(FLOWS)
    host = hosts(state_dir, max_workers=1)
    now = time.time()
    # Three sleepers, due in an order that is not the order they were started in.
    due = {"late": now + 3.4, "early": now + 3.0, "middle": now + 3.2}
    sleepers = {name: host.start_run("sleeper", {"at": at}, project_path=str(project)).run_id
                for name, at in due.items()}
    for run_id in sleepers.values():
        wait_for(lambda run_id=run_id: host.get_run(run_id).waits, 30, f"{run_id} sleeps")
    template = host.get_run(sleepers["early"])
    host.stop("test: no host while the sleeps come due")
    # The scenario: the host was gone before the first sleep came due (else it woke that one itself).
    assert time.time() < due["early"], f"the host stopped {time.time() - due['early']:.1f} s after the first wake-up"
    # Fresh runs queued while no host runs (as a host that stopped right after accepting them would
    # leave them): the next host must not take them before the sleepers that came due.
    fresh = [f"run_fresh{n}" for n in range(3)]
    writer = start_writer(StatePaths.resolve(state_dir).database)  # (PostgreSQL's under make test-pg)
    try:
        identity = {"host_id": "t", "token_hash": "t" * 64, "pid": os.getpid(), "process_start_identity": "1"}
        epoch = writer.call("lease.acquire", {**identity, "lease_s": 60})["epoch"]
        writer.advance_epoch(epoch)
        busy = resolve("busy", str(project))
        for run_id in fresh:
            writer.call("run.create", {"run_id": run_id, "workflow": "busy", "input": {"s": 0},
                                       "workflow_path": busy.path, "workflow_attr": busy.attr,
                                       "definition_digest": busy.workflow.digest, "source": busy.source,
                                       "project_path": template.project_path})
        writer.call("lease.release", {**identity, "epoch": epoch})
    finally:
        writer.ref.stop()
    wait_for(lambda: time.time() > due["late"] + 0.3, 30, "every sleep to come due while no host runs")

    host = hosts(state_dir, max_workers=1)
    for run_id in [*sleepers.values(), *fresh]:
        wait_for(lambda run_id=run_id: host.get_run(run_id).finished, 60, f"{run_id} ends")
    woke = {name: _claims(host, run_id)[-1] for name, run_id in sleepers.items()}
    assert sorted(woke, key=woke.get) == ["early", "middle", "late"]
    assert max(woke.values()) < min(_claims(host, run_id)[0] for run_id in fresh)
    for name, run_id in sleepers.items():
        view = host.get_run(run_id)
        assert view.node("nap").output == {"slept_until": due[name]}
        assert len(_claims(host, run_id)) == 2  # asleep once, woken once
