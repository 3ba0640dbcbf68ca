"""Durable function workflows (piwf_actors.durable) under the host's run tools, on real hosts with real
workers: restart with the current or the stored code, from the start or from a step; priorities;
`limit()`; a schedule and a resource manager starting a function workflow. Steps append a line per
execution to an oracle file outside the database, so each test counts what actually ran."""

from __future__ import annotations

import collections
import hashlib
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from testsupport import wait_for

from piwf_actors import HostHandle
from piwf_actors.client import Client
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.schedule_queries import schedule_rows
from piwf_actors.testing.kit import Piwf

pytestmark = pytest.mark.timeout(120, method="thread")

FLOWS = textwrap.dedent('''
    import os
    import time

    from piwf_actors.durable import decide, step, workflow
    from piwf_actors.workflows import define_schedule, limit


    def record(oracle: str, line: str) -> None:
        with open(oracle, "a", encoding="utf-8") as out:
            out.write(line + "\\n")


    @step
    def load(oracle: str) -> int:
        record(oracle, "load")
        return 1


    @step(effect=True)
    def charge(oracle: str, n: int) -> int:
        record(oracle, "charge")
        return n + 1


    @step
    def report(oracle: str, n: int) -> dict:
        record(oracle, "report")
        return {"n": n, "version": 1}


    @workflow(name="staged_fn")
    def staged_fn(oracle: str) -> dict:
        return report(oracle, charge(oracle, load(oracle)))


    @step
    def hold(release: str) -> bool:
        deadline = time.monotonic() + 60  # the test creates the file; a lost test ends the step anyway
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
        return True


    @workflow(name="holder")
    def holder(release: str) -> bool:
        return hold(release)


    @step
    def note(oracle: str, line: str) -> str:
        record(oracle, line)
        return line


    @workflow(name="noted")
    def noted(oracle: str, line: str) -> str:
        return note(oracle, line)


    @workflow(name="deploy_fn", concurrency=limit(1, key=lambda run_input: run_input["service"]))
    def deploy_fn(service: str) -> str:
        return decide("approve", title=f"Deploy {service}?", choices={"yes": "Yes"}).choice + " " + service


    @workflow(name="tick_fn")
    def tick_fn(at: float) -> dict:
        return {"fired_at": at}


    hourly = define_schedule("hourly_fn", tick_fn, every_s=3600, catch_up="latest",
                             input=lambda fire: {"at": fire.timestamp()})
''')


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "fns.py").write_text(FLOWS)
    return root


def executions(oracle: Path) -> collections.Counter[str]:
    return collections.Counter(oracle.read_text(encoding="utf-8").splitlines() if oracle.exists() else [])


def test_restart_with_the_current_or_the_stored_code_from_the_start_or_from_a_step(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, tmp_path: Path) -> None:
    host = hosts(state_dir)
    oracle = tmp_path / "oracle"
    first = host.wait_for_run(host.start_run("staged_fn", {"oracle": str(oracle)}, project_path=str(project)).run_id)
    assert first.status == "done" and first.output == {"n": 2, "version": 1}, first
    # The file changes after the run: a restart runs the current code unless asked for the stored one.
    source = project / ".piwf" / "workflows" / "fns.py"
    source.write_text(source.read_text().replace('"version": 1', '"version": 2'))

    stored = host.restart_run(first.run_id, expected_revision=first.revision, same_code=True)
    assert stored.digest_changed is False
    assert host.wait_for_run(stored.run_id).output == {"n": 2, "version": 1}
    current = host.restart_run(first.run_id, expected_revision=first.revision)
    assert current.digest_changed is True
    assert host.wait_for_run(current.run_id).output == {"n": 2, "version": 2}
    assert executions(oracle) == {"load": 3, "charge": 3, "report": 3}  # from the start: everything ran again

    # From a step: the results before it (the effect among them) are copied, the function runs on from there.
    from_step = host.restart_run(first.run_id, expected_revision=first.revision, from_node="report")
    assert (from_step.digest_changed, from_step.from_node) == (True, "report")
    view = host.wait_for_run(from_step.run_id)
    assert view.status == "done" and view.output == {"n": 2, "version": 2}, view
    nodes = {node.node_id: node for node in view.nodes}
    assert list(nodes) == ["load", "charge", "report", "return"]
    assert nodes["load"].extra.get("copied_from") and nodes["charge"].extra.get("copied_from")
    assert executions(oracle) == {"load": 3, "charge": 3, "report": 4}, "a copied step ran again"
    stored_from = host.restart_run(first.run_id, expected_revision=first.revision, from_node="charge", same_code=True)
    assert host.wait_for_run(stored_from.run_id).output == {"n": 2, "version": 1}
    assert executions(oracle) == {"load": 3, "charge": 4, "report": 5}


