"""`piwf` on durable function runs (piwf_actors.durable), through the real command against a real host:
`list`, `show`, `logs`, `graph RUN`, `graph WORKFLOW` and `answer` see each step as a node, and the
run's output is the function's return value."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ok_json, piwf, run_view, short_dir, wait_status, wait_until

from piwf_actors import HostHandle

pytestmark = pytest.mark.timeout(120, method="thread")

FLOWS = textwrap.dedent('''
    from piwf_actors.durable import checkpoint, choice, decide, sleep, step, text_input, workflow


    @step
    def square(value: int) -> int:
        return value * value


    @step(effect=True, retries=1)
    def publish(total: int) -> dict:
        return {"published": total}


    @workflow(name="releaser")
    def releaser(count: int = 3) -> dict:
        """Square numbers, nap, ask, publish."""
        total = sum(square(value) for value in range(count))
        sleep(0.01, name="nap")
        note = checkpoint("note", title="Anything to add?")
        answer = decide("approve", title=f"Publish {total}?",
                        choices={"yes": "Publish", "no": choice("Stop", input=text_input("why", "Why not?"))})
        if answer.choice != "yes":
            return {"published": False, "why": answer.text("why")}
        return {"receipt": publish(total), "note": note}
''')


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    path = short_dir("pfn-")
    workflows = path / ".piwf" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "fns.py").write_text(FLOWS)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host(hosts: Callable[..., HostHandle], state_dir: Path) -> HostHandle:
    return hosts(state_dir, max_workers=2)


def cli(state: Path | None, project: Path, *args: str) -> str:
    result = piwf(state, *args, cwd=project, extra_env={"XDG_CONFIG_HOME": str(project / "no-config"),
                                                       "COLUMNS": "200"})
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def waiting_at(state: Path, run_id: str, node_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        view = run_view(state, run_id)
        return view if [request["node_id"] for request in view["waiting"]] == [node_id] else None

    return wait_until(check, 30, f"run {run_id} to wait at {node_id}")


def test_a_function_workflow_is_listed_as_one_with_the_steps_its_code_names(project: Path) -> None:
    lines = cli(None, project, "graph", "releaser").splitlines()
    assert lines[0].startswith("workflow releaser  function workflow"), lines
    assert {line[4:] for line in lines[1:]} == {"square  compute: step", "publish  action: effect step · retries 1"}
    document = json.loads(cli(None, project, "graph", "releaser", "--json"))
    assert document["graph"]["function"] is True
    workflows = cli(None, project, "workflows")
    assert "│ releaser │" in workflows and "{count?: integer} | null" in workflows  # its input: the parameters


def test_show_logs_graph_and_answer_see_a_function_runs_steps_as_nodes(
        host: HostHandle, state_dir: Path, project: Path) -> None:
    run_id = str(ok_json(piwf(state_dir, "start", "releaser", "--input", '{"count": 3}', "--json",
                              cwd=project))["run_id"])
    note = waiting_at(state_dir, run_id, "note")["waiting"][0]
    cli(state_dir, project, "answer", note["request_id"], "--value", '"ship it"')
    decision = waiting_at(state_dir, run_id, "approve")["waiting"][0]
    assert decision["kind"] == "decision"

    listed = json.loads(cli(state_dir, project, "list", "--json"))["runs"]
    assert [(run["run_id"], run["workflow"], run["status"], run["current_node"]) for run in listed] == [
        (run_id, "releaser", "parked", "approve")]
    shown = cli(state_dir, project, "show", run_id)
    assert "waiting on    approve (decision)" in shown
    for node_id in ("square", "square#2", "square#3", "nap", "note", "approve"):
        assert f"│ {node_id} " in shown, (node_id, shown)

    # The run's picture: the steps it took, each with its kind; the decision with its wait.
    lines = cli(state_dir, project, "graph", run_id).splitlines()
    assert lines[0] == f"run {run_id}  releaser  (function)  parked (waiting)"
    assert lines[1].startswith("├── square  compute: step   ✓ succeeded  0"), lines
    assert lines[2].startswith("├── square#2  compute: step   ✓ succeeded  1"), lines
    assert lines[5].startswith("├── note  checkpoint   ✓ succeeded  \"ship it\""), lines
    approve = next(line for line in lines if line.startswith("└── approve"))
    assert approve.startswith("└── approve  human_decision   ⏳ waiting") and approve.endswith("◀ here"), approve
    assert lines[lines.index(approve) + 1] == "    └── ⏳ waiting for an answer (decision, no deadline)"
    document = json.loads(cli(state_dir, project, "graph", run_id, "--json"))
    assert document["run"]["current"] == "approve"
    kinds = {node["node_id"]: node["kind"] for node in document["graph"]["nodes"]}
    assert kinds == {"square": "compute", "square#2": "compute", "square#3": "compute", "nap": "sleep",
                     "note": "checkpoint", "approve": "human_decision"}

    cli(state_dir, project, "answer", decision["request_id"], "yes")
    done = wait_status(state_dir, run_id, ("done", "failed"))
    assert done["status"] == "done" and done["output"] == {"receipt": {"published": 5}, "note": "ship it"}, done
    shown = cli(state_dir, project, "show", run_id)
    assert 'output    {"note":"ship it","receipt":{"published":5}}' in shown, shown
    assert "│ publish  " in shown and "│ return   " in shown
    # `piwf logs RUN`: the node that ran last, the return, whose output is the run's.
    logs = cli(state_dir, project, "logs", run_id)
    assert logs.splitlines()[0] == "node return (succeeded)"
    assert json.loads(logs.split("\n", 1)[1]) == done["output"]
    assert json.loads(cli(state_dir, project, "logs", run_id, "publish").split("\n", 1)[1]) == {"published": 5}
    assert json.loads(cli(state_dir, project, "logs", run_id, "square#3").split("\n", 1)[1]) == 4
    lines = cli(state_dir, project, "graph", run_id).splitlines()
    assert lines[-2].startswith("├── publish  action: effect step · retries 1   ✓ succeeded"), lines
    assert lines[-1].startswith("└── return   ✓ succeeded") and lines[-1].endswith("◀ ended here"), lines
    approve = next(line for line in lines if line.startswith("├── approve"))
    assert approve.startswith("├── approve  human_decision   ✓ succeeded  choice yes"), approve
