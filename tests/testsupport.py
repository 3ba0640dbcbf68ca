"""Helpers shared by the test suites (importable from any test file: tests/ is on sys.path).

- `wait_for`: poll a predicate with a deadline (never a bare sleep).
- `rows` / `events` / `host_state_row` / `read_snapshot`: read the state
  database of a state directory through the test's own read-only connection
  (works while no host runs, e.g. right after a SIGKILL), whichever engine the
  directory's hosts use (`state_database`, `state_database_url`); `execute`
  writes to it behind the host's back (a test's intruder); `sqlite_only`
  skips, with its reason, a test about SQLite itself under
  $PIWF_TEST_DATABASE=postgresql; `lock_is_free`: check the host lock with the
  test's own flock; `dead_host_settled`: after a SIGKILL, wait until the
  database shows exactly what the dead host committed.
- `thread_waits_in`: a thread of this process is blocked waiting in a given
  function (an alarm's thread waits for the time just armed).
- `live_children`, `alive`, `tagged_processes`, `kill_group_and_process`:
  what a test started and whether it is still running.
- `HostScript`: a host subprocess script (by default tests/host_script.py) in
  its own session, with stdout and stderr in files the test polls.
- `small_filesystem`: a tmpfs of a chosen size mounted for one test (root only;
  skips elsewhere), and `fill_up` to fill it to the last byte.
- `ProcessGuard` and `guarded`: the teardown shared by the real-process test
  fixtures: every process a test causes carries a tag (an environment
  variable); teardown stops the hosts, kills the host scripts and proves with
  psutil that no tagged process is left alive.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.engines.postgresql import PostgresDatabase

POLL_S = 0.02
#: The settings of the hosts tests start, unless a test says otherwise.
HOST_DEFAULTS = {"lease_s": 5.0, "max_workers": 2, "warm_workers": 1, "reap_grace_s": 0.5}
HOST_SCRIPT = Path(__file__).resolve().parent / "host_script.py"
#: The real host command (`HostScript(..., command=[BIN_PIWF_HOST])`).
BIN_PIWF_HOST = str(Path(__file__).resolve().parents[1] / "bin" / "piwf-host")


def wait_for(predicate: Callable[[], Any], timeout: float, describe: str | Callable[[], str], *,
             poll: float = POLL_S) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {describe() if callable(describe) else describe}")
        time.sleep(poll)


# --- the database and the lock, read by the test itself ------------------------------------


#: Marks a host-level test to run twice, its hosts on SQLite and on PostgreSQL (conftest.py's
#: `host_engine`): the small integration subset the default `make test` runs on PostgreSQL.
both_engines = pytest.mark.usefixtures("host_engine")
#: The variable that puts the hosts of the whole suite on PostgreSQL (`make test-pg`).
def gated_source(name: str, release: str | None = None) -> str:
    """Python source for workflow code that blocks until the test lets it go: it creates `<name>.started`
    beside its file, then waits (60 s at most) for `<release>` there (default `<name>.release`), which the
    test creates. Where the code runs it is on an event, never on a sleep of the test's."""
    return textwrap.dedent(f"""
        import os as _os, time as _time
        _here = _os.path.dirname(_os.path.abspath(__file__))
        open(_os.path.join(_here, {name + ".started"!r}), "a").close()
        _deadline = _time.monotonic() + 60
        while not _os.path.exists(_os.path.join(_here, {release or name + ".release"!r})) and _time.monotonic() < _deadline:
            _time.sleep(0.01)
    """)


TEST_DATABASE_ENV = "PIWF_TEST_DATABASE"
#: The session's PostgreSQL cluster, once the `pg_cluster` fixture started it (conftest.py).
PG_CLUSTER: Any = None
#: state directory → the URL of its PostgreSQL database, under $PIWF_TEST_DATABASE=postgresql.
_HOST_DATABASES: dict[Path, str] = {}


def hosts_on_postgres() -> bool:
    return os.environ.get(TEST_DATABASE_ENV, "sqlite") == "postgresql"


def replaced_host_lease_s() -> float:
    """The lease of a host that a test SIGKILLs and then replaces on the same state directory.

    On the state directory's own `state.db` the next host takes over at once: the lock file guards
    that database, so a lease whose holder process is dead (pid + start time) is stale. On a database
    the lock file does not guard — every host of $PIWF_TEST_DATABASE=postgresql — nothing on this
    machine can prove that no other host uses it, so the next host starts as a standby and takes over
    when the dead host's lease runs out (docs/standby.md). A short lease keeps that wait short."""
    return 2.0 if hosts_on_postgres() else 5.0


