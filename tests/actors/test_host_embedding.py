"""Embedding: hosts inside an application's own pykka process.

Two hosts on two state directories run beside an application actor; stopping
them (or one of them failing) touches nothing they did not start: no thread,
child process, open file or lock is left behind, and the application's actor
keeps running. Also: a start that is refused leaves nothing running, and
successive hosts on one directory take successive epochs. (The embedding
API's results and subscriptions: test_embed_api.py; the example application:
tests/examples/test_embed_app.py.)

"Nothing left" is checked by polling with a deadline (an actor's thread ends
a moment after its stop future is answered). pytest-timeout's own timer
thread (a `threading.Timer`) is not the host's and is ignored.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
from testsupport import (
    host_state_row,
    hosts_on_postgres,
    live_children,
    lock_is_free,
    sqlite_only,
    state_database,
    wait_for,
)

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.actors.hostlock import process_start_identity
from piwf_actors.errors import HostAlreadyRunning, StoreRefused
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import open_store
from piwf_actors.store.requests import WriteCommand

# --- what "nothing left running" means ------------------------------------------------


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if not isinstance(t, threading.Timer)}


def _open_files_under(*dirs: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if any(target.startswith(f"{d}/") for d in dirs):
            found.append(target)
    return found


class Snapshot:
    """Threads, child processes and actors alive at one moment."""

    def __init__(self) -> None:
        self.threads = _threads()
        self.children = live_children()
        self.actors = set(pykka.ActorRegistry.get_all())

    def extra(self) -> dict[str, list[Any]]:
        return {
            "threads": sorted(t.name for t in _threads() - self.threads),
            "children": sorted(live_children() - self.children),
            "actors": sorted(str(a) for a in set(pykka.ActorRegistry.get_all()) - self.actors),
        }

    def wait_back(self, timeout: float = 10.0) -> None:
        """Wait until nothing started after this snapshot is still alive."""
        wait_for(lambda: not any(self.extra().values()), timeout, lambda: f"leftovers to go: {self.extra()}")


# --- fixtures -----------------------------------------------------------------------


class AppCounter(pykka.ThreadingActor):
    """The embedding application's own actor: counts what it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def on_receive(self, message: Any) -> Any:
        if message == "count":
            return self.count
        self.count += 1
        return None


@pytest.fixture
def app_actor() -> Iterator[pykka.ActorRef[Any]]:
    ref = AppCounter.start()
    try:
        yield ref
    finally:
        ref.stop()


def _fenced_write_ok(host: HostHandle) -> bool:
    """A harmless write fenced by the host's epoch: it commits only while the host owns its lease."""
    result = host.writer.execute("child.release", {"pid": 0, "create_time": 0.0}, timeout=10)
    return result.ok


# --- tests --------------------------------------------------------------------------


def test_two_hosts_beside_an_app_actor_stop_without_leftovers(state_dir, other_state_dir, app_actor,
                                                               hosts) -> None:
    before = Snapshot()
    first = hosts(state_dir, lease_s=2)
    second = hosts(other_state_dir, lease_s=2)
    subscription = first.subscribe(app_actor)  # an actor of the host's, told nothing while no run runs
    assert (first.epoch, second.epoch) == (1, 1)
    assert not lock_is_free(state_dir / "host.lock") and not lock_is_free(other_state_dir / "host.lock")
    assert _fenced_write_ok(first) and _fenced_write_ok(second)
    assert first.status()["state_dir"] == str(state_dir)
    assert second.status()["state_dir"] == str(other_state_dir)
    app_actor.tell("hello")

    first.stop("test: first done")
    assert first.stopped and not second.stopped and not subscription.active
    assert lock_is_free(state_dir / "host.lock") and not lock_is_free(other_state_dir / "host.lock")
    assert _fenced_write_ok(second)  # stopping one host left the other alone
    assert second.status()["lease"]["epoch"] == 1

    second.stop("test: second done")
    before.wait_back()
    assert app_actor.is_alive()
    assert app_actor.ask("count", timeout=5) == 1
    assert lock_is_free(state_dir / "host.lock") and lock_is_free(other_state_dir / "host.lock")
    assert _open_files_under(state_dir, other_state_dir) == []
    assert host_state_row(state_dir)["host_id"] is None and host_state_row(other_state_dir)["host_id"] is None


def test_core_actor_failure_stops_only_that_host(state_dir, other_state_dir, app_actor, hosts) -> None:
    before = Snapshot()
    survivor = hosts(other_state_dir, lease_s=0.6)
    with_survivor = Snapshot()
    failing = hosts(state_dir, lease_s=0.6)
    assert _fenced_write_ok(failing)

    failing.writer.ref.tell(object())  # the writer cannot handle it: a crash in a tell handler
    assert failing.wait(10)
    assert "writer" in (failing.stop_reason or "")
    with_survivor.wait_back()  # the failed host's actors, ticker, workers and stop thread are gone
    assert lock_is_free(state_dir / "host.lock")
    assert _open_files_under(state_dir) == []

    # The other host and the application's actor did not notice.
    assert not survivor.stopped
    assert _fenced_write_ok(survivor)
    heartbeat = host_state_row(other_state_dir)["heartbeat_at"]
    wait_for(lambda: host_state_row(other_state_dir)["heartbeat_at"] > heartbeat, 5, "the survivor's next lease renewal")
    assert survivor.status()["lease"]["lost"] is False
    assert app_actor.is_alive()

    survivor.stop()
    before.wait_back()
    assert app_actor.is_alive()


