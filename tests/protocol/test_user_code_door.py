"""No user code runs on the door: concurrency key functions and workflow loading run off the gateway's
threads, bounded in time, and a file whose import blocks never blocks loading another file.

The workflows here are written to the test's directory and block on files the test creates (a
`started` marker the code writes when it begins, a `release` file it waits for), so every wait is on
an event, never on a fixed sleep; teardown creates every release file, so no thread the host left
running outlives the test for long.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostHandle

SLOW_KEY = '''
import os, time
from piwf_actors.workflows import compute, define_workflow, limit

HERE = os.path.dirname(os.path.abspath(__file__))


def _key(run_input):
    if run_input.get("block"):
        open(os.path.join(HERE, run_input["block"] + ".started"), "w").close()
        release = os.path.join(HERE, run_input["block"] + ".release")
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.01)
    return run_input.get("cluster", "eu")


slowkey = define_workflow(name="slowkey", start_at="a", concurrency=limit(2, key=_key),
                          nodes={"a": compute(run=lambda ctx: "ok")}, edges=[])
'''

HEALTHY = '''
from piwf_actors.workflows import compute, define_workflow

healthy = define_workflow(name="healthy", start_at="a", nodes={"a": compute(run=lambda ctx: "ok")}, edges=[])
'''

STUCK_IMPORT = '''
import os, time
from piwf_actors.workflows import compute, define_workflow

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "stuck.loads"), "a") as loads:
    loads.write("load\\n")
release = os.path.join(HERE, "stuck.release")
deadline = time.monotonic() + 60
while not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.01)

stuck = define_workflow(name="stuck", start_at="a", nodes={"a": compute(run=lambda ctx: "ok")}, edges=[])
'''


@pytest.fixture
def code_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the test's workflow files live; teardown releases everything that still waits."""
    directory = tmp_path / "code"
    directory.mkdir()
    yield directory
    for started in directory.glob("*.started"):
        started.with_suffix(".release").touch()
    (directory / "stuck.release").touch()


def write(directory: Path, name: str, text: str) -> str:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def wait_file(path: Path, proto: Any, timeout: float = 10.0) -> None:
    proto.wait_for(path.exists, timeout, f"{path.name} to appear")


def test_a_sleeping_key_function_does_not_delay_another_clients_status(
        host: HostHandle, connect: Callable[..., Any], code_dir: Path, proto: Any) -> None:
    spec = write(code_dir, "slowkey.py", SLOW_KEY) + ":slowkey"
    starter = connect(host, client_id="starter")
    assert starter.request("run.start", {"workflow": spec, "input": {}})["outcome"] == "accepted"  # loaded, cached
    request_id = starter.send_request("run.start", {"workflow": spec, "input": {"block": "k1"}})
    wait_file(code_dir / "k1.started", proto)  # the key function runs now, and sleeps

    other = connect(host, client_id="other")
    status = other.request("host.status", timeout=1.0)  # the deadline is the point: not after the key returns
    assert status["outcome"] == "accepted", status
    (code_dir / "k1.release").touch()
    answer = starter.response(request_id, timeout=10)
    assert answer["outcome"] == "accepted", answer


def test_a_key_function_that_never_returns_is_refused_and_the_door_goes_on(
        host: HostHandle, connect: Callable[..., Any], code_dir: Path, proto: Any) -> None:
    spec = write(code_dir, "slowkey.py", SLOW_KEY) + ":slowkey"
    healthy = write(code_dir, "healthy.py", HEALTHY)
    client = connect(host, client_id="starter")
    request_id = client.send_request("run.start", {"workflow": spec, "input": {"block": "k2"}})
    wait_file(code_dir / "k2.started", proto)
    other = connect(host, client_id="other")
    assert other.request("run.start", {"workflow": healthy}, timeout=5)["outcome"] == "accepted"
    answer = client.response(request_id, timeout=15)  # refused at the key limit (5 s by default)
    assert answer["outcome"] == "rejected", answer
    assert answer["error"] == "workflow 'slowkey': its concurrency key did not return within 5 s (key_timeout_s)"
    assert host.list_runs(limit=10) and all(run.workflow == "healthy" for run in host.list_runs(limit=10))


def test_a_blocking_import_does_not_delay_a_healthy_start_nor_state_status(
        make_host: Callable[..., HostHandle], connect: Callable[..., Any], code_dir: Path, proto: Any) -> None:
    host = make_host(load_timeout_s=1.0)
    stuck = write(code_dir, "stuck.py", STUCK_IMPORT)
    healthy = write(code_dir, "healthy.py", HEALTHY)
    first, second = connect(host, client_id="first"), connect(host, client_id="second")
    waiting = [first.send_request("run.start", {"workflow": stuck}),
               second.send_request("run.start", {"workflow": stuck})]
    wait_file(code_dir / "stuck.loads", proto)

    other = connect(host, client_id="other")
    assert other.request("run.start", {"workflow": healthy}, timeout=5)["outcome"] == "accepted"
    assert other.request("state.status", timeout=5)["outcome"] == "accepted"
    for conn, request_id in zip((first, second), waiting, strict=True):
        answer = conn.response(request_id, timeout=10)
        assert answer["outcome"] == "rejected", answer
        assert answer["error"].startswith(f"cannot load {stuck}: its import did not finish within 1 s "
                                          "(load_timeout_s)"), answer
    again = other.request("run.start", {"workflow": stuck}, timeout=5)  # the hung load is not started again
    assert again["outcome"] == "rejected" and "did not finish within 1 s" in again["error"], again
    assert (code_dir / "stuck.loads").read_text() == "load\n"  # three starts shared one load of the file
    user_code = other.request("host.status")["receipt"]["user_code"]
    assert (user_code["hung"], user_code["load_timeout_s"]) == (1, 1.0), user_code  # one abandoned thread
    assert user_code["oldest_hung"] == f"cannot load {stuck}: its import"
