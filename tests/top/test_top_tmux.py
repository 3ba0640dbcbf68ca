"""`bin/piwf-top` in a real 80×24 terminal (tmux) against a real in-process host.

Two runs: one of a workflow that sleeps (written to a temp dir) and one of
examples/workflows/release.py:release, parked on its `approve` decision. The
console must show every pane at exactly 80×24, and the schedules line with
the next fire of the host's hourly schedule; select the sleeping run (with
the filter), open its detail (its tree marks the running node), and cancel it —
`c` only shows "cancel run …?
y/n" and changes nothing in the host, `y` sends it and the run ends
`cancelled`. Then the decision: its number key only asks, a stray key drops
the question (the run still waits), the number and `y` answer `ship` and the
run finishes. `q` leaves with status 0, and so does Ctrl-C in a second
console.

Every wait polls the screen (or the host) with a deadline. The tmux server is
private (`-L <unique name>`, no user config, no status bar so the pane is the
whole 80×24) and is killed in teardown whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.client import Client

REPO = Path(__file__).resolve().parents[2]
TOP = REPO / "bin" / "piwf-top"
RELEASE = f"{REPO / 'examples' / 'workflows' / 'release.py'}:release"
SLEEPY = textwrap.dedent('''
    """One node that sleeps for ten minutes: a run to cancel."""
    import time

    from piwf_actors.workflows import compute, define_workflow


    def nap(ctx):
        time.sleep(600)
        return {"slept": True}


    sleepy = define_workflow(name="sleepy", start_at="nap", nodes={"nap": compute(run=nap)}, edges=[])
''')

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


HOURLY = textwrap.dedent('''
    """An hourly schedule: its next fire time is on piwf-top's schedules line."""
    from piwf_actors.workflows import compute, define_schedule, define_workflow

    tock = define_workflow(name="tock", start_at="t", nodes={"t": compute(run=lambda ctx: {})}, edges=[])
    hourly = define_schedule(name="hourly", workflow=tock, every_s=3600, catch_up="skip")
