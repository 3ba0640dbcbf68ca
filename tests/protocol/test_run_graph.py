"""The graph a host stores when a run starts (`run.graph`, docs/protocol.md): every way a run starts stores
its definition's graph as data — run.start on the socket, the embedding handle, a schedule's fire, a restart
of the same or of changed code, child runs of run_workflow / map_workflow / parallel, a resource manager's
`ensure` — once per distinct definition (equal definitions share one stored copy), and what it draws is
what the workflow object draws.

In-process hosts on real state databases (PostgreSQL under $PIWF_TEST_DATABASE=postgresql)."""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import rows, wait_for

from piwf_actors.client import Client
from piwf_actors.workflows.discovery import resolve
from piwf_actors.workflows.graph import Graph, build_graph
from piwf_actors.workflows.graph_data import graph_of
from piwf_actors.workflows.graph_render import RENDERERS

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import (
        compute, define_schedule, define_workflow, edge, map_workflow, parallel, run_workflow,
    )

    leaf = define_workflow(name="leaf", start_at="x", nodes={"x": compute(run=lambda ctx: {"x": ctx.input})},
                           edges=[])
    pair = define_workflow(name="pair", start_at="one", nodes={
        "one": run_workflow(leaf), "two": compute(run=lambda ctx: 2)}, edges=[edge("one", "two")])
    parent = define_workflow(name="parent", start_at="single", nodes={
        "single": run_workflow(pair, input=lambda ctx: 1),
        "many": map_workflow(leaf, items=lambda ctx: [1, 2, 3]),
        "both": parallel({"a": leaf, "b": pair}),
    }, edges=[edge("single", "many"), edge("many", "both")])

    tick = define_schedule(name="tick", workflow=parent, every_s=86400)
''')

MANAGER = textwrap.dedent('''
    from piwf_actors.workflows import define_resource_manager

    def reconcile(ctx):
        run = ctx.workflows.ensure("leaf", ctx.spec, key="only")
        if run["status"] != "done":
            return {"result": "requeue_after", "after_s": 0.2, "status_patch": {"run_id": run["run_id"]}}
        return {"result": "done", "status_patch": {"run_id": run["run_id"], "done": True}}

    keeper = define_resource_manager("keeper", reconcile=reconcile, timeout_s=30)