def host_database(state_dir: Path) -> str | None:
    """The `database` a test host of `state_dir` gets: None (its state.db), or under
    $PIWF_TEST_DATABASE=postgresql a PostgreSQL database of its own, the same for every host
    started on that directory (a restart finds its state)."""
    if not hosts_on_postgres():
        return None
    if PG_CLUSTER is None:
        pytest.fail("PIWF_TEST_DATABASE=postgresql but no PostgreSQL cluster (request the pg_cluster fixture)")
    key = Path(state_dir).resolve()
    if key not in _HOST_DATABASES:
        _HOST_DATABASES[key] = PG_CLUSTER.create_database()
    return _HOST_DATABASES[key]


def sqlite_only(reason: str) -> pytest.MarkDecorator:
    """Skip a test about SQLite itself (its file, WAL, pragmas, query planner, old files) when
    $PIWF_TEST_DATABASE=postgresql puts the hosts on PostgreSQL; `reason` says why it cannot
    carry over (and, where it has one, where the PostgreSQL counterpart is tested)."""
    return pytest.mark.skipif(hosts_on_postgres(), reason=f"SQLite only: {reason}")


def state_database(state_dir: Path) -> DatabaseLocation:
    """The database the hosts of `state_dir` use in this session: its own PostgreSQL database under
    $PIWF_TEST_DATABASE=postgresql (created on first use), else `<state_dir>/state.db`."""
    url = host_database(state_dir)
    return Path(state_dir) / "state.db" if url is None else PostgresDatabase(url)


def state_database_url(state_dir: Path) -> str:
    """`state_database` as a URL (`sqlite:///…` or `postgresql://…`), e.g. for a workflow's input
    (a worker process has no test session to ask)."""
    url = host_database(state_dir)
    return f"sqlite://{(Path(state_dir) / 'state.db').absolute()}" if url is None else url


def _connect(state_dir: Path, *, read_only: bool) -> contextlib.AbstractContextManager[Any]:
    """The test's own connection to the state of `state_dir` (see `connect_database`)."""
    url = _HOST_DATABASES.get(Path(state_dir).resolve())
    return connect_database(url or f"sqlite://{Path(state_dir).absolute() / 'state.db'}", read_only=read_only)


@contextlib.contextmanager
def connect_database(url: str, *, read_only: bool = True) -> Iterator[Any]:
    """The test's own connection to the database `url` (`sqlite:///abs/path` or `postgresql://…`):
    rows as mappings, `?` placeholders; autocommit on PostgreSQL (READ ONLY when `read_only`); on
    SQLite `mode=ro` when `read_only`, else isolation_level=None (autocommit)."""
    if url.startswith(("postgresql://", "postgres://")):
        import psycopg
        from psycopg.rows import dict_row

        from piwf_actors.store.engines.pg_connection import PgConnection
        from piwf_actors.store.engines.postgresql import POSTGRESQL

        raw = psycopg.connect(url, autocommit=True, row_factory=dict_row)
        try:
            if read_only:
                raw.read_only = True
            yield PgConnection(raw, POSTGRESQL)
        finally:
            raw.close()
        return
    path = url.removeprefix("sqlite://")
    if read_only:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    else:
        conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        yield conn
    finally:
        conn.close()


def _read_only(state_dir: Path) -> contextlib.AbstractContextManager[Any]:
    return _connect(state_dir, read_only=True)


