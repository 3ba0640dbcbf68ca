"""Concurrency keys on a real (embedded) host with real workers: a key function that changes its input
changes nothing a run stores or sees (its own input, a child's), and a key that is not a JSON-like value
refuses the start instead of giving every run a key of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from piwf_actors import HostHandle
from piwf_actors.errors import Rejected

FLOWS = '''
from piwf_actors.workflows import compute, define_workflow, edge, limit, run_workflow


def _meddling_key(run_input):
    run_input.setdefault("added", "by the key")
    run_input.pop("drop", None)
    run_input["nested"]["list"].append(99)
    return run_input["cluster"]


child = define_workflow(name="child", start_at="a", concurrency=limit(1, key=_meddling_key),
                        nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[])

parent = define_workflow(name="parent", start_at="spawn", concurrency=limit(1, key=_meddling_key), nodes={
    "spawn": run_workflow(child),
    "after": compute(run=lambda ctx: {"input": ctx.input, "child": ctx.outputs["spawn"]}),
}, edges=[edge("spawn", "after")])

objects = define_workflow(name="objects", start_at="a", concurrency=limit(1, key=lambda run_input: object()),
                          nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
'''

SENT = {"cluster": "eu", "drop": 1, "nested": {"list": [1]}}


def _project(tmp_path: Path) -> str:
    flows = tmp_path / "project" / ".piwf" / "workflows"
    flows.mkdir(parents=True)
    (flows / "flows.py").write_text(FLOWS)
    return str(tmp_path / "project")


def test_a_key_function_that_changes_its_input_changes_nothing_a_run_sees(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    host = hosts(state_dir)
    receipt = host.start_run("parent", {"cluster": "eu", "drop": 1, "nested": {"list": [1]}},
                             project_path=_project(tmp_path))
    done = host.wait_for_run(receipt.run_id, timeout=60)
    assert done.status == "done", done
    assert done.input == SENT
    assert done.output == {"input": SENT, "child": SENT}  # the parent's ctx.input, and the child's
    (child,) = host.list_children(receipt.run_id)
    assert host.get_run(child.run_id).input == SENT
    assert done.extra["concurrency_key"] == "parent[eu]"
    assert host.get_run(child.run_id).extra["concurrency_key"] == "child[eu]"


def test_a_key_that_is_an_object_refuses_the_start(hosts: Callable[..., HostHandle], state_dir: Path,
                                                   tmp_path: Path) -> None:
    host = hosts(state_dir)
    project = _project(tmp_path)
    for _ in range(2):  # resolved, then cached: refused alike
        with pytest.raises(Rejected, match=r"^workflow 'objects': its concurrency key must be JSON-like .*got an? "
                                           r"object$"):
            host.start_run("objects", project_path=project)
    assert host.list_runs() == []
