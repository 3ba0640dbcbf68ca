"""A host that takes over reaps nothing it does not own.

Children are registered with the machine they run on
(`runner.termination.machine_identity`: hostname + kernel boot id). A later
host signals only those registered on its own machine (matched by pid and
create time, as before); a child registered on another machine is released
without a signal — its pid names nothing here — and the runs are recovered
all the same. Another machine is simulated by registering a real process of
this one under a different machine id: it must survive.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import psutil
from testsupport import alive, rows, wait_for

from piwf_actors import HostConfig, start_host
from piwf_actors.worker.termination import machine_identity


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def test_children_of_another_machine_are_released_unsignalled(state_dir: Path, other_state_dir: Path,
                                                              caplog) -> None:
    caplog.set_level(logging.INFO, logger="piwf_actors.actors.host")
    shared = f"sqlite://{other_state_dir}/state.db"
    here, there = _sleeper(), _sleeper()
    try:
        first = start_host(HostConfig(state_dir=state_dir / "a", database=shared, lease_s=2, max_workers=1,
                                      warm_workers=0, reap_grace_s=0.5))
        try:
            for proc, machine in ((here, machine_identity()), (there, "elsewhere/another-boot")):
                first.writer.call("child.register", {"pid": proc.pid, "create_time": psutil.Process(proc.pid)
                                                     .create_time(), "kind": "worker", "machine_id": machine})
            old_epoch = first.epoch
        finally:
            first.stop()  # it does not know these children: they stay registered, unreleased
        assert {r["pid"] for r in rows(other_state_dir, "SELECT pid FROM child_process WHERE released_at IS NULL")} \
            == {here.pid, there.pid}

        second = start_host(HostConfig(state_dir=state_dir / "b", database=shared, lease_s=2, max_workers=1,
                                       warm_workers=0, reap_grace_s=0.5))
        try:
            assert second.epoch == old_epoch + 1
            wait_for(lambda: here.poll() is not None, 5, "this machine's orphan to be reaped")
            assert alive(psutil.Process(there.pid)), "a child of another machine was signalled"
            released = rows(other_state_dir, "SELECT pid, machine_id, released_at FROM child_process")
            assert all(r["released_at"] is not None for r in released), released
            messages = " ".join(r.getMessage() for r in caplog.records)
            assert f"reaped orphan worker pid {here.pid}" in messages
            assert (f"released worker pid {there.pid} (run None) of machine elsewhere/another-boot without "
                    "signalling it") in messages
        finally:
            second.stop()
    finally:
        for proc in (here, there):
            proc.kill()
            proc.wait(5)


def test_workers_are_registered_with_this_machine(state_dir: Path, tmp_path: Path) -> None:
    host = start_host(HostConfig(state_dir=state_dir, lease_s=5, max_workers=1, warm_workers=1))
    try:
        found = wait_for(lambda: rows(state_dir, "SELECT machine_id FROM child_process WHERE kind = 'worker'"),
                         10, "the warm worker's registration")
        assert {r["machine_id"] for r in found} == {machine_identity()}
    finally:
        host.stop()