def test_a_higher_priority_function_run_starts_first(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, tmp_path: Path) -> None:
    host = hosts(state_dir, max_workers=1, warm_workers=0)
    release = tmp_path / "release"
    oracle = tmp_path / "oracle"
    held = host.start_run("holder", {"release": str(release)}, project_path=str(project)).run_id
    wait_for(lambda: host.get_run(held).status == "running", 30, "the held run to take the only worker")
    low = [host.start_run("noted", {"oracle": str(oracle), "line": f"low {n}"}, project_path=str(project)).run_id
           for n in range(3)]
    high = host.start_run("noted", {"oracle": str(oracle), "line": "high"}, project_path=str(project),
                          priority=10).run_id
    assert host.get_run(high).extra["priority"] == 10
    release.touch()
    for run_id in (held, high, *low):
        assert host.wait_for_run(run_id).status == "done"
    assert oracle.read_text().splitlines() == ["high", "low 0", "low 1", "low 2"]


def test_a_limit_holds_a_second_function_run_of_the_same_key_until_the_first_ends(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path) -> None:
    host = hosts(state_dir, max_workers=2)
    first = host.start_run("deploy_fn", {"service": "api"}, project_path=str(project)).run_id
    request = wait_for(lambda: next(iter(host.pending_interactions()), None), 30, "the first run's decision")
    second = host.start_run("deploy_fn", {"service": "api"}, project_path=str(project)).run_id
    other = host.start_run("deploy_fn", {"service": "web"}, project_path=str(project)).run_id
    wait_for(lambda: len(host.pending_interactions()) == 2, 30, "the other key's run to ask too")
    view = host.get_run(second)
    assert view.status == "queued", view  # the parked first run holds the slot of deploy_fn[api]
    assert view.extra["queue_reason"] == "waiting for a concurrency slot of deploy_fn[api] (1 of 1 in use)"
    assert host.get_run(first).extra["concurrency_key"] == "deploy_fn[api]"
    host.answer_decision(request.request_id, "yes")
    assert host.wait_for_run(first).output == "yes api"
    later = wait_for(lambda: next((r for r in host.pending_interactions() if r.run_id == second), None), 30,
                     "the second run to start and ask")
    host.answer_decision(later.request_id, "yes")
    assert host.wait_for_run(second).output == "yes api"
    host.cancel_run(other)


def test_a_schedule_naming_a_function_workflow_starts_its_runs(project: Path) -> None:
    with Piwf(project=project) as piwf:
        def row() -> dict[str, Any] | None:
            reader = StoreReader(piwf.host.paths.database)
            try:
                return schedule_rows(reader).get("hourly_fn")
            finally:
                reader.close()

        first = wait_for(lambda: (found := row()) and found["next_fire_at"], piwf.timeout, "the schedule's first fire")
        piwf.advance_to(first)
        [run] = wait_for(lambda: piwf.host.list_runs(), piwf.timeout, "the scheduled run")
        view = piwf.wait(run.run_id)
        assert (view.workflow, view.status, view.output) == ("tick_fn", "done", {"fired_at": first}), view
        assert view.extra["schedule"]["name"] == "hourly_fn"


MANAGER = textwrap.dedent('''
    from piwf_actors.workflows import define_resource_manager


    def reconcile(ctx):
        run = ctx.workflows.ensure("noted", {"oracle": ctx.spec["oracle"], "line": ctx.key}, key="note")
        if run["status"] != "done":
            return {"result": "requeue_after", "after_s": 0.1, "status_patch": {"phase": run["status"]}}
        return {"result": "done", "status_patch": {"phase": "noted", "output": run["output"]}}


    noter = define_resource_manager("noter", reconcile=reconcile, timeout_s=30)
''')


def test_a_resource_manager_starts_a_function_workflow(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, tmp_path: Path) -> None:
    managers = project / ".piwf" / "resource-managers"
    managers.mkdir(parents=True)
    (managers / "noter.py").write_text(MANAGER)
    oracle = tmp_path / "oracle"
    hosts(state_dir)
    with Client(state_dir) as client:
        applied = client.request("resource.apply", {
            "manager": "noter", "key": "docs", "spec": {"oracle": str(oracle)}, "project_path": str(project),
            "digest": hashlib.sha256((managers / "noter.py").read_bytes()).hexdigest()})
        assert applied.ok, applied.error

        def status() -> dict[str, Any] | None:
            answer = client.request("resource.get", {"manager": "noter", "key": "docs"})
            found = answer.receipt.get("status") if answer.ok else None
            return found if isinstance(found, dict) and found.get("phase") == "noted" else None

        assert wait_for(status, 60, "the resource to be noted") == {"phase": "noted", "output": "docs"}
    assert executions(oracle) == {"docs": 1}
