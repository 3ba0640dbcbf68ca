"""Shared helpers for the crash/recovery and run-control tests.

- `guard` (a pytest fixture; import it into the test module): tags every
  process the test starts with a unique environment variable, starts
  in-process hosts and host subprocesses for the test, and in teardown stops
  and kills all of them and then checks with psutil that no tagged process
  (host, worker, shell command) is left alive.
- `Oracle`: the execution log the workflow nodes write outside the database.
- `rows`: read the state database through the test's own read-only sqlite3
  connection (works while no host is running, e.g. right after a SIGKILL).
- `wait_for`: poll a predicate with a deadline (never a bare sleep).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from piwf_actors import HostConfig, HostHandle, start_host

WF = Path(__file__).resolve().parent
REPO = WF.parents[2]
FLOWS = WF / "recovery_flows.py"
HOST_MAIN = WF / "host_main.py"
TAG_VAR = "PIWF_RECOVERY_TEST_TAG"
POLL_S = 0.02


def flow(attr: str) -> str:
    """The `run.start` spec of a workflow in recovery_flows.py."""
    return f"{FLOWS}:{attr}"


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str]) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(POLL_S)


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie; `is_running` compares the start time, so a reused pid reads as dead."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# --- the oracle ---------------------------------------------------------------------------


class Oracle:
    """Lines `"<node_id> <run_id>"`, one per node execution start."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def entries(self) -> list[tuple[str, str]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [tuple(line.split(" ", 1)) for line in text.splitlines() if line]  # type: ignore[misc]

    def nodes(self, run_id: str | None = None) -> list[str]:
        return [node for node, run in self.entries() if run_id is None or run == run_id]

    def counts(self, run_id: str | None = None) -> collections.Counter[str]:
        return collections.Counter(self.nodes(run_id))


# --- the database, read by the test itself ---------------------------------------------


