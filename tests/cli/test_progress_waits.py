"""`piwf start --wait` and `piwf watch RUN` name each kind of wait as `piwf show` does: a sleep with its
wake-up time, a message wait with its topic, a fan-out with its open children, and only a person's
request as an answer to give (with the command that gives it). They used to say "waiting (for an
answer)… see piwf inbox" for every wait, while `piwf inbox` had nothing to answer."""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import LineReader, piwf, popen, short_dir, wait_status

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.cli.progress import NodeProgress, park_hint
from piwf_actors.timefmt import moment

NOW = 1_780_000_000.0


def command(*words: str) -> str:
    return shlex.join(["piwf", *words])


def _view(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"run_id": "run_1", "status": "parked", "park_reason": "waiting",
            "nodes": [{"node_id": node_id, "attempt_id": "att_1", "status": "waiting", "attempts": 1}], **extra}


SLEEP = {"wait_id": "wait_s", "node_id": "nap", "kind": "sleep", "wake_at": NOW + 3600, "remaining_s": 3600.0}
MESSAGE = {"wait_id": "wait_m", "node_id": "listen", "kind": "message", "topic": "signoff", "deadline_at": None,
           "clock": "none", "remaining_s": None}
CHILDREN = {"wait_id": "wait_c", "node_id": "fan", "kind": "children", "children_total": 3, "children_open": 2}
REQUEST = {"request_id": "req_abc", "node_id": "approve", "kind": "decision", "status": "pending",
           "deadline_at": NOW + 600, "clock": "running", "remaining_s": 600.0}


def test_a_waiting_node_line_names_its_wait() -> None:
    cases = [
        (_view("nap", waits=[SLEEP]), f"node nap sleeping until {moment(NOW + 3600, NOW)}"),
        (_view("listen", waits=[MESSAGE]), "node listen waiting for a message on 'signoff' (no timeout)"),
        (_view("fan", waits=[CHILDREN]), "node fan waiting for children: 2 of 3 open"),
        (_view("approve", waiting=[REQUEST]), "node approve waiting for an answer (decision, deadline in 10m00s)"),
    ]
    for view, line in cases:
        first_seen = [text.plain for text in NodeProgress(now=lambda: NOW).update(view)]
        assert first_seen == [f"node {view['nodes'][0]['node_id']} started", line]


def test_a_park_hint_says_what_moves_the_run_on() -> None:
    def hint(view: dict[str, Any], request: dict[str, Any] | None = None) -> list[str]:
        return park_hint(view, request, command, lambda _kind, full: full, now=NOW)

    slept = hint(_view("nap", waits=[SLEEP], park_detail="wait_s"))
    assert slept == [f"run run_1 is sleeping until {moment(NOW + 3600, NOW)} at node nap; it goes on by itself "
                     "then"]
    listening = hint(_view("listen", waits=[MESSAGE], park_detail="wait_m"))
    assert listening == ["run run_1 is waiting for a message on 'signoff' (no timeout) at node listen; send one "
                         "with: piwf send run_1 signoff --value JSON"]
    fanned = hint(_view("fan", waits=[CHILDREN], park_detail="wait_c"))
    assert fanned == ["run run_1 is waiting for children: 2 of 3 open at node fan; see them with: piwf list "
                      "--parent run_1"]
    for lines in (slept, listening, fanned):
        assert not any("inbox" in line or "answer" in line for line in lines), lines
    # A request the inbox does not list (answered meanwhile) still points there.
    assert "piwf inbox" in hint(_view("approve", waiting=[REQUEST], park_detail="req_abc"))[0]


FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import checkpoint, define_workflow, map_workflow, sleep, wait_message

    nap = define_workflow(name="nap", start_at="nap", nodes={"nap": sleep(seconds=3600)}, edges=[])
    listen = define_workflow(name="listen", start_at="listen", nodes={"listen": wait_message("signoff")}, edges=[])
    fan = define_workflow(name="fan", start_at="fan", nodes={
        "fan": map_workflow(listen, items=lambda ctx: [1, 2])}, edges=[])
    gate = define_workflow(name="gate", start_at="ask", nodes={"ask": checkpoint(prompt="ok?")}, edges=[])
''')


@pytest.fixture
def host(state_dir: Path) -> Iterator[tuple[HostHandle, Path]]:
    project = short_dir("ppw-")
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "flows.py").write_text(FLOWS)
    handle = start_host(HostConfig(state_dir=state_dir, max_workers=2))
    try:
        yield handle, project
    finally:
        handle.stop("test done")


@pytest.mark.parametrize(("workflow", "node_line", "hint"), [
    ("nap", "node nap sleeping until ", "at node nap; it goes on by itself then"),
    ("listen", "node listen waiting for a message on 'signoff' (no timeout)", "send one with: piwf "),
    ("fan", "node fan waiting for children: 2 of 2 open", "see them with: piwf "),
    ("gate", "node ask waiting for an answer (checkpoint, no deadline)", "answer with"),
])
def test_start_wait_and_watch_name_the_wait(host: tuple[HostHandle, Path], state_dir: Path, workflow: str,
                                            node_line: str, hint: str) -> None:
    handle, project = host
    process = popen(state_dir, "start", workflow, "--wait", cwd=project)
    try:
        stderr = LineReader(process.stderr)
        run_id = stderr.until(lambda line: line.startswith("started ")).split()[1].rstrip(";")
        stderr.until(lambda line: line.startswith("(still waiting for the run to end"))
        printed = "".join(stderr.lines)
        assert node_line in printed and hint in printed, printed
        if workflow != "gate":  # only a person's request is answered (and listed in `piwf inbox`)
            assert "inbox" not in printed and "for an answer" not in printed, printed
        watcher = popen(state_dir, "watch", run_id)  # not a terminal: plain lines
        try:
            stdout = LineReader(watcher.stdout)
            stdout.until(lambda line: node_line in line)  # fails the test if the run's end comes first
        finally:
            watcher.kill()
            watcher.wait(10)
        assert piwf(state_dir, "cancel", run_id).returncode == 0
        wait_status(state_dir, run_id, ("cancelled",))
        assert process.wait(30) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)

