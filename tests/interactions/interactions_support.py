"""Helpers for the interaction tests: a process guard, socket clients, waits and database reads.

- `Harness` (the `ix` fixture in conftest.py) tags every process a test
  causes with an environment variable, starts in-process hosts, host
  subprocesses and `Client` connections for the test, and in teardown stops
  and kills all of them, then checks with psutil that no tagged process is
  left alive.
- `wait_for` polls a predicate with a deadline (never a bare sleep).
- `rows` / `events` read the state database through the test's own
  read-only sqlite3 connection (works while no host runs).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.client import Client

WF = Path(__file__).resolve().parent / "wf"
FLOWS = WF / "interaction_flows.py"
HOST_SCRIPT = WF / "interaction_host.py"
TAG_VAR = "PIWF_INTERACTIONS_TEST_TAG"
POLL_S = 0.02
TERMINAL = ("done", "failed", "cancelled")


def flow(attr: str) -> str:
    """The `run.start` spec of a workflow in wf/interaction_flows.py."""
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


def assert_one_line(error: Any) -> str:
    assert isinstance(error, str) and error, f"expected a one-line error, got {error!r}"
    assert "\n" not in error and "\r" not in error and len(error) <= 1000, f"not one line: {error!r}"
    return error


# --- the oracle -----------------------------------------------------------------------------


class Oracle:
    """Lines `"<node_id> <run_id>"` written by the workflow nodes, one per execution."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def counts(self, run_id: str | None = None) -> collections.Counter[str]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        pairs = [line.split(" ", 1) for line in lines if line]
        return collections.Counter(node for node, run in pairs if run_id is None or run == run_id)


# --- the database, read by the test itself -----------------------------------------------------


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


def submissions(state_dir: Path, request_id: str) -> list[dict[str, Any]]:
    found = rows(state_dir, "SELECT submission_id, outcome, payload, provenance, submitted_at "
                            "FROM interactive_submission WHERE request_id = ? ORDER BY submitted_at", (request_id,))
    for item in found:
        item["payload"] = json.loads(item["payload"])
        item["provenance"] = json.loads(item["provenance"])
    return found


def attempts(state_dir: Path, run_id: str, node_id: str) -> list[dict[str, Any]]:
    return rows(state_dir, "SELECT attempt_id, status FROM node_attempt WHERE run_id = ? AND node_id = ?",
                (run_id, node_id))


# --- clients ------------------------------------------------------------------------------------


def run_view(client: Client, run_id: str) -> dict[str, Any]:
    answer = client.request("run.get", run_id=run_id)
    assert answer.outcome == "accepted", answer
    return answer.receipt


def wait_run(client: Client, run_id: str, statuses: tuple[str, ...] = TERMINAL, *, park_reason: str | None = None,
             timeout: float = 20.0) -> dict[str, Any]:
    """Poll `run.get` until the run reaches one of `statuses` (and `park_reason` if given)."""
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        view = seen["view"] = run_view(client, run_id)
        if view["status"] in statuses and (park_reason is None or view["park_reason"] == park_reason):
            return view
        return None

    return wait_for(reached, timeout, lambda: f"run {run_id} to reach {statuses} / {park_reason}: {seen.get('view')}")


def wait_waiting(client: Client, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
    return wait_run(client, run_id, ("parked",), park_reason="waiting", timeout=timeout)


def listed(client: Client, session_id: str | None = None) -> dict[str, Any]:
    payload = {} if session_id is None else {"session_id": session_id}
    answer = client.request("interaction.list", payload)
    assert answer.outcome == "accepted", answer
    return answer.receipt


def requests_of(client: Client, run_id: str, session_id: str | None = None) -> list[dict[str, Any]]:
    return [r for r in listed(client, session_id)["requests"] if r["run_id"] == run_id]


def pending_request(client: Client, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """The one pending request of a run that parked waiting."""
    wait_waiting(client, run_id, timeout)
    found = requests_of(client, run_id)
    assert len(found) == 1, found
    return found[0]


def start(client: Client, attr: str, input: Any = None, *, session_id: str | None = None) -> str:
    receipt = client.start(flow(attr), input, session_id=session_id)
    return receipt["run_id"]


# --- processes ---------------------------------------------------------------------------------


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tagged_processes(tag: str) -> list[psutil.Process]:
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
            parts.append(f"{process.pid} (parent {process.ppid()}, {process.status()}, "
                         f"started {time.time() - process.create_time():.1f} s ago) "
                         f"{' '.join(process.cmdline())[:120]!r}")
        except psutil.Error:
            parts.append(f"{process.pid} (gone)")
    return "; ".join(parts) or "none"


def kill_group_and_process(process: psutil.Process) -> None:
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
    """wf/interaction_host.py in its own session; output goes to files the test polls."""

    def __init__(self, state_dir: Path, log_dir: Path, index: int, *, max_workers: int = 2,
                 workflow: str | None = None, input: Any = None) -> None:
        self.out_path = log_dir / f"host-{index}.out"
        self.err_path = log_dir / f"host-{index}.err"
        args = [sys.executable, str(HOST_SCRIPT), "--state-dir", str(state_dir), "--max-workers", str(max_workers)]
        if workflow is not None:
            args += ["--workflow", workflow, "--input", json.dumps(input)]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True, cwd="/")
        self.process = psutil.Process(self.proc.pid)

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
        """SIGKILL the host's process group (workers lead their own sessions); returns the exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(10)


class Harness:
    """Owns everything one test starts (hosts, host scripts, clients); see the module docstring."""

    def __init__(self, state_dir: Path, tag: str, log_dir: Path) -> None:
        self.state_dir = state_dir
        self.tag = tag
        self.log_dir = log_dir
        self.hosts: list[HostHandle] = []
        self.scripts: list[HostScript] = []
        self.clients: list[Client] = []

    def host(self, **config: Any) -> HostHandle:
        settings = {"max_workers": 2, "lease_s": 5.0, "warm_workers": 1, "reap_grace_s": 0.5, **config}
        handle = start_host(HostConfig(state_dir=self.state_dir, **settings))
        self.hosts.append(handle)
        return handle

    def client(self, client_id: str | None = None, timeout: float = 30.0) -> Client:
        client = Client(self.state_dir, client_id=client_id, timeout=timeout)
        self.clients.append(client)
        client.connect()
        return client

    def host_script(self, **kwargs: Any) -> HostScript:
        script = HostScript(self.state_dir, self.log_dir, len(self.scripts), **kwargs)
        self.scripts.append(script)
        return script

    def teardown(self) -> list[str]:
        problems: list[str] = []
        for client in self.clients:
            client.close()
        for handle in reversed(self.hosts):
            try:
                handle.stop("test teardown")
            except Exception as exc:  # keep tearing down; report it
                problems.append(f"host.stop raised {type(exc).__name__}: {exc}")
        for script in self.scripts:
            if script.proc.poll() is None:
                children = script.descendants()
                script.sigkill()
                for child in children:
                    kill_group_and_process(child)
            else:
                script.proc.wait(10)
        deadline = time.monotonic() + 10
        while True:
            left = [p for p in tagged_processes(self.tag) if alive(p)]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        if left:
            problems.append(f"processes still alive after teardown: {describe(left)}")
            for process in left:
                kill_group_and_process(process)
        return problems
