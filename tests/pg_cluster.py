"""A throw-away PostgreSQL cluster for the tests (and `bench/throughput.py --database pg-temp`).

`PgCluster.start()` runs `initdb` into a fresh temporary directory and starts `postgres` on a Unix
socket only (`listen_addresses=''`) in a short directory under /tmp, on a free port number (the
number names the socket file, so clusters of parallel sessions never meet). `initdb` refuses to
run as root: as root, the directories are handed to the `postgres` user and both programs run
through `runuser -u postgres`. Clients connect as the database user `postgres` over the socket
(`--auth=trust`: only local processes can reach it, and it lives for one session).

`stop()` always kills the server (fast shutdown, then SIGKILL of its process group) and removes
the directories; call it from a `finally`.

`durable=False` (the tests) turns fsync off: a test cluster never outlives a power cut, and the
tests then spend no time in fsync on this shared 2-core machine. The bench keeps the defaults.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

#: The environment variable that names the server binaries' directory (else the newest under
#: /usr/lib/postgresql/*/bin).
PG_BIN_ENV = "PIWF_PG_BIN"


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine, or the cluster would not start."""


def find_bin_dir() -> Path:
    explicit = os.environ.get(PG_BIN_ENV)
    candidates = [explicit] if explicit else sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                                    key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0)
    for candidate in reversed(candidates):
        if candidate and (Path(candidate) / "initdb").is_file() and (Path(candidate) / "postgres").is_file():
            return Path(candidate)
    raise PgUnavailable("no PostgreSQL server binaries (initdb, postgres) under /usr/lib/postgresql/*/bin; "
                        "install them with `apt-get install -y postgresql`")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgCluster:
    def __init__(self, bin_dir: Path, data_dir: Path, socket_dir: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.data_dir = data_dir
        self.socket_dir = socket_dir
        self.port = port
        self._server: subprocess.Popen[bytes] | None = None
        self._as_postgres = os.geteuid() == 0

    # --- life cycle --------------------------------------------------------------------------

    @classmethod
    def start(cls, *, durable: bool = False, max_connections: int = 200) -> PgCluster:
        bin_dir = find_bin_dir()
        root = Path(tempfile.mkdtemp(prefix="piwf-pg-"))
        socket_dir = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
        cluster = cls(bin_dir, root / "data", socket_dir, _free_port())
        try:
            cluster._init(root)
            cluster._launch(durable, max_connections)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _run_as(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if self._as_postgres else argv

    def _init(self, root: Path) -> None:
        if self._as_postgres:
            for path in (root, self.socket_dir):
                shutil.chown(path, "postgres", "postgres")
        done = subprocess.run(
            self._run_as([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "--auth=trust", "-U", "postgres",
                          "--encoding=UTF8", "--locale=C", "--no-sync"]),
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PgUnavailable(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def _launch(self, durable: bool, max_connections: int) -> None:
        settings = ["-c", "listen_addresses=", "-k", str(self.socket_dir), "-p", str(self.port),
                    "-c", f"max_connections={max_connections}", "-c", "shared_buffers=64MB"]
        if not durable:
            settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        log = open(self.data_dir.parent / "server.log", "wb")  # noqa: SIM115 (the server's own, closed in stop)
        self._log = log
        # The session's server outlives the test that happened to start it first: it must not carry
        # that test's process tag (`testsupport.guarded`), or the test's teardown finds it "left behind".
        env = {name: value for name, value in os.environ.items() if not name.endswith("_TEST_TAG")}
        self._server = subprocess.Popen(
            self._run_as([str(self.bin_dir / "postgres"), "-D", str(self.data_dir), *settings]),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 60
        while True:
            if self._server.poll() is not None:
                raise PgUnavailable(f"postgres exited with {self._server.returncode}: {self.server_log()[-2000:]}")
            ready = subprocess.run([str(self.bin_dir / "pg_isready"), "-h", str(self.socket_dir), "-p", str(self.port),
                                    "-U", "postgres", "-q"], timeout=30)
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise PgUnavailable(f"postgres did not become ready in 60 s: {self.server_log()[-2000:]}")
            time.sleep(0.05)

    def server_log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.data_dir.parent / "server.log").read_text(errors="replace")
        return ""

    def stop(self) -> None:
        """Stop the server (fast shutdown; SIGKILL if it lingers) and remove every file of the cluster."""
        server, self._server = self._server, None
        if server is not None:
            # The postmaster's own pid (under runuser, the Popen is runuser, which does not pass
            # SIGINT on): fast shutdown rolls back open transactions and ends every backend.
            with contextlib.suppress(ProcessLookupError, OSError, ValueError, IndexError):
                os.kill(int((self.data_dir / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
            with contextlib.suppress(ProcessLookupError):
                os.kill(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=15)
            # Its backends are its children in its session: none may outlive it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGKILL)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    # --- databases ---------------------------------------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}&port={self.port}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self, name: str | None = None) -> str:
        """A new empty database (from template0, C collation); returns its URL."""
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\' LC_COLLATE \'C\' LC_CTYPE \'C\'')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop `name`, ending whatever sessions still use it (a test that failed mid-way)."""
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
