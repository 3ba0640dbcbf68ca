"""Leases that other commands cannot sink: three hosts contending on PostgreSQL lose no lease.

The active host and two runner hosts (3 workers each, 3 s leases, real `bin/piwf-host` processes)
share one PostgreSQL database and waves of 300 runs of one workflow under `limit(2, key=…)`, all
with the same key: while two runs execute, seven idle workers keep claiming, and the hosts' claim
transactions keep failing serialization against each other. A lease renewal that rode in such a
batch used to be given up with it after `CONFLICT_RETRIES` ("runner lease renewal failed (2 in a
row) … lost", and the runner host stopped); a renewal travels in a transaction of its own now,
and does not wait for another batch's retries (store/batch_plan.py).

The scenario is repeated, `WAVES` waves of 300 runs on the same three hosts, because the loss
depended on timing (before the fix about one wave in three failed a renewal). After each wave:
every run finished, and no lease was lost or even failed to renew — the hosts' logs say nothing
of it, and all three still run. At the end: the contention happened (batches were given up after
every retry failed, as the renewals' used to be), every lease row still names its first epoch and
is unexpired, and the hosts serve in their roles.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from testsupport import BIN_PIWF_HOST, database_rows, wait_for
from wf import harness
from wf.harness import WF

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

LEASE_S = 3.0
WORKERS = 3
RUNS = 300
WAVES = 3
HOSTS = ("host-a", "runner-1", "runner-2")
#: What a host logs when a lease renewal fails or a lease is lost (actors/lease.py, runner_lease.py).
LEASE_TROUBLE = re.compile(r"lease renewal failed|lease of .* lost|lease .* lost:|LeaseLost|lease_lost")


def _start(guard, state_dir: Path, database: str, name: str, *extra: str):
    return guard.start_script(["--state-dir", str(state_dir / name), "--database", database, "--host-id", name,
                               "--lease-s", str(LEASE_S), "--max-workers", str(WORKERS), "--log-level", "INFO",
                               *extra], command=[BIN_PIWF_HOST])


def _status(state_dir: Path) -> dict[str, Any] | None:
    try:
        with Client(state_dir, timeout=5, retries=0) as client:
            return client.status()
    except (HostNotRunning, OSError, TimeoutError):
        return None


def _serving(state_dir: Path, role: str, script) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        if script.proc.poll() is not None:
            pytest.fail(f"{state_dir.name} exited with {script.proc.returncode}:\n{script.log()}")
        status = _status(state_dir)
        return status if status is not None and status["role"] == role else None

    return wait_for(check, 30, lambda: f"{state_dir.name} to serve as {role}; log:\n{script.log()}", poll=0.05)


def _log_tail(script, lines: int = 60) -> str:
    return "\n".join([line for line in script.log().splitlines() if "piwf_actors.runs:" not in line][-lines:])


def _lease_trouble(scripts: dict[str, Any]) -> dict[str, list[str]]:
    return {name: lines for name, script in scripts.items()
            if (lines := [line for line in script.log().splitlines() if LEASE_TROUBLE.search(line)])}


def _start_run(client: Client, index: str) -> str:
    """Start one run of `keyed`; a start whose batch was given up for conflicts (`unavailable`) is sent
    again under the same idempotency key, as a client should."""
    key = f"start-{index}"
    deadline = time.monotonic() + 30
    while True:
        response = client.request("run.start", {"workflow": f"{WF / 'lease_flows.py'}:keyed",
                                                "input": {"key": "one", "sleep": 0}}, idempotency_key=key)
        if response.ok:
            return response.receipt["run_id"]
        if response.outcome != "unavailable" or time.monotonic() >= deadline:
            pytest.fail(f"run.start {index}: {response.outcome}: {response.error}")


def _check_hosts(scripts: dict[str, Any], wave: int) -> None:
    """Fail at once if a host logged lease trouble or exited."""
    if trouble := _lease_trouble(scripts):
        pytest.fail(f"wave {wave}: a lease renewal failed: {trouble}\n"
                    + "\n".join(f"--- {name}, the end of its log but finished runs:\n{_log_tail(scripts[name])}"
                                for name in trouble))
    for name, script in scripts.items():
        if script.proc.poll() is not None:
            pytest.fail(f"wave {wave}: {name} exited with {script.proc.returncode}:\n{script.log()[-5000:]}")


def _wave(state_dir: Path, url: str, scripts: dict[str, Any], wave: int) -> None:
    """Start RUNS runs, wait until all of them are done, checking the hosts all along."""
    _check_hosts(scripts, wave)
    try:
        with Client(state_dir / "host-a") as client:
            run_ids = [_start_run(client, f"{wave}-{index}") for index in range(RUNS)]
    except HostNotRunning:
        _check_hosts(scripts, wave)  # says which host exited, with its log
        raise
    assert len(set(run_ids)) == RUNS

    def finished() -> int:
        _check_hosts(scripts, wave)
        return database_rows(url, "SELECT count(*) AS n FROM run WHERE status IN "
                                  "('done', 'failed', 'cancelled')")[0]["n"]

    wait_for(lambda: finished() == wave * RUNS, 120,
             lambda: f"every run of wave {wave} to finish ({finished()} of {wave * RUNS})", poll=0.2)
    assert database_rows(url, "SELECT DISTINCT status FROM run") == [{"status": "done"}]
    _check_hosts(scripts, wave)


# Three hosts with 3 s leases on a loaded 2-core machine (this file beside the rest of the suite) can
# lose a lease to the machine rather than to the contention under test: `make test-slow` runs it alone.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_no_lease_is_lost_while_three_hosts_contend_for_runs_under_one_limit(
        guard, state_dir: Path, pg_database) -> None:
    url = pg_database.url
    scripts = {"host-a": _start(guard, state_dir, url, "host-a")}
    _serving(state_dir / "host-a", "active", scripts["host-a"])
    for name in HOSTS[1:]:
        scripts[name] = _start(guard, state_dir, url, name, "--role", "runner")
    for name in HOSTS[1:]:
        _serving(state_dir / name, "runner", scripts[name])

    for wave in range(1, WAVES + 1):
        _wave(state_dir, url, scripts, wave)

    # The scenario happened: the hosts' transactions conflicted, and some batches were given up.
    statuses = {name: _status(state_dir / name) for name in HOSTS}
    assert all(statuses.values()), f"a host stopped serving: {statuses}"
    retries = {name: status["writer"]["conflict_retries"] for name, status in statuses.items()}
    given_up = {name: status["writer"]["conflicts_given_up"] for name, status in statuses.items()}
    print(f"conflict retries {retries}, batches given up {given_up}")
    assert sum(given_up.values()) > 0, (f"no batch was given up for conflicts, so nothing was proved: retries "
                                        f"{retries}, given up {given_up}")

    # No lease was lost, nor failed to renew: each row still names its first epoch, unexpired; the
    # three hosts still run and serve in their roles.
    assert _lease_trouble(scripts) == {}
    now = time.time()
    (host,) = database_rows(url, "SELECT epoch, host_id, expires_at FROM host_state")
    assert (host["epoch"], host["host_id"]) == (1, "host-a") and host["expires_at"] > now, host
    runners = database_rows(url, "SELECT runner_id, epoch, expires_at, released_at FROM runner_host "
                                 "ORDER BY runner_id")
    assert [(r["runner_id"], r["epoch"], r["released_at"]) for r in runners] == [
        ("runner-1", 1, None), ("runner-2", 1, None)], runners
    assert all(r["expires_at"] > now for r in runners), runners
    assert [statuses[name]["role"] for name in HOSTS] == ["active", "runner", "runner"]
    assert all(script.proc.poll() is None for script in scripts.values())
