"""`piwf start`'s input and project arguments say what they mean or are refused: a key given both as
KEY=VALUE and in --input (or twice) is an error, not one of the two picked silently; a --project that
is not a directory is an error, not a run whose nodes then fail in a directory that does not exist."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ok_json, piwf, short_dir

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow

    echo = define_workflow(name="echo", start_at="a", nodes={"a": compute(run=lambda ctx: dict(ctx.input))}, edges=[])
''')


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("psa-")
    project = short_dir("psa-p-")
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "echo.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        yield {"state": state, "project": project, "host": host}
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(project, ignore_errors=True)


def run_count(state: Path) -> int:
    with Client(state) as client:
        return len(client.request("run.list", {"limit": 500}).receipt["runs"])


def error_line(stderr: str) -> str:
    """The one line that says what is wrong (argparse prints the usage above it)."""
    lines = [line for line in stderr.splitlines() if line.startswith("piwf")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(("args", "message"), [
    (("n=5", "--input", '{"n": 3}'), "input key 'n' is given twice (n=5 and --input's n=3); give it once"),
    (("n=5", "n=6"), "input key 'n' is given twice (n=5 and n=6); give it once"),
    (("n=5", "--input", '{"n": 5}'), "input key 'n' is given twice (n=5 and --input's n=5); give it once"),
])
def test_a_key_given_twice_is_an_error_and_starts_nothing(env: dict[str, Any], args: tuple[str, ...],
                                                          message: str) -> None:
    before = run_count(env["state"])
    result = piwf(env["state"], "start", "echo", *args, cwd=env["project"])
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert error_line(result.stderr).endswith(message), result.stderr
    assert run_count(env["state"]) == before


def test_keys_given_once_each_are_merged(env: dict[str, Any]) -> None:
    done = ok_json(piwf(env["state"], "start", "echo", "b=2", "--input", '{"a": 1}', "--wait", "--json",
                        cwd=env["project"]))
    assert done["status"] == "done" and done["output"] == {"a": 1, "b": 2}


@pytest.mark.parametrize("command", [("start", "FILE"), ("start", "echo"), ("workflows",), ("graph", "echo")])
def test_a_project_that_is_not_a_directory_is_an_error(env: dict[str, Any], tmp_path: Path,
                                                       command: tuple[str, ...]) -> None:
    """A workflow named by its file was started with any --project; its nodes would then run there."""
    command = tuple(str(env["project"] / ".piwf" / "workflows" / "echo.py:echo") if word == "FILE" else word
                    for word in command)
    before = run_count(env["state"])
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    for project in ("/nonexistent/piwf-project", str(a_file)):
        result = piwf(env["state"], *command, "--project", project, cwd=env["project"])
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert error_line(result.stderr).endswith(f"--project: {project} is not a directory"), result.stderr
    assert run_count(env["state"]) == before
    # A project that is a directory works, relative to where piwf runs.
    relative = piwf(env["state"], *command, "--project", ".", "--json", cwd=env["project"])
    assert relative.returncode == 0, relative.stderr
    json.loads(relative.stdout)
