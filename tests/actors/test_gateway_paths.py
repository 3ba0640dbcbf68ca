"""Which thread hands a client's write to the writer (docs/protocol.md 3.5).

`run.start` of a workflow the host has resolved before, whose file is
unchanged and which has no concurrency key function, is built by the gateway
actor itself and queued for the writer from its thread: socket thread →
gateway → writer, two hand-offs. The first start of a workflow, one whose
file changed since, and every start of a workflow with a key function run
workflow code: they are built on a user-code thread, which queues the command
itself (three hand-offs, never the four of user code → gateway → writer). The
thread that called `WriterHandle.submit` says which path a command took.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.actors import writer as writer_module
from piwf_actors.client import Client

FLOW = '''
from piwf_actors.workflows import compute, define_workflow

def _step(ctx):
    return {{"version": {version}}}

quick = define_workflow(name="quick", start_at="a", nodes={{"a": compute(run=_step)}}, edges=[])
'''

KEYED = '''
from piwf_actors.workflows import compute, define_workflow, limit

keyed = define_workflow(name="keyed", start_at="a", concurrency=limit(1, key=lambda run_input: run_input["k"]),
                        nodes={"a": compute(run=lambda ctx: "ok")}, edges=[])
'''


@pytest.fixture
def submitters(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(command name, submitting thread's name) of every write the host queues."""
    seen: list[tuple[str, str]] = []
    real = writer_module.WriterHandle.submit

    def submit(self, command, reply_to=None):
        seen.append((command.name, threading.current_thread().name))
        return real(self, command, reply_to)

    monkeypatch.setattr(writer_module.WriterHandle, "submit", submit)
    return seen


@pytest.fixture
def host(state_dir: Path, submitters) -> Iterator[HostHandle]:
    with start_host(HostConfig(state_dir=state_dir, max_workers=1)) as handle:
        yield handle


def _start_threads(submitters: list[tuple[str, str]], command: str) -> list[str]:
    return [thread for name, thread in submitters if name == command]


def test_run_start_of_a_resolved_workflow_goes_from_the_gateway_straight_to_the_writer(
        host: HostHandle, submitters, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW.format(version=1))
    with Client(host.paths.root) as client:
        first = client.start(f"{flow}:quick", {"n": 1})["run_id"]
        second = client.start(f"{flow}:quick", {"n": 2})["run_id"]
        threads = _start_threads(submitters, "run.start")
        assert threads[0] == "piwf-user-code", threads  # loaded on a user-code thread, queued from there
        assert threads[1].startswith("ClientGateway-"), threads  # cached: queued by the gateway actor
        assert client.wait(second, timeout=30)["output"] == {"version": 1}
        assert client.wait(first, timeout=30)["status"] == "done"

        # An edited file is loaded again, off the gateway's thread, and the new code runs.
        flow.write_text(FLOW.format(version=22))
        third = client.start(f"{flow}:quick", {"n": 3})["run_id"]
        fourth = client.start(f"{flow}:quick", {"n": 4})["run_id"]
        threads = _start_threads(submitters, "run.start")
        assert threads[2] == "piwf-user-code" and threads[3].startswith("ClientGateway-"), threads
        assert client.wait(third, timeout=30)["output"] == {"version": 22}
        assert client.wait(fourth, timeout=30)["output"] == {"version": 22}


def test_a_workflow_that_fails_to_load_is_refused_through_the_same_path(host: HostHandle, submitters,
                                                                        tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('nope')\n")
    with Client(host.paths.root) as client:
        answer = client.request("run.start", {"workflow": f"{broken}:quick"}, idempotency_key="broken-1")
        assert answer.outcome == "rejected" and "nope" in (answer.error or ""), answer
        # The refusal goes from the user-code thread to the writer to be recorded under the key (a replay meets
        # it again), and nothing else is written.
        threads = _start_threads(submitters, "run.start")
        assert threads == ["piwf-user-code"], threads
        assert host.list_runs() == []
        replay = client.request("run.start", {"workflow": f"{broken}:quick"}, idempotency_key="broken-1")
        assert (replay.outcome, replay.error) == (answer.outcome, answer.error)
        # The gateway is unharmed and answers the next request.
        assert client.request("run.list").outcome == "accepted"


def test_run_restart_is_queued_by_a_user_code_thread(host: HostHandle, submitters, tmp_path: Path) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW.format(version=3))
    with Client(host.paths.root) as client:
        run_id = client.start(f"{flow}:quick")["run_id"]
        revision = client.wait(run_id, timeout=30)["revision"]
        answer = client.request("run.restart", run_id=run_id, expected_revision=revision)
        assert answer.outcome == "accepted", answer
        assert _start_threads(submitters, "run.restart") == ["piwf-user-code"]
        assert client.wait(answer.receipt["run_id"], timeout=30)["output"] == {"version": 3}


def test_every_start_of_a_workflow_with_a_key_function_is_queued_by_a_user_code_thread(
        host: HostHandle, submitters, tmp_path: Path) -> None:
    flow = tmp_path / "keyed.py"
    flow.write_text(KEYED)
    with Client(host.paths.root) as client:
        for index in range(3):  # loaded once, cached after: the key function still runs off the gateway
            client.start(f"{flow}:keyed", {"k": str(index)})
        assert _start_threads(submitters, "run.start") == ["piwf-user-code"] * 3
