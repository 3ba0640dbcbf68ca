"""Shared fixtures: every test gets its own short state directory (and a second one on request);
`hosts` starts in-process hosts that teardown stops.

Two engines: `database` is the state database of a test that drives the store directly, once per
`backend` (SQLite in the state directory; PostgreSQL: a fresh database of the session's cluster,
`tests/pg_cluster.py`, started on first use and stopped at the end). Without PostgreSQL's server
binaries the PostgreSQL half fails (CI must run both) unless $PIWF_TEST_SKIP_POSTGRES=1 says to
skip it (a developer's machine without PostgreSQL; refused when $CI is set).

$PIWF_TEST_DATABASE=postgresql (`make test-pg`) gives every host the `hosts` fixture (and
`testsupport.start_test_host`) starts a PostgreSQL database of its own, one per state directory, so
the whole suite runs its hosts on PostgreSQL.

AF_UNIX socket paths are limited to ~107 bytes and pytest's tmp_path can be
longer, so state dirs live under /tmp with a short random name.

Hosts read decision-channel configuration from `$PIWF_CONFIG_DIR`: the whole
run points it at an empty directory, so no test ever picks up (or talks to)
a channel configured on the machine. Channel tests set their own. `$XDG_CONFIG_HOME`
points there too, so no test host runs a schedule of the machine's user directory.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import direct_commands  # noqa: F401  (registers the test-only write commands)
import pytest
import testsupport
from actors.writer_store import WriterStore
from pg_cluster import PgCluster, PgUnavailable

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.paths import DATABASE_URL_ENV, DatabaseLocation, StatePaths, default_state_dir
from piwf_actors.store.engines.postgresql import PostgresDatabase

#: Set to 1 to skip (not fail) the PostgreSQL tests on a machine without PostgreSQL; refused in CI.
SKIP_POSTGRES_ENV = "PIWF_TEST_SKIP_POSTGRES"


def pytest_configure(config: pytest.Config) -> None:
    """CI ($CI set, as CI services and `.ci/run` do) tests both engines: skipping PostgreSQL there
    would pass a run that tested half of what it claims."""
    if os.environ.get("CI") and os.environ.get(SKIP_POSTGRES_ENV) == "1":
        raise pytest.UsageError(f"${SKIP_POSTGRES_ENV}=1 is refused when $CI is set: CI must test PostgreSQL too "
                                "(install its server binaries: apt-get install -y postgresql)")

_EMPTY_CONFIG_DIR = tempfile.mkdtemp(prefix="pw-cfg-")
atexit.register(shutil.rmtree, _EMPTY_CONFIG_DIR, True)
os.environ["PIWF_CONFIG_DIR"] = _EMPTY_CONFIG_DIR
# Hosts load schedules from $XDG_CONFIG_HOME/piwf/workflows/: never the machine's own (schedule tests set theirs).
os.environ["XDG_CONFIG_HOME"] = _EMPTY_CONFIG_DIR
os.environ.pop("PIWF_TELEGRAM_API_BASE", None)


def _short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    yield from _short_dir()


@pytest.fixture
def other_state_dir() -> Iterator[Path]:
    """A second state directory, for tests with two hosts."""
    yield from _short_dir()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """The session's PostgreSQL cluster (Unix socket only), started on first use."""
    try:
        cluster = PgCluster.start()
    except PgUnavailable as exc:
        if os.environ.get(SKIP_POSTGRES_ENV) == "1":
            pytest.skip(f"PostgreSQL unavailable and ${SKIP_POSTGRES_ENV}=1: {exc}")
        pytest.fail(f"PostgreSQL is needed by this test and could not be started ({exc}); install it "
                    f"(apt-get install -y postgresql) or set {SKIP_POSTGRES_ENV}=1 to skip these tests",
                    pytrace=False)
    testsupport.PG_CLUSTER = cluster
    try:
        yield cluster
    finally:
        testsupport.PG_CLUSTER = None
        cluster.stop()


@pytest.fixture
def pg_database(pg_cluster: PgCluster) -> Iterator[PostgresDatabase]:
    """A fresh, empty PostgreSQL database, dropped after the test."""
    url = pg_cluster.create_database()
    try:
        yield PostgresDatabase(url)
    finally:
        pg_cluster.drop_database(url.rsplit("/", 1)[1].split("?", 1)[0])


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The engine a store-level test runs on (each such test runs on both)."""
    return str(request.param)


@pytest.fixture
def database(backend: str, state_dir: Path, request: pytest.FixtureRequest) -> DatabaseLocation:
    """The state database of a store-level test: `<state_dir>/state.db`, or a fresh PostgreSQL database."""
    if backend == "postgresql":
        return request.getfixturevalue("pg_database")
    return state_dir / "state.db"


@pytest.fixture(autouse=True)
def _postgres_for_hosts(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if testsupport.hosts_on_postgres():
        _route_hosts_to_postgres(request, monkeypatch)


def _route_hosts_to_postgres(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every state directory this test resolves without naming a database (in this process:
    start_host, the piwf CLI's offline reads) gets its own PostgreSQL database, so tests that call
    start_host directly run on PostgreSQL too. Host subprocesses get it through
    `testsupport.host_script_args`."""
    request.getfixturevalue("pg_cluster")
    monkeypatch.setenv(testsupport.TEST_DATABASE_ENV, "postgresql")
    resolve = StatePaths.resolve.__func__  # type: ignore[attr-defined]

    def on_postgres(cls: type[StatePaths], state_dir: Any, database: str | None = None,
                    environ: dict[str, str] | None = None) -> StatePaths:
        if database is None and environ is None and not os.environ.get(DATABASE_URL_ENV):
            root = (Path(state_dir).expanduser() if state_dir else default_state_dir()).absolute()
            database = testsupport.host_database(root)
        return resolve(cls, state_dir, database, environ)

    monkeypatch.setattr(StatePaths, "resolve", classmethod(on_postgres))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "host_engine" in metafunc.fixturenames:
        metafunc.parametrize("host_engine", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def host_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """For a test marked `testsupport.both_engines`: the engine its hosts run on this time."""
    engine = str(request.param)
    if engine == "postgresql":
        if not testsupport.hosts_on_postgres():
            _route_hosts_to_postgres(request, monkeypatch)
    elif testsupport.hosts_on_postgres():
        pytest.skip("$PIWF_TEST_DATABASE=postgresql: every host runs on PostgreSQL in this session")
    return engine


@pytest.fixture
def hosts() -> Iterator[Callable[..., HostHandle]]:
    """Factory `hosts(state_dir, **config)`; every host started is stopped in teardown.

    With $PIWF_TEST_DATABASE=postgresql, a host without a `database` gets its state directory's
    own PostgreSQL database (the same one each time that directory is used again)."""
    started: list[HostHandle] = []

    def start(state_dir: Path, **config: Any) -> HostHandle:
        config.setdefault("database", testsupport.host_database(state_dir))
        host = start_host(HostConfig(state_dir=state_dir, **config))
        started.append(host)
        return host

    try:
        yield start
    finally:
        for host in started:
            host.stop("test teardown")


@pytest.fixture
def writer_store(state_dir: Path) -> Iterator[WriterStore]:
    """A real writer on a fresh SQLite store in the test's state directory, with a clock the test
    moves (tests/actors/writer_store.py); closed after the test."""
    store = WriterStore(state_dir)
    try:
        yield store
    finally:
        store.close()