''')


@pytest.fixture
def host_dir() -> Iterator[tuple[HostHandle, Path]]:
    state = Path(tempfile.mkdtemp(prefix="pt-", dir="/tmp"))  # short: the socket path must fit AF_UNIX
    project = Path(tempfile.mkdtemp(prefix="pt-proj-", dir="/tmp"))
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "hourly.py").write_text(HOURLY)
    host = start_host(HostConfig(state_dir=state, max_workers=2, projects=(str(project),)))
    try:
        yield host, state
    finally:
        host.stop("test done")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(project, ignore_errors=True)


@pytest.fixture
def sleepy_workflow() -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="pt-wf-", dir="/tmp"))
    (folder / "sleepy.py").write_text(SLEEPY)
    try:
        yield f"{folder / 'sleepy.py'}:sleepy"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tmux() -> Iterator[list[str]]:
    folder = Path(tempfile.mkdtemp(prefix="pt-tmux-", dir="/tmp"))
    config = folder / "tmux.conf"
    config.write_text("set -g status off\n")  # the status bar would take the 24th line from the console
    command = ["tmux", "-L", f"piwf-top-{uuid.uuid4().hex[:8]}", "-f", str(config)]
    try:
        yield command
    finally:
        subprocess.run([*command, "kill-server"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def _open(tmux: list[str], session: str, state: Path) -> None:
    command = f"{TOP} --state-dir {state} --interval 0.3; echo EXITED $?; sleep 60"
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True,
                   env={k: v for k, v in os.environ.items() if k != "TMUX"})


def _keys(tmux: list[str], session: str, *keys: str, literal: bool = False) -> None:
    subprocess.run([*tmux, "send-keys", "-t", session, *(["-l"] if literal else []), *keys], check=True)


def _screen(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _screen_until(tmux: list[str], session: str, check: Callable[[str], bool], what: str,
                  timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = _screen(tmux, session)
        if check(screen):
            return screen
        assert time.monotonic() < deadline, f"{what} not on screen:\n{screen}"
        time.sleep(0.1)


def _status(client: Client, run_id: str) -> str:
    return str(client.get(run_id)["status"])


def test_top_at_80x24_cancels_a_run_and_answers_a_decision(host_dir: tuple[HostHandle, Path], tmux: list[str],
                                                            sleepy_workflow: str) -> None:
    host, state = host_dir
    with Client(state) as client:
        release_id = client.start(RELEASE, {"version": "9.9.9"})["run_id"]
        host.wait_for_run(release_id, ("parked",), timeout=30)
        sleepy_id = client.start(sleepy_workflow)["run_id"]
        host.wait_for_run(sleepy_id, ("running",), timeout=30)
        epoch = client.status()["epoch"]

    _open(tmux, "top", state)
    size = subprocess.run([*tmux, "display-message", "-p", "-t", "top", "#{pane_width}x#{pane_height}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert size == "80x24"
    # The schedule's next fire shows once the host's schedule keeper has computed it ("hourly -" before).
    schedules = re.compile(r"schedules  hourly in \d+(m|s|\.\dh)")
    screen = _screen_until(tmux, "top", lambda s: f"epoch {epoch}" in s and "sleepy" in s and "Ship 9.9.9?" in s
                           and schedules.search(s) is not None, "epoch, runs, the decision and the schedule")
    for pane in ("writer", "workers", " runs ", "1/2", " decisions ", " events ", "? help"):
        assert pane in screen, f"{pane!r} missing at 80x24:\n{screen}"
    assert "release" in screen and "parked (waiting)" in screen and "running" in screen

    with Client(state) as client:
        # Select the sleeping run with the filter and open its detail.
        _keys(tmux, "top", "/")
        _keys(tmux, "top", "sleepy", literal=True)
        _screen_until(tmux, "top", lambda s: "1/1 of 2  filter /sleepy" in s, "the filtered list")
        _keys(tmux, "top", "Enter")  # keep the filter
        _keys(tmux, "top", "Enter")  # open the detail
        _screen_until(tmux, "top", lambda s: f"detail  {sleepy_id}" in s and "node nap" in s and "running" in s
                      and "└── nap  compute   ▶ running   ◀ here" in s,
                      "the detail of the sleeping run, with its tree")

        # `c` only asks.
        _keys(tmux, "top", "c")
        _screen_until(tmux, "top", lambda s: f"cancel run {sleepy_id}? y/n" in s, "the cancel confirmation")
        view = client.get(sleepy_id)
        assert view["status"] == "running" and not view["cancel_requested"]
        _keys(tmux, "top", "y")
        host.wait_for_run(sleepy_id, ("cancelled",), timeout=30)
        _screen_until(tmux, "top", lambda s: f"cancel run {sleepy_id}: accepted" in s and "cancelled" in s,
                      "the cancel's outcome")

        # Back to the whole list; the decision's number key (the host orders the choices) only asks.
        _keys(tmux, "top", "Escape")
        _keys(tmux, "top", "Escape")
        screen = _screen_until(tmux, "top", lambda s: "1/2" in s and " events " in s, "the whole run list again")
        match = re.search(r"(\d) ship\b", screen)
        assert match, f"no numbered ship choice:\n{screen}"
        _keys(tmux, "top", match.group(1))
        _screen_until(tmux, "top", lambda s: "answer ship to Ship 9.9.9? y/n" in s, "the answer confirmation")
        _keys(tmux, "top", "x")  # a stray key: nothing is sent
        _screen_until(tmux, "top", lambda s: "not sent: answer ship to Ship 9.9.9" in s, "the dropped answer")
        assert _status(client, release_id) == "parked"
        _keys(tmux, "top", match.group(1))
        _screen_until(tmux, "top", lambda s: "answer ship to Ship 9.9.9? y/n" in s, "the answer confirmation")
        assert _status(client, release_id) == "parked"
        _keys(tmux, "top", "y")
        view = host.wait_for_run(release_id, timeout=30)
        assert view["status"] == "done"
        assert [n["output"] for n in view["nodes"] if n["node_id"] == "ship"] == [{"shipped": "9.9.9"}]
    _screen_until(tmux, "top", lambda s: "answer ship to Ship 9.9.9: accepted" in s and "nothing to decide" in s,
                  "the answer's outcome")

    _keys(tmux, "top", "q")
    _screen_until(tmux, "top", lambda s: "EXITED 0" in s, "exit status 0 after q")

    _open(tmux, "top2", state)
    _screen_until(tmux, "top2", lambda s: f"epoch {epoch}" in s, "the second console")
    _keys(tmux, "top2", "C-c")
    _screen_until(tmux, "top2", lambda s: "EXITED 0" in s, "exit status 0 after Ctrl-C")


def test_no_host_exits_3() -> None:
    empty = Path(tempfile.mkdtemp(prefix="pt-none-", dir="/tmp"))
    try:
        done = subprocess.run([str(TOP), "--state-dir", str(empty)], capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    assert done.returncode == 3
    assert "piwf-host" in done.stderr
