"""`bin/piwf-host` as a real process: start, signals, a second host, SIGKILL takeover, lease loss, refusals.

Each test starts real `piwf-host` children (each in its own session, stderr
to a log file the test polls with a deadline); teardown SIGKILLs any child
still running and every process left in its group (its workers). The
database is inspected through the test's own connections (testsupport: the
state directory's state.db, or its PostgreSQL database under `make test-pg`),
and the lock file with the test's own flock.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from testsupport import POLL_S, execute, host_database, host_state_row, lock_is_free, sqlite_only

REPO = Path(__file__).resolve().parents[2]
PIWF_HOST = REPO / "bin" / "piwf-host"


class HostProcess:
    """One `piwf-host` child whose stderr goes to a file the test polls."""

    def __init__(self, state_dir: Path, log_path: Path, args: list[str]) -> None:
        self.state_dir = state_dir
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in kill())
        self.proc = subprocess.Popen(
            [str(PIWF_HOST), "--state-dir", str(state_dir), *args],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd="/",
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """Wait until `text` is in the log; fail at once if the process exits first."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log()
            if text in log:
                return log
            if self.proc.poll() is not None:
                pytest.fail(f"piwf-host exited with {self.proc.returncode} before logging {text!r}:\n{self.log()}")
            if time.monotonic() >= deadline:
                pytest.fail(f"piwf-host did not log {text!r} within {timeout} s:\n{log}")
            time.sleep(POLL_S)

    def wait_exit(self, timeout: float, waiting_for: str = "it to exit") -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"piwf-host (pid {self.pid}) still running after {timeout} s waiting for {waiting_for}:\n"
                        f"{self.log()}")

    def send(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def kill(self) -> None:
        """SIGKILL the child's process group if it is still running, then reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        # Its workers share its process group (it was started in a session of its own).
        for pid in group_members(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log.close()

    def wait_group_gone(self, timeout: float) -> None:
        """Wait until no process of this host's group (the host, its workers) is left."""
        deadline = time.monotonic() + timeout
        while group_members(self.proc.pid):
            if time.monotonic() >= deadline:
                pytest.fail(f"processes of piwf-host {self.pid} still running after {timeout} s: "
                            f"{group_members(self.proc.pid)}")
            time.sleep(POLL_S)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.info["pid"]) == pgid:
                members.append(proc.info["pid"])
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


@pytest.fixture
def start_piwf_host(tmp_path: Path) -> Iterator[Callable[..., HostProcess]]:
    """Factory `start_piwf_host(state_dir, *args)`; every child is killed in teardown."""
    started: list[HostProcess] = []

    def start(state_dir: Path, *args: str) -> HostProcess:
        database = host_database(state_dir)  # under $PIWF_TEST_DATABASE=postgresql: the directory's own
        if database is not None and "--database" not in args:
            args = ("--database", database, *args)
        host = HostProcess(state_dir, tmp_path / f"host-{len(started)}.log", list(args))
        started.append(host)
        return host

    try:
        yield start
    finally:
        for host in started:
            host.kill()


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("piwf-host: error:")]


