"""`timeout_s=None` means no timeout on every node kind that takes `timeout_s`, as the README says:
compute, action and shell refused it ("timeout_s must be a positive number of seconds, got None")
while the waiting kinds took it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostHandle
from piwf_actors.workflows import (
    action,
    agent,
    checkpoint,
    choice,
    compute,
    define_workflow,
    human_decision,
    shell,
    wait_message,
)
from piwf_actors.workflows.graph import build_graph

NODES: dict[str, Callable[[], Any]] = {
    "compute": lambda: compute(run=lambda ctx: 1, timeout_s=None),
    "action": lambda: action(run=lambda ctx: 1, timeout_s=None),
    "shell": lambda: shell(["true"], timeout_s=None),
    "checkpoint": lambda: checkpoint(prompt="?", timeout_s=None),
    "agent": lambda: agent(prompt="?", timeout_s=None),
    "human_decision": lambda: human_decision(audience="ops", choices={"a": choice(label="A")},
                                             request={"title": "?"}, timeout_s=None),
    "wait_message": lambda: wait_message("go", timeout_s=None),
}


@pytest.mark.parametrize("kind", sorted(NODES))
def test_none_is_no_timeout_for_every_node_kind_that_takes_one(kind: str) -> None:
    workflow = define_workflow(name="w", start_at="n", nodes={"n": NODES[kind]()}, edges=[])
    assert workflow.nodes["n"].timeout_s is None
    assert "timeout" not in build_graph(workflow).nodes[0].summary


FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import action, compute, define_workflow, edge, shell

    untimed = define_workflow(name="untimed", start_at="c", nodes={
        "c": compute(run=lambda ctx: {"c": 1}, timeout_s=None),
        "a": action(run=lambda ctx: {"a": 1}, timeout_s=None),
        "s": shell(["sh", "-c", "echo ran"], timeout_s=None),
    }, edges=[edge("c", "a"), edge("a", "s")])
''')


def test_compute_action_and_shell_without_a_timeout_run_to_their_end(hosts: Callable[..., HostHandle],
                                                                      state_dir: Path, tmp_path: Path) -> None:
    flows = tmp_path / "untimed.py"
    flows.write_text(FLOWS)
    host = hosts(state_dir)
    run_id = host.start_run(f"{flows}:untimed", {}).run_id
    view = host.wait_for_run(run_id, timeout=60)
    assert view.status == "done", view
    outputs = {node.node_id: node.output for node in view.nodes}
    assert outputs["c"] == {"c": 1} and outputs["a"] == {"a": 1} and outputs["s"]["stdout"] == "ran\n"
