"""Shared fixtures: every test gets its own short state directory (and a second one on request);
`hosts` starts in-process hosts that teardown stops.

Two engines: `database` is the state database of a test that drives the store directly, once per
`backend` (SQLite in the state directory; PostgreSQL: a fresh database of the session's cluster,
`tests/pg_cluster.py`, started on first use and stopped at the end). Without PostgreSQL's server
binaries the PostgreSQL half fails (CI must run both) unless $PIWF_TEST_SKIP_POSTGRES=1 says to
skip it (a developer's machine without PostgreSQL).

$PIWF_TEST_DATABASE=postgresql (`make test-pg`) gives every host the `hosts` fixture (and
`testsupport.start_test_host`) starts a PostgreSQL database of its own, one per state directory, so
the whole suite runs its hosts on PostgreSQL.

AF_UNIX socket paths are limited to ~107 bytes and pytest's tmp_path can be
longer, so state dirs live under /tmp with a short random name.

Hosts read decision-channel configuration from `$PIWF_CONFIG_DIR`: the whole
run points it at an empty directory, so no test ever picks up (or talks to)
a channel configured on the machine. Channel tests set their own.
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
from pg_cluster import PgCluster, PgUnavailable

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.paths import DatabaseLocation, PostgresDatabase

#: Set to 1 to skip (not fail) the PostgreSQL tests on a machine without PostgreSQL.
SKIP_POSTGRES_ENV = "PIWF_TEST_SKIP_POSTGRES"

_EMPTY_CONFIG_DIR = tempfile.mkdtemp(prefix="pw-cfg-")
atexit.register(shutil.rmtree, _EMPTY_CONFIG_DIR, True)
os.environ["PIWF_CONFIG_DIR"] = _EMPTY_CONFIG_DIR
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


@pytest.fixture
def hosts(request: pytest.FixtureRequest) -> Iterator[Callable[..., HostHandle]]:
    """Factory `hosts(state_dir, **config)`; every host started is stopped in teardown.

    With $PIWF_TEST_DATABASE=postgresql, a host without a `database` gets its state directory's
    own PostgreSQL database (the same one each time that directory is used again)."""
    started: list[HostHandle] = []
    if testsupport.hosts_on_postgres():
        request.getfixturevalue("pg_cluster")

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
