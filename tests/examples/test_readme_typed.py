"""docs/workflows.md's "Typed inputs and outputs" example runs as written: its workflow file in a project, its
console transcript against a test host (the refusal printed line for line), and the run it starts."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from piwf_actors import HostConfig, HostHandle, start_host

REPO = Path(__file__).resolve().parents[2]


def short_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # AF_UNIX socket paths are short


def piwf(state: Path, words: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`bin/piwf WORDS --state-dir STATE`, run in `cwd` as a reader of the page would."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIWF_STATE_DIR", "COLUMNS")}
    return subprocess.run([str(REPO / "bin" / "piwf"), *words, "--state-dir", str(state)], capture_output=True,
                          text=True, timeout=60, env=env, cwd=cwd, stdin=subprocess.DEVNULL)


def section() -> str:
    text = (REPO / "docs" / "workflows.md").read_text()
    start = text.index("## Typed inputs and outputs\n")
    return text[start:text.index("\n## ", start)]


@pytest.fixture
def setup() -> Iterator[tuple[Path, Path, HostHandle]]:
    project, state = short_dir("prt-"), short_dir("prt-s-")
    [source] = re.findall(r"```python\n(.*?)```", section(), flags=re.S)
    folder = project / ".piwf" / "workflows"
    folder.mkdir(parents=True)
    (folder / "rollout.py").write_text(source)
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        yield project, state, host
    finally:
        host.stop("test done")
        shutil.rmtree(project, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def test_the_typed_example_refuses_as_shown_and_runs_a_valid_input(setup: tuple[Path, Path, HostHandle]) -> None:
    project, state, host = setup
    [console] = re.findall(r"```console\n(.*?)```", section(), flags=re.S)
    steps: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    assert len(steps) == 2
    (refused_command, refused_lines), (start_command, start_lines) = steps

    refused = piwf(state, shlex.split(refused_command)[1:], cwd=project)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == refused_lines
    assert host.list_runs() == []

    started = piwf(state, shlex.split(start_command)[1:], cwd=project)
    assert started.returncode == 0, started.stderr
    [shown] = start_lines
    assert re.fullmatch(r"started run_[0-9a-z]+ \(queued\)", shown)
    run_id = re.fullmatch(r"started (run_[0-9a-z]+) \(\w+\)", started.stdout.strip())
    assert run_id is not None, started.stdout
    done = host.wait_for_run(run_id.group(1), timeout=60)
    assert done.status == "done", done
    assert done.output == "v1.4: 5 steps"


def test_the_typed_example_fails_a_node_whose_output_lacks_its_shape(setup: tuple[Path, Path, HostHandle]) -> None:
    project, _state, host = setup
    flows = project / ".piwf" / "workflows" / "rollout.py"
    # The page's plan node, returning its step count as text: the worker refuses that output.
    flows.write_text(flows.read_text().replace('{"steps": 2 if', '{"steps": "2" if'))
    run_id = host.start_run("rollout", {"version": "v2", "dry_run": True}, project_path=str(project)).run_id
    failed = host.wait_for_run(run_id, timeout=60)
    assert failed.status == "failed", failed
    [plan] = [node for node in failed.nodes if node.node_id == "plan"]
    assert plan.error is not None and plan.error.code == "output_invalid"
    assert plan.error.message == "output.steps: expected integer, got string"
