"""A run's callbacks and commands run in its project directory (where `piwf start` ran, or
`--project`), so `pytest -q` or `open("data.csv")` in a workflow mean the project's, not
wherever the host happened to be started."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from piwf_actors import HostHandle

WORKFLOW = """
import os

from piwf_actors.workflows import compute, define_workflow, edge, shell

where = define_workflow(
    name="where",
    start_at="compute",
    nodes={
        "compute": compute(run=lambda ctx: {"cwd": os.getcwd()}),
        "shell": shell(command=["pwd"]),
        "elsewhere": shell(command=["pwd"], cwd="/"),
    },
    edges=[edge("compute", "shell"), edge("shell", "elsewhere")],
)
"""


def test_nodes_run_in_the_run_project_directory_unless_a_shell_node_names_its_cwd(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = (tmp_path / "project").resolve()
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "where.py").write_text(WORKFLOW)
    host = hosts(state_dir)

    run_id = host.start_run("where", project_path=str(project)).run_id
    done = host.wait_for_run(run_id, timeout=60)
    assert done.status == "done", done
    outputs = {node.node_id: node.output for node in done.nodes}
    assert outputs["compute"] == {"cwd": str(project)}
    assert outputs["shell"]["stdout"].strip() == str(project)
    assert outputs["elsewhere"]["stdout"].strip() == "/"
