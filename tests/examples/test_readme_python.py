"""The README's and docs' Python examples run as written.

Each ```python block is taken from README.md or docs/*.md at test time, so an edit that breaks one fails here.
What a block cannot do on a test machine is replaced, and only that: the nightly example's
`/tmp/` files and its `127.0.0.1:8000` server become a temp directory and a server on a free
port; the embedding example's `/var/lib/myapp/piwf` becomes a temp state directory; the agent
example gets the `summarize` function its reader is meant to write.
"""

from __future__ import annotations

import http.server
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostHandle

REPO = Path(__file__).resolve().parents[2]


#: Where the examples live: the front door and the reference it links to.
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))


def python_block(containing: str) -> str:
    """The one python block of the README or docs/ that contains `containing`."""
    blocks = [block for document in DOCUMENTS
              for block in re.findall(r"```python\n(.*?)```", document.read_text(), flags=re.S)]
    found = [block for block in blocks if containing in block]
    assert len(found) == 1, f"{len(found)} README/docs python blocks contain {containing!r}"
    return found[0]


def write_workflow(project: Path, name: str, source: str) -> None:
    folder = project / ".piwf" / "workflows"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(source)


@pytest.fixture
def data_server(tmp_path: Path) -> Iterator[str]:
    """A loopback HTTP server serving tmp_path/www/data.csv; yields its base URL."""
    www = tmp_path / "www"
    www.mkdir()
    (www / "data.csv").write_text("day,value\n1,10\n2,20\n3,30\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(www), **kwargs)

        def log_message(self, *_args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_nightly_example_downloads_counts_archives_and_waits_for_its_checkpoint(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path, data_server: str) -> None:
    files = tmp_path / "files"
    files.mkdir()
    source = (python_block("name=\"nightly\"")
              .replace("http://127.0.0.1:8000", data_server)
              .replace("/tmp/", f"{files}/"))
    project = tmp_path / "project"
    write_workflow(project, "nightly", source)
    host = hosts(state_dir)

    run_id = host.start_run("nightly", {}, project_path=str(project)).run_id
    parked = host.wait_for_run(run_id, statuses=("parked", "failed"), timeout=60)
    assert parked.status == "parked", parked
    # The include's nodes are stored under the include's id; three data rows plus the header.
    outputs = {node.node_id: node.output for node in parked.nodes}
    assert set(outputs) >= {"get/download", "get/ok", "count", "check", "big"}
    assert outputs["check"] == {"rows": 4}
    assert outputs["big"] == {"archived": 4}
    assert (files / "data-archived.csv").read_text() == (files / "data.csv").read_text()

    [checkpoint] = host.pending_interactions()
    assert checkpoint.kind == "checkpoint"
    host.answer_checkpoint(checkpoint.request_id, {"note": "all fine"})
    done = host.wait_for_run(run_id, timeout=60)
    assert done.status == "done", done
    assert {node.node_id: node.output for node in done.nodes}["confirm"] == {"note": "all fine"}


def test_release_example_waits_for_its_decision_and_ships(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "release", python_block("name=\"release\""))
    # The example's first node is `pytest -q` in the project: give it a test to pass.
    (project / "test_smoke.py").write_text("def test_smoke():\n    assert True\n")
    host = hosts(state_dir)

    run_id = host.start_run("release", {"version": "1.4.0"}, project_path=str(project)).run_id
    parked = host.wait_for_run(run_id, statuses=("parked", "failed"), timeout=120)
    assert parked.status == "parked", [(node.node_id, node.error, node.output) for node in parked.nodes]
    [decision] = host.pending_interactions()
    assert decision.kind == "decision"
    assert decision.contract["title"] == "Ship 1.4.0?"
    host.answer_decision(decision.request_id, "ship")
    done = host.wait_for_run(run_id, timeout=60)
    assert done.status == "done", done
    assert done.output == {"shipped": "1.4.0"}


AGENT_WORKFLOW = """
from piwf_actors.workflows import agent, compute, define_workflow, edge

summary = define_workflow(
    name="summary",
    start_at="summarize",
    nodes={
        "summarize": agent(prompt=lambda ctx: ctx.input["text"],
                           expected_output={"type": "object", "required": ["summary"],
                                            "properties": {"summary": {"type": "string"}}}),
        "done": compute(run=lambda ctx: {"summary": ctx.outputs["summarize"]["summary"]}),
    },
    edges=[edge("summarize", "done")],
)
"""


def test_agent_session_example_answers_the_prompt_addressed_to_its_session(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "summary", AGENT_WORKFLOW)
    program = tmp_path / "agent.py"
    program.write_text("def summarize(text):\n    return text.upper()[:12]\n\n"
                       + python_block("client.watch(\"interactions\""))
    host = hosts(state_dir)

    agent = subprocess.Popen([sys.executable, str(program)], env={**os.environ, "PIWF_STATE_DIR": str(state_dir)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        run_id = host.start_run("summary", {"text": "the quarterly numbers are in"}, project_path=str(project),
                                session_id="agent-7").run_id
        done = host.wait_for_run(run_id, timeout=60)
    finally:
        os.killpg(agent.pid, signal.SIGTERM)  # the example watches forever, as such a program would
        out, err = agent.communicate(timeout=10)
    assert done.status == "done", (done, err)
    assert done.output == {"summary": "THE QUARTERL"}
    assert "accepted None" in out.splitlines(), (out, err)


EMBED_NIGHTLY = """
from piwf_actors.workflows import compute, define_workflow

nightly = define_workflow(
    name="nightly",
    start_at="report",
    nodes={"report": compute(run=lambda ctx: {"day": ctx.input["day"], "rows": 3})},
    edges=[],
)
"""


def test_embedding_example_runs_a_workflow_from_the_current_directory(state_dir: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "nightly", EMBED_NIGHTLY)
    program = tmp_path / "app.py"
    embedding = python_block("host.answer_checkpoint(request.request_id")  # docs/embedding.md's program
    program.write_text(embedding.replace("/var/lib/myapp/piwf", str(state_dir)))

    # Run from the project, as the example's comment says: no project_path is passed.
    done = subprocess.run([sys.executable, str(program)], cwd=project, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["done {'day': '2026-11-29', 'rows': 3} ['report']"], done.stdout
    # Nothing left behind: host.stop() released the socket (the process has exited, so no thread or child).
    assert not (state_dir / "host.sock").exists()
    assert done.stderr == "", done.stderr
