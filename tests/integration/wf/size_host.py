"""One host shared by the tests of a value-size module (tests/integration/test_value_sizes*.py).

The tests of such a module only start their own runs and look at those, so one host serves them
all: a host per test would cost more than the values themselves. Teardown stops the host and checks
that none of the processes it started (workers, shell commands) is left alive.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testsupport
from testsupport import POLL_S

from piwf_actors import HostConfig, HostHandle, start_host

WF = Path(__file__).resolve().parent
SIZE_FLOWS = WF / "size_flows.py"

#: The sizes every path is tried with: over one chunk, over several, and far over the client's frame.
SIZES = [1_500_000, 3_000_000, 20_000_000]


def size_flow(attr: str) -> str:
    """The `run.start` spec of a workflow in size_flows.py."""
    return f"{SIZE_FLOWS}:{attr}"


def fan_flow(attr: str) -> str:
    """The `run.start` spec of a workflow in fan_flows.py."""
    return f"{WF / 'fan_flows.py'}:{attr}"


def shared_host(request: pytest.FixtureRequest, **config: Any) -> Iterator[SizeHost]:
    """The body of a module-scoped fixture: a host on a state directory of its own, stopped and removed
    afterwards."""
    if testsupport.hosts_on_postgres():
        request.getfixturevalue("pg_cluster")
    state_dir = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    before = testsupport.live_children()
    # The product's default lease (15 s), not the tests' 5 s: a 20 MB value keeps the writer busy for a
    # while (encoding, hashing, writing it) and on a loaded machine long enough to miss a 5 s lease;
    # these tests are about values, not leases.
    settings = {**testsupport.HOST_DEFAULTS, "max_workers": 4, "warm_workers": 2, "lease_s": 15.0, **config}
    host = start_host(HostConfig(state_dir=state_dir, database=testsupport.host_database(state_dir), **settings))
    try:
        yield SizeHost(host, state_dir)
    finally:
        host.stop("test module over")
        deadline = time.monotonic() + 10
        while testsupport.live_children() - before and time.monotonic() < deadline:
            time.sleep(testsupport.POLL_S)
        left = testsupport.live_children() - before
        shutil.rmtree(state_dir, ignore_errors=True)
        assert not left, f"processes left after the host stopped: {sorted(left)}"


class SizeHost:
    """A shared host, its state directory, and waits that poll the run's row (status and park reason)
    through the test's own connection: a view (`get_run`) reads a preview of every large value, which
    costs a read of the whole value on SQLite, and the point is to watch the run, not to load the host."""

    def __init__(self, host: HostHandle, state_dir: Path) -> None:
        self.host = host
        self.state_dir = state_dir

    def _row(self, run_id: str) -> dict[str, Any]:
        [row] = testsupport.rows(self.state_dir, "SELECT status, park_reason, park_detail, error_message FROM run "
                                                 "WHERE run_id = ?", (run_id,))
        return row

    def _until(self, run_id: str, wanted: Any, timeout: float) -> dict[str, Any]:
        """Poll until `wanted(row)`; the test fails as soon as the run ends otherwise or parks for anything
        but a wait (`no_progress`: its worker could not go on), with its status and reason."""
        deadline = time.monotonic() + timeout
        while True:
            row = self._row(run_id)
            if wanted(row):
                return row
            status, reason = row["status"], row["park_reason"]
            if status in ("done", "failed", "cancelled") or (status == "parked" and reason != "waiting"):
                pytest.fail(f"run {run_id} is {status} ({reason}): "
                            f"{str(row['error_message'] or row['park_detail'])[:500]}")
            if time.monotonic() >= deadline:
                pytest.fail(f"run {run_id} is still {status} ({reason}) after {timeout} s")
            time.sleep(POLL_S)

    def done_output(self, run_id: str, timeout: float = 60.0) -> Any:
        """The output of a run that must finish `done`."""
        self._until(run_id, lambda row: row["status"] == "done", timeout)
        view = self.host.get_run(run_id)
        assert view is not None
        return view.output

    def parked_for(self, run_id: str, timeout: float = 60.0) -> str:
        """The request id (or the wait's detail) of a run that must park waiting."""
        row = self._until(run_id, lambda row: (row["status"], row["park_reason"]) == ("parked", "waiting"), timeout)
        return str(row["park_detail"])
