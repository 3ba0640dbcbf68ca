"""A restart right after a crash takes over, even while the dead host is an unreaped zombie.

In a container whose PID 1 reaps lazily, a SIGKILLed host stays a zombie for a
while: dead, its lock dropped by the kernel, but its pid and start time still
readable. The test plays that PID 1 itself: the host is its own child, killed
with SIGKILL and deliberately not waited for, so it is a zombie while the next
host starts on the same state directory. That host must not mistake the zombie
for a live holder (it did: "a piwf host (pid N) already holds …", exit 1).
"""

from __future__ import annotations

import os
import signal
import time

import psutil
from testsupport import host_state_row, hosts_on_postgres, lock_is_free, wait_for
from wf import harness

from piwf_actors.actors.hostlock import holder_alive
from piwf_actors.cli.host import host_gone
from piwf_actors.paths import StatePaths

guard = harness.guard


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_new_host_takes_over_from_a_sigkilled_host_that_is_still_an_unreaped_zombie(guard, state_dir) -> None:
    # On the state directory's own state.db a dead holder is displaced at once, so a long lease
    # shows the new host did not wait it out; on PostgreSQL (make test-pg) the lock file does not
    # guard the database and the new host is a standby until the short lease ran out.
    lease_s = 2.0 if hosts_on_postgres() else 30.0
    first = guard.host_script(state_dir, lease_s=lease_s)
    assert first.value("EPOCH") == "1"
    identity = host_state_row(state_dir)["process_start_identity"]

    os.killpg(first.pid, signal.SIGKILL)  # and no wait(): the test is the PID 1 that reaps late
    wait_for(lambda: _zombie(first.pid), 10, f"host pid {first.pid} to be a zombie")
    # The kernel drops the flock once the last of the host's threads has exited, which may be a
    # moment after its main thread shows as a zombie.
    wait_for(lambda: lock_is_free(state_dir / "host.lock"), 10, "the dead host's lock to be free")
    assert _zombie(first.pid)
    assert not holder_alive(first.pid, identity)
    # `piwf host stop` (which waits for this) sees the killed host as gone too.
    assert host_gone(StatePaths.resolve(state_dir))

    second = guard.host_script(state_dir, lease_s=lease_s)
    assert second.value("EPOCH", timeout=20) == "2"  # fails at once if the host exits refused
    wait_for(lambda: host_state_row(state_dir)["pid"] == second.pid, 10, "the lease row to name the new host")
    row = host_state_row(state_dir)
    assert row["epoch"] == 2 and row["expires_at"] > time.time()
    assert _zombie(first.pid), "the first host was reaped before the takeover: the test proved nothing"
    assert "already holds" not in second.log()