def test_start_on_a_held_state_dir_raises_and_leaves_nothing_running(state_dir, hosts) -> None:
    holder = hosts(state_dir, lease_s=2)
    settled = Snapshot()
    lock_fds = _open_files_under(state_dir).count(str(state_dir / "host.lock"))
    assert lock_fds == 1  # the holder's

    with pytest.raises(HostAlreadyRunning) as refused:
        start_host(HostConfig(state_dir=state_dir, lease_s=2))
    assert refused.value.pid == os.getpid()  # the lock file names the live holder: this process
    assert str(state_dir) in str(refused.value)

    assert settled.extra() == {"threads": [], "children": [], "actors": []}
    assert _open_files_under(state_dir).count(str(state_dir / "host.lock")) == lock_fds  # no leaked lock fd
    assert not lock_is_free(state_dir / "host.lock")
    assert not holder.stopped and _fenced_write_ok(holder)
    row = host_state_row(state_dir)
    assert (row["epoch"], row["pid"]) == (1, os.getpid())


@sqlite_only("a state.db file whose bytes are no SQLite database; PostgreSQL's refusals (another "
             "application's tables, a newer schema) are tested in tests/store/test_postgres.py")
def test_start_on_a_refused_database_raises_and_leaves_nothing_running(state_dir) -> None:
    database = state_dir / "state.db"
    database.write_bytes(b"\x00" * 4096)
    before = Snapshot()

    with pytest.raises(StoreRefused) as refused:
        start_host(HostConfig(state_dir=state_dir))
    assert "not a SQLite database" in str(refused.value)

    assert before.extra() == {"threads": [], "children": [], "actors": []}
    assert lock_is_free(state_dir / "host.lock")  # taken before the check, released by the failed start
    assert _open_files_under(state_dir) == []
    assert database.read_bytes() == b"\x00" * 4096


def test_start_stop_cycles_on_one_dir_take_successive_epochs(state_dir, hosts) -> None:
    before = Snapshot()
    for expected in (1, 2):
        host = hosts(state_dir, lease_s=2)
        assert host.epoch == expected
        assert host_state_row(state_dir)["epoch"] == expected
        host.stop()
        row = host_state_row(state_dir)
        assert (row["epoch"], row["host_id"]) == (expected, None)
    before.wait_back()


def test_restart_in_the_same_process_after_a_core_failure(state_dir, hosts) -> None:
    shared = hosts_on_postgres()
    lease_s = 2.0 if shared else 30.0
    failed = hosts(state_dir, lease_s=lease_s)
    failed.writer.ref.tell(object())
    assert failed.wait(10)
    # The writer died first, so the lease could not be released and is still on record ...
    held = host_state_row(state_dir)
    assert (held["epoch"], held["pid"]) == (1, os.getpid()) and held["host_id"] is not None
    assert lock_is_free(state_dir / "host.lock")
    restarted = hosts(state_dir, lease_s=lease_s)
    if not shared:
        # ... but this process holds the lock file now, so no live host can own it: no 30 s wait.
        assert held["expires_at"] > time.time() + 20
        assert restarted.epoch == 2
    else:
        # ... and on a database the lock file does not guard, the lock proves nothing about other
        # hosts (other state directories, other machines): the new host waits as a standby until
        # the dead holder's lease has run out, then takes over (docs/standby.md).
        assert restarted.wait_active(lease_s + 5), restarted.role
        assert restarted.epoch == 2
        assert host_state_row(state_dir)["started_at"] >= held["expires_at"]
    assert _fenced_write_ok(restarted)


def test_live_lease_holder_without_the_lock_file_is_not_displaced(state_dir, hosts) -> None:
    # A live host whose lock file was deleted under it still holds the lease row: the lock
    # alone must not let a new host displace it (the lease row is the second fence).
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], stdin=subprocess.DEVNULL)
    try:
        db = open_store(state_database(state_dir))
        try:
            taken = apply_batch(db, [WriteCommand("lease.acquire", {
                "host_id": "elsewhere", "token_hash": "t" * 64, "pid": holder.pid,
                "process_start_identity": process_start_identity(holder.pid), "lease_s": 600,
            })], time.time()).results[0]
        finally:
            db.close()
        assert taken.ok, taken.error
        before = Snapshot()

        # On PostgreSQL a host would wait as a standby by default (test_standby_roles.py); refusing
        # is what is compared here.
        with pytest.raises(HostAlreadyRunning) as refused:
            hosts(state_dir, lease_s=2, **({"standby": False} if hosts_on_postgres() else {}))
        assert f"pid {holder.pid}" in str(refused.value)

        before.wait_back()  # the writer and supervisor it had started are gone again
        assert lock_is_free(state_dir / "host.lock")
        assert _open_files_under(state_dir) == []
        row = host_state_row(state_dir)
        assert (row["epoch"], row["pid"], row["host_id"]) == (1, holder.pid, "elsewhere")
    finally:
        holder.kill()
        holder.wait(10)
