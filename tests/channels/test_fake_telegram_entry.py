"""`python -m piwf_actors.testing.fake_telegram_console`: the fake Bot API as a program a person can try a
host against. Run for real: the entry point in a subprocess, a real host whose channel it serves, a
decision answered by a tap sent from "another shell" (a sub-command) and a reply typed on the
fake's standard input."""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from testsupport import wait_for

from piwf_actors.testing import fake_telegram_console as console

ENTRY = [sys.executable, "-m", "piwf_actors.testing.fake_telegram_console"]


class Served:
    """The entry point serving on a free port; its output read line by line on a thread."""

    def __init__(self, config_dir: Path) -> None:
        self.proc = subprocess.Popen([*ENTRY, "--port", "0", "--write-config", str(config_dir)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.url = self.until(lambda line: line.startswith("export PIWF_TELEGRAM_API_BASE=")).partition("=")[2]
        self.port = int(self.url.rpartition(":")[2])
        self.until(lambda line: line.startswith("type `help`"))  # the end of what it prints first

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))

    def until(self, predicate, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no such line from the fake; got {self.lines}")
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            self.lines.append(line)
            if predicate(line):
                return line

    def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def command(self, *words: str) -> subprocess.CompletedProcess[str]:
        """The same command from another shell: a second process talking to this one over its port."""
        return subprocess.run([*ENTRY, "--port", str(self.port), *words], capture_output=True, text=True,
                              timeout=30)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    served = Served(tmp_path / "fake-config")
    try:
        yield served
    finally:
        served.proc.terminate()
        try:
            served.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait()


def test_a_decision_is_answered_through_the_entry_point(guard, state_dir, setup, served, tmp_path) -> None:
    assert served.lines[0] == f"fake Telegram Bot API on {served.url}"
    assert any(line.startswith("bot token: 123456:") for line in served.lines)
    config_dir = tmp_path / "fake-config"
    assert (config_dir / "credentials.toml").stat().st_mode & 0o077 == 0
    host = guard.start_host(state_dir, config_dir=config_dir, channel_options={"telegram": {"api_base": served.url}},
                            channel_poll_timeout_s=1, max_workers=1)
    run_id = host.start_run(f"{setup['flows']}:release", {"version": "7"})["receipt"]["run_id"]
    listed = wait_for(lambda: "buttons:" in (out := served.command("list").stdout) and out, 20,
                      "the decision in the fake chat")
    assert "#1" in listed and "Ship 7?" in listed and "[3] Stop" in listed and "[1] Needs changes ✎" in listed

    tapped = served.command("tap", "1", "needs changes")
    assert tapped.returncode == 0, tapped.stderr
    assert "bot: Reply to the question with your text." in tapped.stdout
    prompt = wait_for(lambda: "#2" in (out := served.command("list").stdout) and out, 20, "the prompt for text")
    assert "What should change?" in prompt

    served.type("reply 2 tighten the tests")  # typed on the fake's own terminal
    served.until(lambda line: line == "replied to #2")
    assert served.until(lambda line: line.startswith("bot: ")) == "bot: Recorded: Needs changes"
    assert host.wait_for_run(run_id, timeout=30)["output"] == {"fix": "tighten the tests"}
    wait_for(lambda: "(edited)" in served.command("list").stdout, 20, "the decision edited to its outcome")


def test_bad_commands_get_one_line_errors(served) -> None:
    missing = served.command("tap", "9", "1")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: no bot message #9 in chat 1001 (`list` shows them)"
    usage = served.command("reply", "1")
    assert usage.returncode == 1 and usage.stderr.strip() == "error: usage: reply MESSAGE TEXT..."
    served.type("frobnicate")
    assert served.until(lambda line: line.startswith("error:")).startswith("error: unknown command 'frobnicate'")


def test_a_command_without_a_running_fake_says_so(tmp_path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([*ENTRY, "--port", str(port), "list"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and f"no fake Bot API on 127.0.0.1:{port}" in done.stderr


def test_write_config_never_overwrites(tmp_path) -> None:
    console.write_config(tmp_path / "c", "1:x", 5, 6)
    assert 'allowed_chat_ids = [6]' in (tmp_path / "c" / "channels.toml").read_text()
    with pytest.raises(ValueError, match="exists; not overwritten"):
        console.write_config(tmp_path / "c", "1:y", 5, 6)
    assert (tmp_path / "c" / "credentials.toml").read_text() == 'ops_bot = "1:x"\n'
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(ValueError, match="writable by group or others"):
        console.write_config(shared, "1:x", 5, 6)
    assert os.stat(shared).st_mode & 0o777 == 0o777 and not list(shared.iterdir())  # left as it was


# --- docs/channels.md's "Trying it without a bot" runs as written ---------------------------------------

REPO = Path(__file__).resolve().parents[2]


def _walkthrough() -> list[tuple[str, list[str]]]:
    """(command, the output lines the page shows for it) of the walkthrough's console blocks."""
    text = (REPO / "docs" / "channels.md").read_text()
    start = text.index("## Trying it without a bot\n")
    section = text[start:text.index("The same commands can be typed", start)]
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def test_the_readme_walkthrough_runs_as_written(tmp_path) -> None:
    steps = _walkthrough()
    assert [command.split()[0] for command, _ in steps] == [
        ".venv/bin/python", "export", "bin/piwf-host", "bin/piwf", ".venv/bin/python", ".venv/bin/python", "bin/piwf"]
    base = Path(tempfile.mkdtemp(prefix="pwtry-", dir="/tmp"))  # a short socket path
    processes: list[subprocess.Popen[str]] = []
    env = {**os.environ}

    def words(command: str, port: int | None) -> list[str]:
        command = command.replace("/tmp/piwf-try", str(base))
        if port is not None:
            command = command.replace("8765", str(port))
        split = [sys.executable if word == ".venv/bin/python" else word for word in shlex.split(command)]
        if port is not None and split[:3] == [sys.executable, "-m", "piwf_actors.testing.fake_telegram_console"]:
            split[3:3] = ["--port", str(port)]  # the page's fake is on its default port, this test's on a free one
        return split

    try:
        (command, shown), *rest = steps
        fake = subprocess.Popen([*words(command, None), "--port", "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd=REPO, start_new_session=True)
        processes.append(fake)
        assert fake.stdout is not None
        printed = [fake.stdout.readline().rstrip("\n") for _ in shown]
        port = int(printed[0].rpartition(":")[2])
        assert printed == [line.replace("/tmp/piwf-try", str(base)).replace("8765", str(port)) for line in shown]

        (export, _), (host_command, _), (start_command, _), (list_command, listed), (tap_command, tapped), \
            (runs_command, _) = rest
        for assignment in words(export, port)[1:]:
            name, _, value = assignment.partition("=")
            env[name] = value
        host_words = words(host_command, port)
        assert host_words[-4:] == [">", f"{base}/host.log", "2>&1", "&"]
        log = open(host_words[-3], "w")  # noqa: SIM115 (closed with the test)
        processes.append(subprocess.Popen(host_words[:-4], stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                                          start_new_session=True))
        started = wait_for(lambda: (done := subprocess.run(words(start_command, port), cwd=REPO, env=env,
                                                           capture_output=True, text=True)).returncode == 0 and done,
                           30, lambda: f"the run to start; host log: {Path(host_words[-3]).read_text()}")
        run_id = re.search(r"run_[0-9a-z]+", started.stdout).group()

        def chat() -> str:
            return subprocess.run(words(list_command, port), cwd=REPO, env=env, capture_output=True, text=True).stdout
        shown_chat = wait_for(lambda: "buttons:" in (out := chat()) and out, 30, "the decision in the fake chat")
        deadline = re.compile(r"If nobody answers by .* UTC: Stop\.")
        assert [deadline.sub("…", line) for line in shown_chat.splitlines()] == [deadline.sub("…", line)
                                                                                for line in listed]
        done = subprocess.run(words(tap_command, port), cwd=REPO, env=env, capture_output=True, text=True, timeout=30)
        assert done.stdout.splitlines() == tapped, done.stderr
        runs = subprocess.run(words(runs_command, port) + ["--json"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=30)
        assert runs.returncode == 0 and run_id[:12] in runs.stdout
        wait_for(lambda: f'"{run_id}"' in (out := subprocess.run(
            ["bin/piwf", "show", run_id, "--json"], cwd=REPO, env=env, capture_output=True, text=True).stdout)
            and '"done"' in out, 30, "the run to finish")
    finally:
        for process in reversed(processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(base, ignore_errors=True)
