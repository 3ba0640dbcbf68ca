"""Shared helpers for the crash/recovery and run-control tests.

- `guard` (a pytest fixture; import it into the test module): tags every
  process the test starts with a unique environment variable, starts
  in-process hosts and host subprocesses for the test, and in teardown stops
  and kills all of them and then checks with psutil that no tagged process
  (host, worker, shell command) is left alive (`testsupport.ProcessGuard`).
- `Oracle`: the execution log the workflow nodes write outside the database.
- `rows`: read the state database through the test's own read-only sqlite3
  connection (works while no host is running, e.g. right after a SIGKILL).
- `wait_for`: poll a predicate with a deadline (never a bare sleep).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from testsupport import (  # noqa: F401 (re-exported for the test modules)
    POLL_S,
    HostScript,
    ProcessGuard,
    alive,
    events,
    guarded,
    host_script_args,
    kill_group_and_process,
    replaced_host_lease_s,
    rows,
    wait_for,
)
from testsupport import tagged_processes as _tagged_processes

from piwf_actors import HostHandle

WF = Path(__file__).resolve().parent
REPO = WF.parents[2]
FLOWS = WF / "recovery_flows.py"
TAG_VAR = "PIWF_RECOVERY_TEST_TAG"


def flow(attr: str) -> str:
    """The `run.start` spec of a workflow in recovery_flows.py."""
    return f"{FLOWS}:{attr}"


def edge_flow(attr: str) -> str:
    """The `run.start` spec of a workflow in edge_flows.py."""
    return f"{WF / 'edge_flows.py'}:{attr}"


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


def committed_nodes(state_dir: Path, run_id: str) -> list[str]:
    """Node ids whose result is committed (`node_finished` events), in order."""
    return [e["node_id"] for e in events(state_dir, run_id) if e["kind"] == "node_finished"]


# --- processes ------------------------------------------------------------------------------


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Every live (non-zombie) process other than this one whose environment carries `tag`."""
    return _tagged_processes(TAG_VAR, tag)


class Guard(ProcessGuard):
    """Owns everything one test starts; see the module docstring."""

    def __init__(self, tag: str, log_dir: Path) -> None:
        super().__init__(TAG_VAR, tag, log_dir)

    def host_script(self, state_dir: Path, *, workflow: str | None = None, input: Any = None,
                    lease_s: float | None = None) -> HostScript:
        """tests/host_script.py on `state_dir` (see `testsupport.HostScript`); the lease is
        `replaced_host_lease_s()` unless given (these hosts are there to be SIGKILLed)."""
        return self.start_script(host_script_args(state_dir, lease_s=lease_s or replaced_host_lease_s(),
                                                  workflow=workflow, input=input))

    def teardown(self) -> list[str]:
        for host in self.hosts:
            _let_finished_runners_retire(host)
        return super().teardown()


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
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: Guard(tag, tmp_path))  # type: ignore[misc]


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