def test_help_exits_0_and_documents_state_dir() -> None:
    done = subprocess.run([str(PIWF_HOST), "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "--state-dir" in done.stdout
    assert "--lease-s" in done.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly_and_releases_lease_and_lock(state_dir, start_piwf_host, signum) -> None:
    host = start_piwf_host(state_dir)
    host.wait_for_log("host started at epoch 1")
    assert not lock_is_free(state_dir / "host.lock")
    held = host_state_row(state_dir)
    assert (held["epoch"], held["pid"]) == (1, host.pid)
    assert held["host_id"] is not None and held["expires_at"] > time.time()

    host.send(signum)
    assert host.wait_exit(10) == 0, host.log()
    host.wait_group_gone(10)  # its worker processes went with it

    log = host.log()
    assert f"received {signal.Signals(signum).name}" in log
    assert "lease for epoch 1 released" in log
    assert "host stopped" in log
    assert not error_lines(log)
    released = host_state_row(state_dir)
    assert released["epoch"] == 1  # a release keeps the epoch; the next host adds one
    assert released["host_id"] is None and released["token_hash"] is None and released["pid"] is None
    assert released["released_at"] is not None
    assert lock_is_free(state_dir / "host.lock")
    assert (state_dir / "host.lock").read_bytes() == b""  # the holder record was cleared, not left behind


def test_second_host_is_refused_naming_the_live_pid(state_dir, start_piwf_host) -> None:
    first = start_piwf_host(state_dir)
    first.wait_for_log("host started at epoch 1")

    second = start_piwf_host(state_dir)
    assert second.wait_exit(10) == 1
    errors = error_lines(second.log())
    assert len(errors) == 1, second.log()
    assert f"pid {first.pid}" in errors[0]
    assert str(state_dir) in errors[0]

    # The refused host changed nothing: the first one still holds epoch 1 and keeps running.
    row = host_state_row(state_dir)
    assert (row["epoch"], row["pid"]) == (1, first.pid)
    assert first.proc.poll() is None
    first.send(signal.SIGTERM)
    assert first.wait_exit(10) == 0, first.log()


@sqlite_only("the lock file guards only the state directory's own state.db; on a shared database the next "
             "host waits out the lease as a standby (docs/standby.md; test_standby_failover.py on PostgreSQL)")
def test_takeover_after_sigkill_does_not_wait_for_lease_expiry(state_dir, start_piwf_host) -> None:
    first = start_piwf_host(state_dir, "--lease-s", "30")
    first.wait_for_log("host started at epoch 1")
    first.send(signal.SIGKILL)
    assert first.wait_exit(10) == -signal.SIGKILL
    first.wait_group_gone(10)  # its idle workers notice the host is gone and exit by themselves

    # The dead host's lease is still on record and far from expiry; its lock record is stale.
    stale = host_state_row(state_dir)
    assert (stale["epoch"], stale["pid"]) == (1, first.pid)
    assert stale["host_id"] is not None and stale["expires_at"] > time.time() + 20
    assert str(first.pid) in (state_dir / "host.lock").read_text()
    assert lock_is_free(state_dir / "host.lock")  # the kernel dropped the flock with the process

    second = start_piwf_host(state_dir, "--lease-s", "30")
    # Well inside the 30 s lease: the new host saw that pid + start time are gone.
    second.wait_for_log("host started at epoch 2", timeout=10)
    row = host_state_row(state_dir)
    assert (row["epoch"], row["pid"]) == (2, second.pid)
    assert row["expires_at"] > time.time()

    second.send(signal.SIGTERM)
    assert second.wait_exit(10) == 0, second.log()
    assert host_state_row(state_dir)["host_id"] is None


def test_host_that_loses_its_lease_exits_1(state_dir, start_piwf_host) -> None:
    lease_s = 1.5
    host = start_piwf_host(state_dir, "--lease-s", str(lease_s))
    host.wait_for_log("host started at epoch 1")

    # Another host takes over behind this one's back: new epoch, new token.
    assert execute(state_dir, "UPDATE host_state SET epoch = epoch + 1, token_hash = 'other', host_id = 'intruder' "
                              "WHERE id = 1") == 1

    # The next renewal (every lease_s / 3) is refused and the host stops. How soon: bench/latency.py;
    # here only a generous bound.
    assert host.wait_exit(60, "the host to stop on losing its lease") == 1, host.log()
    host.wait_group_gone(10)
    log = host.log()
    assert "lease for epoch 1 lost" in log
    assert "piwf-host: stopped: lease for epoch 1 lost" in log
    assert "lease for epoch 1 released" not in log  # it must not release a lease that is not its own
    row = host_state_row(state_dir)
    assert (row["epoch"], row["host_id"], row["token_hash"]) == (2, "intruder", "other")
    assert lock_is_free(state_dir / "host.lock")


def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine, not piwf''s')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize(("write_file", "reason"), [
    pytest.param(lambda p: p.write_bytes(b""), "the file is empty (0 bytes)", id="empty"),
    pytest.param(lambda p: p.write_bytes(b"definitely not a database\n" * 200), "not a SQLite database",
                 id="garbage"),
    # (Page size 4096 and the rollback journal's format versions fixed: random bytes there could name
    # WAL mode, whose reading leaves a -wal file next to the damaged one.)
    pytest.param(lambda p: p.write_bytes(b"SQLite format 3\x00\x10\x00\x01\x01" + os.urandom(8188)),
                 "cannot be read", id="sqlite-header-then-garbage"),
    pytest.param(_foreign_sqlite, "not a piwf state database", id="foreign-sqlite"),
])
@sqlite_only("damaged or foreign state.db files; PostgreSQL's refusals are in tests/store/test_postgres.py")
def test_refuses_a_damaged_database_and_leaves_it_untouched(state_dir, start_piwf_host, write_file,
                                                            reason) -> None:
    database = state_dir / "state.db"
    write_file(database)
    before = (hashlib.sha256(database.read_bytes()).hexdigest(), os.stat(database).st_mtime_ns)

    host = start_piwf_host(state_dir)
    assert host.wait_exit(10) == 1, host.log()

    errors = error_lines(host.log())
    assert len(errors) == 1, host.log()
    assert errors[0].startswith(f"piwf-host: error: refusing state database {database}: ")
    assert reason in errors[0]
    assert (hashlib.sha256(database.read_bytes()).hexdigest(), os.stat(database).st_mtime_ns) == before
    assert not Path(f"{database}-wal").exists()
    assert lock_is_free(state_dir / "host.lock")
