"""`piwf status` on a standby (issue 22, edge 8): the pid shown beside the active host's id and start
time is the active host's (from its lease), and the standby's own pid is labelled as its own."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cli_support import BIN, environ, piwf, wait_until
from testsupport import kill_group_and_process

from piwf_actors import HostConfig, HostHandle, start_host


@pytest.fixture
def active_and_standby(state_dir: Path, other_state_dir: Path) -> Iterator[tuple[subprocess.Popen[str], HostHandle]]:
    shared = f"sqlite://{other_state_dir}/shared.db"
    active_dir = state_dir / "a"
    process = subprocess.Popen([str(BIN / "piwf-host"), "--state-dir", str(active_dir), "--database", shared,
                                "--host-id", "host-a", "--max-workers", "1", "--log-level", "WARNING"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                               env=environ(), start_new_session=True)
    standby: HostHandle | None = None
    try:
        wait_until(lambda: (active_dir / "host.sock").exists(), 30, "the active host's socket")
        standby = start_host(HostConfig(state_dir=state_dir / "b", database=shared, host_id="host-b", max_workers=1,
                                        lease_s=300.0))
        assert standby.role == "standby"
        yield process, standby
    finally:
        if standby is not None:
            standby.stop()
        if process.poll() is None:
            kill_group_and_process(psutil.Process(process.pid))
        process.wait(10)


def test_a_standby_shows_the_active_hosts_pid_and_labels_its_own(active_and_standby, state_dir: Path) -> None:
    process, standby = active_and_standby
    receipt = json.loads(piwf(state_dir / "b", "status", "--json").stdout)
    assert receipt["role"] == "standby" and receipt["pid"] == os.getpid()
    assert receipt["active"]["host_id"] == "host-a" and receipt["active"]["pid"] == process.pid

    shown = piwf(state_dir / "b", "status")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1].strip() for line in shown.stdout.splitlines()[:12]
            if line.strip() and not line.startswith(("host", "this"))}
    this_host = next(line for line in shown.stdout.splitlines() if line.startswith("this host"))
    assert this_host.split(None, 2)[2].strip() == f"host-b (pid {os.getpid()})", shown.stdout
    assert rows["pid"] == str(process.pid), shown.stdout  # the active host's, beside its id and start time
    assert str(os.getpid()) not in shown.stdout.replace(this_host, ""), shown.stdout

