"""A real `piwf-host` whose workflow code never returns: the start is refused at the limit, other
clients are served, and SIGTERM stops the process within its stop time (the hung code is abandoned on a
daemon thread, never joined at exit).

The host runs in its own session with its log in a file; teardown SIGKILLs its process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from testsupport import BIN_PIWF_HOST, host_database, wait_for

from piwf_actors.client import Client

LOOPING_KEY = '''
import os
from piwf_actors.workflows import compute, define_workflow, limit

HERE = os.path.dirname(os.path.abspath(__file__))


def _key(run_input):
    open(os.path.join(HERE, "key.started"), "w").close()
    while True:  # never returns, never sleeps
        pass


looping = define_workflow(name="looping", start_at="a", concurrency=limit(1, key=_key),
                          nodes={"a": compute(run=lambda ctx: "ok")}, edges=[])
'''


@pytest.fixture
def piwf_host(state_dir: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log_path = tmp_path / "host.log"
    args = [BIN_PIWF_HOST, "--state-dir", str(state_dir), "--max-workers", "1"]
    database = host_database(state_dir)
    if database is not None:
        args += ["--database", database]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd="/")
    try:
        wait_for(lambda: "host started at epoch" in log_path.read_text() or proc.poll() is not None, 20,
                 "the host to start")
        assert proc.poll() is None, log_path.read_text()
        yield proc, log_path
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_a_looping_key_function_is_refused_and_sigterm_stops_the_host(
        piwf_host: tuple[subprocess.Popen[bytes], Path], state_dir: Path, tmp_path: Path) -> None:
    proc, log_path = piwf_host
    code = tmp_path / "code"
    code.mkdir()
    (code / "looping.py").write_text(textwrap.dedent(LOOPING_KEY))
    answers: list[object] = []

    def start() -> None:
        try:
            with Client(state_dir, client_id="starter", timeout=20) as client:
                answers.append(client.request("run.start", {"workflow": f"{code / 'looping.py'}:looping"}))
        except Exception as exc:  # recorded: the test fails on it below, after the signal
            answers.append(exc)

    starter = threading.Thread(target=start, daemon=True)
    starter.start()
    wait_for((code / "key.started").exists, 20, "the key function to start")
    with Client(state_dir, client_id="other", timeout=5) as other:
        assert other.request("host.status").outcome == "accepted"
    starter.join(20)

    proc.send_signal(signal.SIGTERM)
    try:
        exit_status = proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"piwf-host still running 30 s after SIGTERM:\n{log_path.read_text()[-3000:]}")
    assert exit_status == 0, log_path.read_text()[-3000:]
    log = log_path.read_text()
    assert "host stopped" in log and "Traceback" not in log, log[-3000:]
    assert "its concurrency key did not return within 5 s (key_timeout_s); its thread is abandoned" in log

    assert len(answers) == 1, answers
    answer = answers[0]
    assert not isinstance(answer, Exception), answer
    assert (answer.outcome, answer.error) == (
        "rejected", "workflow 'looping': its concurrency key did not return within 5 s (key_timeout_s)"), answer


def test_the_limits_are_piwf_host_options(state_dir: Path) -> None:
    help_text = subprocess.run([BIN_PIWF_HOST, "--help"], capture_output=True, text=True, timeout=30).stdout
    assert "--key-timeout-s" in help_text and "--load-timeout-s" in help_text
    bad = subprocess.run([BIN_PIWF_HOST, "--state-dir", str(state_dir), "--key-timeout-s", "0"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "key_timeout_s must be positive" in bad.stderr, bad.stderr