''')


@pytest.fixture
def project() -> Iterator[Path]:
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="prg-", dir="/tmp"))
    (path / ".piwf" / "workflows").mkdir(parents=True)
    (path / ".piwf" / "resource-managers").mkdir(parents=True)
    (path / ".piwf" / "workflows" / "flows.py").write_text(FLOWS)
    (path / ".piwf" / "resource-managers" / "keeper.py").write_text(MANAGER)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def stored(client: Client, run_id: str) -> tuple[str, Graph]:
    """The run's stored graph and its key, read over the socket (content.read when it is not inline)."""
    answer = client.request("run.graph", run_id=run_id)
    assert answer.ok, (answer.outcome, answer.error)
    receipt = answer.receipt
    assert receipt["run_id"] == run_id and receipt["graph_sha256"], receipt
    document = client.run_graph(run_id)
    assert document is not None
    return receipt["graph_sha256"], graph_of(document)


def same_pictures(graph: Graph, workflow: Any) -> None:
    for form, render in RENDERERS.items():
        assert render(graph, None) == render(build_graph(workflow), None), form


def done(client: Client, run_id: str) -> dict[str, Any]:
    return wait_for(lambda: (view := client.get(run_id))["status"] in ("done", "failed") and view, 60,
                    f"run {run_id} to end")


def children(client: Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.request("run.list", {"parent": run_id, "limit": 100})
    return [run for run in answer.receipt["runs"] if run["run_id"] != run_id]


def test_every_way_a_run_starts_stores_the_definitions_graph(hosts: Any, state_dir: Path, project: Path) -> None:
    host = hosts(state_dir, projects=(str(project),), max_workers=4)
    workflows = {name: resolve(f"{project}/.piwf/workflows/flows.py:{name}", str(project)).workflow
                 for name in ("parent", "pair", "leaf")}
    with Client(state_dir) as client:
        by_socket = client.request("run.start", {"workflow": "parent", "project_path": str(project)}).receipt["run_id"]
        by_handle = host.start_run("parent", project_path=str(project)).run_id
        wait_for(lambda: any(item["name"] == "tick" and item["next_fire_at"]
                             for item in client.request("schedule.list").receipt["schedules"]),
                 30, "the host to record the schedule")
        fired = client.request("schedule.trigger", {"name": "tick"})
        assert fired.ok, fired.error
        by_schedule = fired.receipt["run_id"]
        for run_id in (by_socket, by_handle, by_schedule):
            assert done(client, run_id)["status"] == "done"
        key, graph = stored(client, by_socket)
        same_pictures(graph, workflows["parent"])
        # Equal definitions share one stored copy.
        assert stored(client, by_handle)[0] == stored(client, by_schedule)[0] == key
        assert len({row["graph_sha256"] for row in rows(state_dir, "SELECT graph_sha256 FROM run WHERE workflow = ?",
                                                          ("parent",))}) == 1

        # Child runs (run_workflow, map_workflow, parallel, a child's own child): each its workflow's graph.
        keys: dict[str, set[str]] = {}
        pending = [by_socket]
        while pending:
            for child in children(client, pending.pop()):
                child_key, child_graph = stored(client, child["run_id"])
                same_pictures(child_graph, workflows[child["workflow"]])
                keys.setdefault(child["workflow"], set()).add(child_key)
                pending.append(child["run_id"])
        assert {name: len(found) for name, found in keys.items()} == {"pair": 1, "leaf": 1}
        assert sum(1 for _ in rows(state_dir, "SELECT run_id FROM run WHERE graph_sha256 = ?",
                                   (next(iter(keys["leaf"])),))) >= 6

        # A restart of the same code shares the run's graph; a restart of changed code stores the new one.
        view = client.get(by_socket)
        same = host.restart_run(by_socket, expected_revision=view["revision"], same_code=True).run_id
        assert stored(client, same)[0] == key
        flows = project / ".piwf" / "workflows" / "flows.py"
        flows.write_text(FLOWS.replace('edge("many", "both")]', 'edge("many", "both"), edge("both", "extra")]')
                         .replace('"both": parallel', '"extra": compute(run=lambda ctx: 3),\n        "both": parallel'))
        changed = host.restart_run(by_socket, expected_revision=view["revision"]).run_id
        assert done(client, changed)["status"] == "done"
        changed_key, changed_graph = stored(client, changed)
        assert changed_key != key and "extra" in [node.node_id for node in changed_graph.nodes]
        same_pictures(changed_graph, resolve(f"{flows}:parent", str(project)).workflow)
        assert {child["workflow"] for child in children(client, changed)} == {"pair", "leaf"}
        for child in children(client, changed):
            assert stored(client, child["run_id"])[1].workflow == child["workflow"]


def test_a_resource_managers_run_stores_its_graph(hosts: Any, state_dir: Path, project: Path) -> None:
    hosts(state_dir, max_workers=2)
    digest = hashlib.sha256((project / ".piwf" / "resource-managers" / "keeper.py").read_bytes()).hexdigest()
    with Client(state_dir) as client:
        applied = client.request("resource.apply", {"manager": "keeper", "key": "k", "spec": {"v": 1},
                                                    "project_path": str(project), "digest": digest})
        assert applied.ok, applied.error

        def ensured() -> str | None:
            found = client.request("resource.get", {"manager": "keeper", "key": "k"}).receipt or {}
            return (found.get("status") or {}).get("run_id") if (found.get("status") or {}).get("done") else None

        run_id = wait_for(ensured, 60, "the resource's run to end")
        _, graph = stored(client, run_id)
        same_pictures(graph, resolve(f"{project}/.piwf/workflows/flows.py:leaf", str(project)).workflow)


def test_run_graph_of_an_unknown_run_is_not_found(hosts: Any, state_dir: Path) -> None:
    hosts(state_dir)
    with Client(state_dir) as client:
        answer = client.request("run.graph", run_id="run_nope")
    assert (answer.outcome, answer.error) == ("notFound", "run run_nope not found")


def test_a_graph_over_64_kib_is_read_by_its_key_and_drawn_whole(hosts: Any, state_dir: Path, project: Path) -> None:
    """A large definition's graph does not travel inline: run.graph names it, content.read reads it."""
    names = [f"step_{index:03d}_{'x' * 40}" for index in range(300)]
    body = ", ".join(f'"{name}": checkpoint(prompt="{"p" * 80}")' for name in names)
    edges = ", ".join(f'edge("{a}", "{b}")' for a, b in zip(names, names[1:], strict=False))
    big = project / "big.py"
    big.write_text("from piwf_actors.workflows import checkpoint, define_workflow, edge\n"
                   f'big = define_workflow(name="big", start_at="{names[0]}", nodes={{{body}}}, edges=[{edges}])\n')
    host = hosts(state_dir)
    run_id = host.start_run(str(big), project_path=str(project)).run_id
    with Client(state_dir) as client:
        receipt = client.request("run.graph", run_id=run_id).receipt
        assert "graph" not in receipt and receipt["graph_bytes"] > 64 * 1024, receipt
        key, graph = stored(client, run_id)
        assert key == receipt["graph_sha256"] == hashlib.sha256(client.read_content(key)).hexdigest()
    same_pictures(graph, resolve(f"{big}:big", str(project)).workflow)
