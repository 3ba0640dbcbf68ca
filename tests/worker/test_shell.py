"""run_shell with real commands: capture, caps, exit codes, timeout, cancel."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from piwf_actors.worker.shell import OUTPUT_CAP, ShellResult, _Capture, run_shell
from piwf_actors.worker.termination import terminate_tree
from piwf_actors.workflows import NodeContext, shell
from piwf_actors.workflows.validation import checked_node

CTX = NodeContext(input={"word": "piwf"}, outputs={}, run_id="run-1", node_id="n", attempt_id="a-1")


class Spawns:
    """Records every process run_shell starts; teardown terminates what is left."""

    def __init__(self) -> None:
        self.started: list[tuple[int, float | None]] = []

    def __call__(self, pid: int, create_time: float | None) -> None:
        self.started.append((pid, create_time))


@pytest.fixture
def spawns() -> Iterator[Spawns]:
    record = Spawns()
    try:
        yield record
    finally:
        for pid, create_time in record.started:
            terminate_tree(pid, create_time, grace_s=0.5)


def run(spawns: Spawns, cancel: threading.Event | None = None, **options: Any) -> ShellResult:
    return run_shell(checked_node("n", shell(**options)), CTX, on_spawn=spawns, cancel=cancel)


def alive_in_group(group_id: int) -> list[int]:
    pids = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group_id and process.status() != psutil.STATUS_ZOMBIE:
                pids.append(process.pid)
        except (OSError, psutil.Error):
            continue
    return pids


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_success_output(spawns: Spawns) -> None:
    result = run(spawns, command=["sh", "-c", "echo out; echo err >&2"])
    assert result.outcome == "ok" and result.error is None
    assert result.output["stdout"] == "out\n" and result.output["stderr"] == "err\n"
    assert result.output["exit_code"] == 0
    assert isinstance(result.output["duration_ms"], int) and result.output["duration_ms"] >= 0
    assert set(result.output) == {"stdout", "stderr", "exit_code", "duration_ms"}
    assert len(spawns.started) == 1 and spawns.started[0][1] is not None


def test_nonzero_exit(spawns: Spawns) -> None:
    failed = run(spawns, command=["sh", "-c", "echo partial; exit 3"])
    assert failed.outcome == "failed" and failed.error == "command exited with code 3"
    assert failed.output["exit_code"] == 3 and failed.output["stdout"] == "partial\n"
    allowed = run(spawns, command=["sh", "-c", "exit 3"], allow_nonzero_exit=True)
    assert allowed.outcome == "ok" and allowed.output["exit_code"] == 3


def test_killed_by_signal(spawns: Spawns) -> None:
    result = run(spawns, command=["sh", "-c", "kill -KILL $$"])
    assert result.outcome == "failed" and result.error == "command killed by signal SIGKILL"
    assert result.output["exit_code"] == -9


def test_spawn_error(spawns: Spawns) -> None:
    result = run(spawns, command=["/nonexistent/piwf-command"])
    assert result.outcome == "failed" and result.error is not None
    assert result.error.startswith("cannot start command: [Errno 2]")
    assert result.output["exit_code"] is None and spawns.started == []
    bad_cwd = run(spawns, command=["true"], cwd="/nonexistent/dir")
    assert bad_cwd.outcome == "failed" and "cannot start command" in (bad_cwd.error or "")


def test_output_cap_and_marker_on_both_streams(spawns: Spawns) -> None:
    # 3 MB on each pipe, written alternately: a reader that drained one pipe
    # at a time would deadlock here.
    script = (
        "import sys\n"
        "for _ in range(48):\n"
        "    sys.stdout.write('o' * 65536); sys.stdout.flush()\n"
        "    sys.stderr.write('e' * 65536); sys.stderr.flush()\n"
    )
    result = run(spawns, command=[sys.executable, "-c", script], timeout_s=60)
    dropped = 48 * 65536 - OUTPUT_CAP
    for name, char in (("stdout", "o"), ("stderr", "e")):
        text = result.output[name]
        assert text == char * OUTPUT_CAP + f"\n…[truncated {dropped} bytes]"
    assert result.outcome == "ok"


def test_capture_never_holds_more_than_the_cap() -> None:
    capture = _Capture(cap=10)
    for _ in range(1000):
        capture.feed(b"x" * 7)
    assert len(capture.kept) == 10 and capture.dropped == 6990
    assert capture.text() == "x" * 10 + "\n…[truncated 6990 bytes]"


def test_utf8_decoding(spawns: Spawns) -> None:
    result = run(spawns, command=["printf", "caf\\303\\251 \\377"])
    assert result.output["stdout"] == "café \ufffd"
    # A cut inside a two-byte character drops the partial byte instead of garbling it.
    capture = _Capture(cap=4)
    capture.feed("aééé".encode())  # 7 bytes: keep "aé", drop 4
    assert capture.text() == "aé\n…[truncated 4 bytes]"


def test_timeout_kills_children_and_grandchildren(spawns: Spawns) -> None:
    result = run(spawns, command=["sh", "-c", "sleep 30 & echo $!; sleep 30"], timeout_s=0.5)
    assert result.outcome == "failed" and result.timed_out and not result.cancelled
    assert result.error == "command timed out after 0.5s"
    assert result.output["exit_code"] == -15
    grandchild = int(result.output["stdout"].split()[0])
    pid = spawns.started[0][0]
    assert pid_gone(grandchild) and pid_gone(pid)
    assert alive_in_group(pid) == []


def test_background_child_holding_stdout_is_killed_at_timeout(spawns: Spawns) -> None:
    # The shell exits at once; its background sleep keeps stdout open.
    result = run(spawns, command="sleep 30 & echo started", shell=True, timeout_s=0.5)
    assert result.timed_out and result.output["stdout"] == "started\n"
    assert result.output["exit_code"] == 0
    assert alive_in_group(spawns.started[0][0]) == []


def test_cancel(spawns: Spawns) -> None:
    cancel = threading.Event()

    def started(pid: int, create_time: float | None) -> None:
        spawns(pid, create_time)
        cancel.set()

    result = run_shell(checked_node("n", shell(["sleep", "30"])), CTX, on_spawn=started, cancel=cancel)
    assert result.outcome == "failed" and result.cancelled and result.error == "cancelled"
    assert alive_in_group(spawns.started[0][0]) == []


def test_on_spawn_failure_kills_the_command(spawns: Spawns) -> None:
    def refuse(pid: int, create_time: float | None) -> None:
        spawns(pid, create_time)
        raise RuntimeError("registry down")

    with pytest.raises(RuntimeError, match="registry down"):
        run_shell(checked_node("n", shell(["sleep", "30"])), CTX, on_spawn=refuse)
    assert pid_gone(spawns.started[0][0])


def test_callables_string_commands_and_env(spawns: Spawns, tmp_path: Any) -> None:
    result = run(
        spawns, command=lambda ctx: ["sh", "-c", 'echo "$WORD" "$PWD"'],
        env=lambda ctx: {"WORD": ctx.input["word"]}, cwd=lambda ctx: str(tmp_path),
    )
    assert result.output["stdout"] == f"piwf {tmp_path}\n"
    assert run(spawns, command='printf "%s|" "a b" c').output["stdout"] == "a b|c|"
    joined = run(spawns, command=["echo", "x y", "$HOME"], shell=True)
    assert joined.output["stdout"] == "x y $HOME\n"  # list + shell=True: quoted, not expanded
    os.environ["PIWF_TEST_REMOVE"] = "present"
    try:
        removed = run(spawns, command="echo ${PIWF_TEST_REMOVE-unset}", shell=True,
                      env={"PIWF_TEST_REMOVE": None})
    finally:
        del os.environ["PIWF_TEST_REMOVE"]
    assert removed.output["stdout"] == "unset\n"


def test_bad_callables_fail_the_node(spawns: Spawns) -> None:
    broken = run(spawns, command=lambda ctx: ctx.input["missing"])
    assert broken.outcome == "failed"
    assert broken.error == "cannot evaluate command options: KeyError: 'missing'"
    assert run(spawns, command=lambda ctx: 42).error == "command must be a non-empty list of strings"
    assert run(spawns, command=["true"], env=lambda ctx: {"A": 1}).error == (
        "env entry 'A' must map a variable name to a string or None"
    )
    assert run(spawns, command='echo "unbalanced').error == "cannot split command: No closing quotation"
    assert spawns.started == []