def rows(state_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro", uri=True, timeout=10)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def events(state_dir: Path, run_id: str) -> list[dict[str, Any]]:
    found = rows(state_dir, "SELECT seq, kind, node_id, attempt_id, payload FROM run_event WHERE run_id = ? "
                            "ORDER BY seq", (run_id,))
    for event in found:
        event["payload"] = None if event["payload"] is None else json.loads(event["payload"])
    return found


def committed_nodes(state_dir: Path, run_id: str) -> list[str]:
    """Node ids whose result is committed (`node_finished` events), in order."""
    return [e["node_id"] for e in events(state_dir, run_id) if e["kind"] == "node_finished"]


# --- processes ------------------------------------------------------------------------------


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Every live (non-zombie) process other than this one whose environment carries `tag`."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(TAG_VAR) == tag and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found


def describe(processes: list[psutil.Process]) -> str:
    parts = []
    for process in processes:
        try:
            parts.append(f"{process.pid} {' '.join(process.cmdline())[:120]!r}")
        except psutil.Error:
            parts.append(f"{process.pid} (gone)")
    return "; ".join(parts) or "none"


def kill_group_and_process(process: psutil.Process) -> None:
    """SIGKILL `process`'s process group (workers and commands lead their own) and the process."""
    try:
        if not alive(process):
            return
        pgid = os.getpgid(process.pid)
        if pgid != os.getpgrp():
            os.killpg(pgid, signal.SIGKILL)
        process.send_signal(signal.SIGKILL)
    except (OSError, psutil.Error):
        pass


class HostScript:
    """`host_main.py` in its own session; stdout and stderr go to files the test polls."""

    def __init__(self, state_dir: Path, log_dir: Path, index: int, *, workflow: str | None = None,
                 input: Any = None, lease_s: float = 5.0) -> None:
        self.out_path = log_dir / f"host-{index}.out"
        self.err_path = log_dir / f"host-{index}.err"
        args = [sys.executable, str(HOST_MAIN), "--state-dir", str(state_dir), "--lease-s", str(lease_s)]
        if workflow is not None:
            args += ["--workflow", workflow, "--input", json.dumps(input)]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True, cwd="/")
        self.process = psutil.Process(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.err_path.read_text(errors="replace")

    def value(self, key: str, timeout: float = 20.0) -> str:
        """Wait for the stdout line `KEY value`; fail if the process exits first."""

        def find() -> str | None:
            for line in self.out_path.read_text().splitlines():
                if line.startswith(key + " "):
                    return line.split(" ", 1)[1]
            if self.proc.poll() is not None:
                pytest.fail(f"host script exited with {self.proc.returncode} before printing {key}:\n{self.log()}")
            return None

        return wait_for(find, timeout, lambda: f"{key} from the host script; log:\n{self.log()}")

    def descendants(self) -> list[psutil.Process]:
        try:
            return self.process.children(recursive=True)
        except psutil.Error:
            return []

    def sigkill(self) -> int:
        """SIGKILL the host's whole process group (its workers lead their own sessions and stay)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(10)


class Guard:
    """Owns everything one test starts; see the module docstring."""

    def __init__(self, tag: str, log_dir: Path) -> None:
        self.tag = tag
        self.log_dir = log_dir
        self.hosts: list[HostHandle] = []
        self.scripts: list[HostScript] = []
        self.tracked: list[psutil.Process] = []

    def start_host(self, state_dir: Path, **config: Any) -> HostHandle:
        settings = {"lease_s": 5.0, "max_workers": 2, "warm_workers": 1, "reap_grace_s": 0.5, **config}
        host = start_host(HostConfig(state_dir=state_dir, **settings))
        self.hosts.append(host)
        return host

    def host_script(self, state_dir: Path, **kwargs: Any) -> HostScript:
        script = HostScript(state_dir, self.log_dir, len(self.scripts), **kwargs)
        self.scripts.append(script)
        return script

    def track(self, pid: int) -> psutil.Process:
        process = psutil.Process(pid)
        self.tracked.append(process)
        return process

    def teardown(self) -> list[str]:
        problems: list[str] = []
        for host in self.hosts:
            _let_finished_runners_retire(host)
        for host in reversed(self.hosts):
            try:
                host.stop("test teardown")
            except Exception as exc:  # keep tearing down; report it
                problems.append(f"host.stop raised {type(exc).__name__}: {exc}")
        for script in self.scripts:
            if script.proc.poll() is None:
                # Killed by the teardown itself: nobody will reap its workers, so the test does.
                children = script.descendants()
                script.sigkill()
                for child in children:
                    kill_group_and_process(child)
            else:
                script.proc.wait(10)
        deadline = time.monotonic() + 10
        while True:
            left = [p for p in tagged_processes(self.tag) + self.tracked if alive(p)]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        if left:
            problems.append(f"processes of the test still alive after teardown: {describe(left)}")
            for process in left:
                kill_group_and_process(process)
        return problems


def _let_finished_runners_retire(host: HostHandle, timeout: float = 5.0) -> None:
    """Before stopping a host, give runners of runs that already ended a moment to hand their
    worker back: stopping the host inside that window leaks the worker (a library bug with a
    test of its own in test_recovery_host_stop.py), which would make unrelated tests flaky."""
    if host.stopped:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            active = host.status()["scheduler"]["active"]
            ended = [a for a in active if (host.get_run(a["run_id"]) or {}).get("status") in SETTLED]
        except Exception:
            return
        if not ended:
            return
        time.sleep(POLL_S)


SETTLED = ("done", "failed", "cancelled", "parked")


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Guard]:
    """A `Guard` whose tag is in this process's environment while the test runs, so every
    host, worker and shell command the test causes inherits it."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_VAR, tag)
    keeper = Guard(tag, tmp_path)
    try:
        yield keeper
    finally:
        problems = keeper.teardown()
        if problems:
            pytest.fail("teardown: " + " | ".join(problems), pytrace=False)


def active_worker(host: HostHandle, run_id: str, timeout: float = 10.0) -> int:
    """The pid of the worker process serving `run_id` (from the scheduler's status)."""

    def find() -> int | None:
        for active in host.status()["scheduler"]["active"]:
            if active["run_id"] == run_id:
                return int(active["pid"])
        return None

    return wait_for(find, timeout, f"an active worker for run {run_id}")


def wait_for_oracle(oracle: Oracle, node_id: str, timeout: float = 15.0, count: int = 1) -> None:
    wait_for(lambda: oracle.counts()[node_id] >= count, timeout,
             lambda: f"{count} execution(s) of {node_id} in the oracle (have {oracle.nodes()})")


def wait_for_status(host: HostHandle, run_id: str, statuses: tuple[str, ...], timeout: float = 20.0) -> dict:
    """`host.wait_for_run` that fails the test (with the run view and events) instead of raising."""
    try:
        return host.wait_for_run(run_id, statuses, timeout=timeout)
    except TimeoutError as exc:
        view = host.get_run(run_id)
        trace = [(e["seq"], e["kind"], e["node_id"], e["payload"]) for e in host.run_events(run_id)]
        pytest.fail(f"{exc}\nview: {view}\nevents: {trace}")
