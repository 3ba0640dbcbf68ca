"""examples/embed_app.py, run as a program: a pykka application with its own actor that starts
release runs, is told their events through a subscription, answers their decisions, and exits 0
with nothing left running. And docs/embedding.md's snippet, run as written against the
`nightly` workflow of docs/workflows.md: it answers the run's checkpoint and ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_readme_python import (
    data_server,  # noqa: F401  (a fixture: the docs' nightly's data server)
    python_block,
    write_workflow,
)
from testsupport import host_state_row

EMBED_APP = Path(__file__).resolve().parents[2] / "examples" / "embed_app.py"


def run_example(*args: str) -> list[str]:
    try:
        done = subprocess.run([sys.executable, str(EMBED_APP), *args], capture_output=True, text=True, timeout=90,
                              cwd="/", stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:  # subprocess.run has already killed the child
        pytest.fail(f"embed_app.py did not finish in 90 s:\n{exc.stdout!r}\n{exc.stderr!r}")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def told(lines: list[str], version: str) -> list[str]:
    """What the desk printed about one release, without the label."""
    prefix = f"[{version}] "
    return [line[len(prefix):] for line in lines if line.startswith(prefix)]


def assert_followed(lines: list[str], version: str, choice: str) -> None:
    about = told(lines, version)
    # The desk's own answer is printed when its clerk is done, so only its place after the
    # park is fixed; every other line is a run event, told in the run's order.
    answer = f"answered 'Ship {version}?': {choice}"
    assert answer in about and about.index(answer) > about.index("parked: waiting"), about
    assert [line for line in about if line != answer] == [
        "started (release)", "node test: ok", "parked: waiting", "resumed (release)", "node approve: ok",
        f"node {choice}: ok", "finished: done"]


@pytest.mark.parametrize("use_state_dir", [True, False], ids=["state-dir", "temporary-dir"])
def test_embed_app_follows_its_runs_answers_their_decisions_and_exits_cleanly(state_dir, use_state_dir) -> None:
    lines = run_example(*(["--state-dir", str(state_dir)] if use_state_dir else []))
    assert lines[0].startswith("host started at epoch 1 on ")
    assert_followed(lines, "1.2.0", "ship")
    assert_followed(lines, "2.0.0-rc1", "fix")
    assert 'release 1.2.0: done, output {"shipped": "1.2.0"}' in lines
    assert any(line.startswith("release 2.0.0-rc1: done, output ") and "finish the changelog for 2.0.0-rc1" in line
               for line in lines), lines
    assert lines[-4:] == ["host stopped: application finished", "subscription ended: True",
                          "child processes left: none", "threads left: none"]
    if use_state_dir:
        assert lines[0] == f"host started at epoch 1 on {state_dir}"
        assert host_state_row(state_dir)["host_id"] is None  # the app's host released its lease
    else:
        assert not Path(lines[0].rsplit(" on ", 1)[1]).exists()  # the temporary directory is gone


def test_embed_app_with_one_release(state_dir) -> None:
    lines = run_example("--state-dir", str(state_dir), "--versions", "3.1.4")
    assert_followed(lines, "3.1.4", "ship")
    assert [line for line in lines if line.startswith("release ")] == [
        'release 3.1.4: done, output {"shipped": "3.1.4"}']


# --- docs/embedding.md's snippet, against docs/workflows.md's own `nightly` (issue 22, edge 1) ---------


def test_the_readme_embedding_snippet_runs_the_readme_nightly_to_its_end(state_dir: Path, tmp_path: Path,
                                                                         data_server: str) -> None:  # noqa: F811
    """As written: the nightly workflow of "Writing workflows" (its `/tmp/` files and its server moved to
    the test's), and the embedding program of "Embedding the host" run from that project. The run stops
    at its `confirm` checkpoint; the program must answer it, not wait through it."""
    files = tmp_path / "files"
    files.mkdir()
    project = tmp_path / "project"
    write_workflow(project, "nightly", python_block('name="nightly"').replace("http://127.0.0.1:8000", data_server)
                   .replace("/tmp/", f"{files}/"))
    program = tmp_path / "app.py"
    embedding = python_block("host.answer_checkpoint(request.request_id")  # docs/embedding.md's program
    program.write_text(embedding.replace("/var/lib/myapp/piwf", str(state_dir)))
    try:
        done = subprocess.run([sys.executable, str(program)], cwd=project, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the embedding snippet did not finish: {exc.stdout!r} {exc.stderr!r}")
    assert done.returncode == 0, done.stderr
    *answered, last = done.stdout.splitlines()
    assert answered == ["answering: Archive done; anything to note?"], done.stdout
    assert last == ("done {'note': 'archived by myapp'} "
                    "['get/download', 'get/ok', 'count', 'check', 'big', 'confirm']"), done.stdout
    assert (files / "data-archived.csv").read_text() == (files / "data.csv").read_text()
    assert not (state_dir / "host.sock").exists()