def database_rows(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """`rows` of the database `url` itself (several hosts' shared database)."""
    with connect_database(url) as conn:
        return [dict(row) for row in conn.execute(sql, params).fetchall()]


def execute(state_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> int:
    """Run one writing statement (`?` placeholders) on the state of `state_dir` in a transaction of
    its own, behind any host's back; returns the number of rows it changed."""
    with _connect(state_dir, read_only=False) as conn:
        return int(conn.execute(sql, params).rowcount)


@contextlib.contextmanager
def read_snapshot(state_dir: Path) -> Iterator[Any]:
    """A read-only connection inside one read transaction: every read sees the same committed state
    (SQLite: a deferred BEGIN; PostgreSQL: READ ONLY REPEATABLE READ)."""
    with _connect(state_dir, read_only=True) as conn:
        raw = getattr(conn, "raw", None)
        if raw is None:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")
            return
        import psycopg

        raw.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with raw.transaction():
            yield conn


def rows(state_dir: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with _read_only(state_dir) as conn:
        return [dict(row) for row in conn.execute(sql, params).fetchall()]


def dead_host_settled(state_dir: Path, timeout: float = 30.0) -> None:
    """After a SIGKILL of every host of `state_dir`: wait until what they had sent the database is
    decided, so a read shows what was committed at the kill. SQLite commits inside the host process:
    nothing to wait for. PostgreSQL may still be committing a transaction whose COMMIT a dead host
    sent: wait until no session but the test's own is left on the database (a server session ends
    once its client is gone and its statement is done)."""
    url = _HOST_DATABASES.get(Path(state_dir).resolve())
    if url is None:
        return

    def alone() -> bool:
        with connect_database(url) as conn:
            return conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid()").fetchone()["n"] == 0

    wait_for(alone, timeout, "the dead host's database sessions to end")


def host_state_row(state_dir: Path) -> dict[str, Any]:
    """The host_state row (the lease)."""
    with _read_only(state_dir) as conn:
        return dict(conn.execute("SELECT * FROM host_state WHERE id = 1").fetchone())


def events(state_dir: Path, run_id: str) -> list[dict[str, Any]]:
    found = rows(state_dir, "SELECT seq, kind, node_id, attempt_id, payload FROM run_event WHERE run_id = ? "
                            "ORDER BY seq", (run_id,))
    for event in found:
        event["payload"] = None if event["payload"] is None else json.loads(event["payload"])
    return found


def lock_is_free(lock_path: Path) -> bool:
    """True when nobody holds the flock on `lock_path` (checked by taking it and dropping it).

    flock conflicts between two open() of one file even inside one process, so this sees our own hosts."""
    fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


# --- a small disk -------------------------------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(size: str) -> Iterator[Path]:
    """A fresh tmpfs of `size` (e.g. "3m") under /tmp, unmounted afterwards; skips the test where
    mounting is not possible (not root, no tmpfs)."""
    if os.geteuid() != 0 or "tmpfs" not in Path("/proc/filesystems").read_text():
        pytest.skip("mounting a tmpfs needs root")
    mount = Path(f"/tmp/pw-fs-{os.getpid()}-{time.monotonic_ns()}")
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        mount.rmdir()


def fill_up(path: Path) -> None:
    """Write `path` until its filesystem has no byte left (appending: call it again to take what
    was freed since)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)


# --- processes ------------------------------------------------------------------------------


def per_thread(pid: int, name: str) -> list[str]:
    """`/proc/<pid>/task/<tid>/<name>` of every thread of `pid` that is still there ([] when the
    process is gone): a thread's state (`stat`), what it sleeps in (`wchan`) …"""
    found = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/{name}") as file:
                found.append(file.read())
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return found


def thread_waits_in(thread_name: str, function: str, *bound: str, **local_values: Any) -> bool:
    """A thread of this process named `thread_name` is blocked in a wait (`threading`'s, or a C call
    such as `time.sleep`, made from `function`) that `function` called, while `function`'s local
    variables hold `local_values` and the names `bound` have values: e.g. an alarm's thread waits
    for the time just armed. (A sample can land on `function`'s own code just before its wait: the
    locals asked for are what makes that moment count.)"""
    thread = next((t for t in threading.enumerate() if t.name == thread_name), None)
    frame = None if thread is None or thread.ident is None else sys._current_frames().get(thread.ident)
    innermost = frame
    while frame is not None:
        if frame.f_code.co_name == function:
            found = frame.f_locals
            if any(name not in found for name in bound) or \
                    any(found.get(name, object()) != value for name, value in local_values.items()):
                return False
            # Blocked: in threading's wait, or in `function` itself (a C call such as time.sleep).
            assert innermost is not None
            return innermost is frame or (innermost.f_code.co_filename == threading.__file__
                                          and innermost.f_code.co_name == "wait")
        frame = frame.f_back
    return False


def all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` is in the stopped state (a SIGSTOP has landed on all of them)."""
    states = [stat.rsplit(")", 1)[1].split()[0] for stat in per_thread(pid, "stat")]
    return bool(states) and all(state == "T" for state in states)


def live_children() -> set[int]:
    """Pids of this process's live (non-zombie) descendants, but for the PostgreSQL cluster the tests
    started (tests/pg_cluster.py): its server forks backends and autovacuum workers whenever it likes,
    and no host ever starts a `postgres` process, so none of them is a host's leftover (killing one,
    as a teardown that took it for one did, sends the whole cluster into crash recovery)."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and child.name() != "postgres":
                found.add(child.pid)
        except psutil.Error:
            pass
    return found


def alive(process: psutil.Process) -> bool:
    """Running and not a zombie; `is_running` compares the start time, so a reused pid reads as dead."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tagged_processes(tag_var: str, tag: str) -> list[psutil.Process]:
    """Every live (non-zombie) process other than this one whose environment has `tag_var=tag`."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get(tag_var) == tag and process.status() != psutil.STATUS_ZOMBIE:
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
    """SIGKILL `process`'s process group (workers and commands lead their own) and the process."""
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
    """A host subprocess script in its own session; stdout and stderr go to files the test polls.

    `args` are the script's command-line arguments; the script prints lines `KEY value`
    (tests/host_script.py prints `EPOCH <n>` and `RUN <run_id>`)."""

    def __init__(self, args: Sequence[str], log_dir: Path, index: int, *, script: Path = HOST_SCRIPT,
                 command: Sequence[str] | None = None) -> None:
        """`command` (e.g. `[BIN_PIWF_HOST]`) runs instead of `python script`, with the same `args`."""
        self.out_path = log_dir / f"host-{index}.out"
        self.err_path = log_dir / f"host-{index}.err"
        argv = [*(command if command is not None else (sys.executable, str(script))), *args]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=err, start_new_session=True, cwd="/")
        self.process = psutil.Process(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

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
        """SIGKILL the host's whole process group (its workers lead their own sessions and stay);
        returns the exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(10)


def host_script_args(state_dir: Path, *, workflow: str | None = None, input: Any = None,
                     **options: Any) -> list[str]:
    """Arguments for tests/host_script.py: `--state-dir`, then `--name value` for each option
    (`lease_s=1.0` gives `--lease-s 1.0`), then the workflow and its input if one is given."""
    args = ["--state-dir", str(state_dir)]
    database = host_database(state_dir)
    if database is not None and "database" not in options:
        args += ["--database", database]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    if workflow is not None:
        args += ["--workflow", workflow, "--input", json.dumps(input)]
    return args


class ProcessGuard:
    """Owns the hosts and host scripts one test starts and the processes it tracks; `teardown`
    stops and kills them all and reports any process carrying the test's tag still alive."""

    def __init__(self, tag_var: str, tag: str, log_dir: Path) -> None:
        self.tag_var = tag_var
        self.tag = tag
        self.log_dir = log_dir
        self.hosts: list[HostHandle] = []
        self.scripts: list[HostScript] = []
        self.tracked: list[psutil.Process] = []

    def start_host(self, state_dir: Path, **config: Any) -> HostHandle:
        """An in-process host (`HOST_DEFAULTS`, overridden by `config`), stopped in teardown."""
        config.setdefault("database", host_database(state_dir))
        host = start_host(HostConfig(state_dir=state_dir, **{**HOST_DEFAULTS, **config}))
        self.hosts.append(host)
        return host

    def start_successor(self, state_dir: Path, *, timeout: float = 20.0, **config: Any) -> HostHandle:
        """`start_host` on a state directory whose host was SIGKILLed (with a lease of
        `replaced_host_lease_s()`); returns once the new host is active. On its own `state.db` it is
        active at once (checked); on PostgreSQL it is a standby until the dead host's lease ran out."""
        host = self.start_host(state_dir, **config)
        if not hosts_on_postgres():
            assert host.role == "active", "a host on its own state.db takes over from a dead holder at once"
        elif not host.wait_active(timeout):
            pytest.fail(f"the host on {state_dir} did not take over within {timeout} s (role {host.role})")
        return host

    def start_script(self, args: Sequence[str], *, command: Sequence[str] | None = None) -> HostScript:
        script = HostScript(args, self.log_dir, len(self.scripts), command=command)
        self.scripts.append(script)
        return script

    def track(self, pid: int) -> psutil.Process:
        process = psutil.Process(pid)
        self.tracked.append(process)
        return process

    def teardown(self) -> list[str]:
        problems: list[str] = []
        for host in reversed(self.hosts):
            try:
                host.stop("test teardown")
            except Exception as exc:  # keep tearing down; report it
                problems.append(f"host.stop raised {type(exc).__name__}: {exc}")
        for script in self.scripts:
            if script.proc.poll() is None:
                # Killed by the teardown itself: nobody will reap its workers, so the test does.
                children = script.descendants()
                script.sigkill()
                for child in children:
                    kill_group_and_process(child)
            else:
                script.proc.wait(10)
        deadline = time.monotonic() + 10
        while True:
            left = [p for p in tagged_processes(self.tag_var, self.tag) + self.tracked if alive(p)]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        if left:
            problems.append(f"processes of the test still alive after teardown: {describe(left)}")
            for process in left:
                kill_group_and_process(process)
        return problems


def guarded(monkeypatch: pytest.MonkeyPatch, tag_var: str,
            make: Callable[[str], ProcessGuard]) -> Iterator[ProcessGuard]:
    """The body of a guard fixture (`yield from guarded(...)`): a fresh tag in this process's
    environment while the test runs, so every host, worker and shell command the test causes
    inherits it; `make(tag)` builds the guard, whose teardown problems fail the test."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(tag_var, tag)
    keeper = make(tag)
    try:
        yield keeper
    finally:
        problems = keeper.teardown()
        if problems:
            pytest.fail("teardown: " + " | ".join(problems), pytrace=False)
