"""`piwf logs -f` on a node that is already running starts with what it printed so far, then follows it,
like `tail -f` (issue 22, edge 4): a real host, a real shell node, a real `bin/piwf` process."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client
from piwf_actors.protocol.output_tail import OutputTail
from tests.cli.cli_support import LineReader, popen, short_dir

FLOWS = textwrap.dedent('''
    import os
    from piwf_actors.workflows import define_workflow, shell

    GO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")
    talk = define_workflow(name="talk", start_at="sh", nodes={
        "sh": shell(command=["sh", "-c", "echo one; echo two; echo err >&2; "
                             f"while [ ! -e {GO} ]; do sleep 0.05; done; echo three"], timeout_s=120)},
        edges=[])
''')


@pytest.fixture
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("plf-")
    (state / "flows.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        yield {"host": host, "state": state}
    finally:
        (state / "go").touch()  # let a node still waiting end
        host.stop()
        shutil.rmtree(state, ignore_errors=True)


def _printed_two_already(state: Path, run_id: str) -> None:
    """Wait, on a watch of its own, until the host has passed on the node's `two` (so it was printed
    before `piwf logs -f` starts)."""
    with Client(state) as client:
        seen = ""
        for event in client.watch("run", run_id=run_id, timeout=60):
            if event.get("topic") == "node_output" and event["payload"].get("stream") == "stdout":
                seen += event["payload"].get("data") or ""
                if "two\n" in seen:
                    return


def test_logs_follow_starts_with_the_output_printed_before_it(env: dict[str, Any]) -> None:
    state = env["state"]
    run_id = env["host"].start_run(f"{state / 'flows.py'}:talk", {})["receipt"]["run_id"]
    _printed_two_already(state, run_id)
    follower = popen(state, "logs", "-f", run_id, "sh")
    try:
        out, err = LineReader(follower.stdout), LineReader(follower.stderr)
        assert out.until(lambda line: line == "one\n", timeout=30)
        assert out.until(lambda line: line == "two\n", timeout=30)
        assert err.until(lambda line: line == "err\n", timeout=30)
        (state / "go").touch()
        assert out.until(lambda line: line == "three\n", timeout=60)
        rest = out.rest(timeout=60)
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
    assert rest.count("one\n") == 1 and rest.count("three\n") == 1, rest  # nothing printed twice


def test_the_tail_keeps_the_current_attempt_of_each_run_within_its_bounds() -> None:
    tail = OutputTail(max_runs=2, max_bytes_per_run=10)
    tail.add({"run_id": "r1", "attempt_id": "a1", "node_id": "n", "stream": "stdout", "data": "one\n"})
    tail.add({"run_id": "r1", "attempt_id": "a1", "node_id": "n", "stream": "stdout", "data": "two\n"})
    tail.add({"run_id": "r1", "attempt_id": "a1", "node_id": "n", "stream": "stderr", "data": "e\n"})
    assert [(c["stream"], c["data"]) for c in tail.so_far("r1")] == [("stdout", "one\ntwo\n"), ("stderr", "e\n")]
    tail.add({"run_id": "r1", "attempt_id": "a1", "node_id": "n", "stream": "stdout", "data": "more than room\n"})
    cut = tail.so_far("r1")  # over its bounds: the oldest output goes, and a line says so
    assert [c["data"] for c in cut[1:]] == ["more than room\n"] and "earlier output cut" in cut[0]["data"]
    tail.add({"run_id": "r1", "attempt_id": "a2", "node_id": "m", "stream": "stdout", "data": "new\n"})
    assert [(c["attempt_id"], c["data"]) for c in tail.so_far("r1")] == [("a2", "new\n")]  # a new attempt
    tail.add({"run_id": "r2", "attempt_id": "b", "node_id": "n", "stream": "stdout", "data": "x"})
    tail.add({"run_id": "r3", "attempt_id": "c", "node_id": "n", "stream": "stdout", "data": "y"})
    assert tail.so_far("r1") == [] and tail.so_far("r3")[0]["data"] == "y"  # the least recent run went
