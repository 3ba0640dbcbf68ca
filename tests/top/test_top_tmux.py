"""`bin/piwf-top` in a real terminal (tmux) against a real in-process host.

A release run (examples/workflows/release.py) parks on its `approve`
decision; the console must show the epoch, the runs table and the decision,
answer it with `ship` from the keyboard (the number key shown next to `ship`
on screen), and leave with `q` and exit status 0. The tmux server is private
(`-L <unique name>`) and is killed in teardown whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client

REPO = Path(__file__).resolve().parents[2]
TOP = REPO / "bin" / "piwf-top"
RELEASE = f"{REPO / 'examples' / 'workflows' / 'release.py'}:release"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def host_dir() -> Iterator[tuple[object, Path]]:
    state = Path(tempfile.mkdtemp(prefix="pt-", dir="/tmp"))  # short: the socket path must fit AF_UNIX
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        yield host, state
    finally:
        host.stop("test done")
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def tmux() -> Iterator[list[str]]:
    command = ["tmux", "-L", f"piwf-top-{uuid.uuid4().hex[:8]}"]
    try:
        yield command
    finally:
        subprocess.run([*command, "kill-server"], capture_output=True)


def _screen_until(tmux: list[str], check: Callable[[str], bool], what: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True).stdout
        if check(screen):
            return screen
        assert time.monotonic() < deadline, f"{what} not on screen:\n{screen}"
        time.sleep(0.1)


def test_top_answers_a_decision_from_the_keyboard(host_dir: tuple[object, Path], tmux: list[str]) -> None:
    host, state = host_dir
    with Client(state) as client:
        run_id = client.start(RELEASE, {"version": "9.9.9"})["run_id"]
        epoch = client.status()["epoch"]
    host.wait_for_run(run_id, ("parked",), timeout=30)  # type: ignore[attr-defined]

    command = f"{TOP} --state-dir {state} --interval 0.3; echo EXITED $?; sleep 30"
    subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "120", "-y", "40", command], check=True,
                   env={k: v for k, v in os.environ.items() if k != "TMUX"})

    screen = _screen_until(tmux, lambda s: f"epoch {epoch}" in s and run_id in s and "Ship 9.9.9?" in s,
                           "epoch, run and decision")
    assert "runs" in screen and "workflow" in screen and "pending decisions (1)" in screen
    assert "release" in screen and "parked" in screen
    # The key for `ship` is the number shown before it (the host decides the order of choices).
    match = re.search(r"(\d) ship\b", screen)
    assert match, f"no numbered ship choice:\n{screen}"
    subprocess.run([*tmux, "send-keys", "-t", "top", match.group(1)], check=True)

    view = host.wait_for_run(run_id, timeout=30)  # type: ignore[attr-defined]
    assert view["status"] == "done"
    assert [n["output"] for n in view["nodes"] if n["node_id"] == "ship"] == [{"shipped": "9.9.9"}]
    _screen_until(tmux, lambda s: "answered ship" in s and "nothing to decide" in s, "the answer's outcome")

    subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
    _screen_until(tmux, lambda s: "EXITED 0" in s, "exit status 0")


def test_no_host_exits_3() -> None:
    empty = Path(tempfile.mkdtemp(prefix="pt-none-", dir="/tmp"))
    try:
        done = subprocess.run([str(TOP), "--state-dir", str(empty)], capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    assert done.returncode == 3
    assert "piwf-host" in done.stderr
