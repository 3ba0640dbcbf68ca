"""Helpers of the `piwf` command tests: run `bin/piwf` as a subprocess, start in-process hosts on short
state directories (AF_UNIX paths are limited to ~107 bytes), poll with deadlines."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from piwf_actors.client import Client

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "bin"
PIWF = BIN / "piwf"


def short_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PIWF_STATE_DIR", "COLUMNS")}
    env.update(extra or {})
    return env


def piwf(state: Path | None, *args: str, timeout: float = 60, cwd: Path | None = None,
         extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`bin/piwf ARGS --state-dir STATE` (no --state-dir when `state` is None)."""
    command = [str(PIWF), *args, *(["--state-dir", str(state)] if state is not None else [])]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ(extra_env),
                          cwd=cwd or REPO, stdin=subprocess.DEVNULL)


def popen(state: Path | None, *args: str, cwd: Path | None = None,
          extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """A `bin/piwf` that keeps running (a wait, a follow); line-buffered text pipes."""
    command = [str(PIWF), *args, *(["--state-dir", str(state)] if state is not None else [])]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, bufsize=1, env=environ(extra_env), cwd=cwd or REPO)


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return json.loads(result.stdout)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


def run_view(state: Path, run_id: str) -> dict[str, Any]:
    with Client(state) as client:
        return client.get(run_id)


def wait_status(state: Path, run_id: str, statuses: tuple[str, ...], timeout: float = 30) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        seen["view"] = run_view(state, run_id)
        return seen["view"] if seen["view"]["status"] in statuses else None

    return wait_until(reached, timeout, f"run {run_id} to reach {statuses} (last: {seen.get('view', {}).get('status')})")


class LineReader:
    """Reads a pipe line by line on a thread, so a test can wait for a line with a deadline."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._ended = False
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def _next(self, deadline: float, what: str) -> str | None:
        """The next line, or None once the stream has ended; fails the test past `deadline`."""
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"{what}; got {self.lines}"
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self._ended = True
            else:
                self.lines.append(line)
            return line

    def until(self, predicate: Callable[[str], bool], timeout: float = 30) -> str:
        """The first line from now on that satisfies `predicate` (all lines read are kept in `lines`)."""
        deadline = time.monotonic() + timeout
        while True:
            assert not self._ended, f"the stream ended without a matching line; got {self.lines}"
            line = self._next(deadline, f"no matching line within {timeout} s")
            if line is not None and predicate(line):
                return line

    def rest(self, timeout: float = 30) -> str:
        """Everything until the stream ends."""
        deadline = time.monotonic() + timeout
        while not self._ended:
            self._next(deadline, f"the stream did not end within {timeout} s")
        return "".join(self.lines)
