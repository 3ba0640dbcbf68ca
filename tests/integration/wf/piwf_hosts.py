"""Real `bin/piwf-host` processes for the flow-control tests (test_flow_crashes.py,
test_pg_limit_stress.py), and the oracle those tests read: the lines the nodes of `flow_flows.py`
append, and the most executions they show open at one instant."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from testsupport import BIN_PIWF_HOST, HostScript, host_database, replaced_host_lease_s, wait_for
from wf.harness import Guard

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning
from piwf_actors.errors import PiwfError


def piwf_host(guard: Guard, state_dir: Path, *extra: str, workers: int = 4, database: str | None = None,
              lease_s: float | None = None) -> HostScript:
    """A real `bin/piwf-host` on `state_dir` (its state.db, or under $PIWF_TEST_DATABASE=postgresql
    the directory's own database); returns its script once it serves (`role` active or runner)."""
    database = database or host_database(state_dir)
    args = ["--state-dir", str(state_dir), "--max-workers", str(workers),
            "--lease-s", str(lease_s or replaced_host_lease_s()), *extra]
    if database is not None:
        args += ["--database", database]
    script = guard.start_script(args, command=[BIN_PIWF_HOST])
    role = "runner" if "runner" in extra else "active"

    def serving() -> bool:
        if script.proc.poll() is not None:
            pytest.fail(f"piwf-host exited with {script.proc.returncode}:\n{script.log()}")
        try:
            with Client(state_dir, timeout=2, retries=0) as client:
                return client.status()["role"] == role
        except (HostNotRunning, OSError, TimeoutError, PiwfError):
            return False

    wait_for(serving, 30, lambda: f"piwf-host on {state_dir} to serve as {role}; log:\n{script.log()}", poll=0.05)
    return script


def sigkill(guard: Guard, script: HostScript) -> float:
    """SIGKILL the host's process group; returns the time just before the signal. Its workers lead
    sessions of their own and live on until the next host reaps them (they are tracked)."""
    for worker in script.descendants():
        guard.track(worker.pid)
    killed_at = time.time()
    assert script.sigkill() == -signal.SIGKILL
    return killed_at


def oracle_lines(path: Path) -> list[list[str]]:
    """The oracle's lines, split into words ([] before the first line is written)."""
    try:
        return [line.split(" ") for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an interval ending when another starts does not
    overlap it)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most
