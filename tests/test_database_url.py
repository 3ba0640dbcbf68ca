"""Which database a host uses: `--database` / `$PIWF_DATABASE_URL`, else `<state-dir>/state.db`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client
from piwf_actors.errors import HostAlreadyRunning, StoreRefused
from piwf_actors.paths import StatePaths, parse_database_url
from piwf_actors.store.engines.postgresql import PostgresDatabase


def test_urls_and_paths_parse() -> None:
    assert parse_database_url("sqlite:///var/lib/piwf/state.db") == Path("/var/lib/piwf/state.db")
    assert parse_database_url("sqlite:////var/lib/piwf/state.db") == Path("/var/lib/piwf/state.db")
    assert parse_database_url("/srv/state.db") == Path("/srv/state.db")
    assert parse_database_url("state.db", relative_to=Path("/work")) == Path("/work/state.db")
    pg = parse_database_url("postgresql://piwf:s3cret@db.example/piwf?sslmode=require")
    assert isinstance(pg, PostgresDatabase)
    assert "s3cret" not in str(pg) and str(pg) == "postgresql://piwf:***@db.example/piwf?sslmode=require"
    assert parse_database_url("postgres://piwf@/piwf?host=/run/postgresql") == PostgresDatabase(
        "postgres://piwf@/piwf?host=/run/postgresql")
    for bad, why in [("mysql://x/y", "unsupported database URL scheme 'mysql'"), ("sqlite://rel.db", "absolute"),
                     ("  ", "empty")]:
        with pytest.raises(ValueError, match=why):
            parse_database_url(bad)


def test_state_paths_take_the_flag_then_the_environment(tmp_path: Path) -> None:
    env = {"PIWF_DATABASE_URL": f"sqlite://{tmp_path}/from-env.db"}
    assert StatePaths.resolve(tmp_path / "st", environ={}).database == tmp_path / "st" / "state.db"
    assert StatePaths.resolve(tmp_path / "st", environ=env).database == tmp_path / "from-env.db"
    flagged = StatePaths.resolve(tmp_path / "st", f"sqlite://{tmp_path}/flag.db", environ=env)
    assert flagged.database == tmp_path / "flag.db" and not flagged.default_database
    # Naming the state directory's own file is the default, not an override.
    assert StatePaths.resolve(tmp_path / "st", str(tmp_path / "st" / "state.db"), environ={}).default_database
    # The socket and the lock stay in the state directory.
    assert flagged.socket == tmp_path / "st" / "host.sock" and flagged.lock == tmp_path / "st" / "host.lock"


def test_a_host_keeps_its_state_in_the_named_database(state_dir: Path, other_state_dir: Path) -> None:
    shared = other_state_dir / "shared.db"
    host = start_host(HostConfig(state_dir=state_dir, database=f"sqlite://{shared}", lease_s=5))
    try:
        with Client(state_dir) as client:
            assert client.request("host.status").outcome == "accepted"
        assert shared.exists() and not (state_dir / "state.db").exists()
        # A second host on another state directory but the same database meets the live lease
        # (its own lock file says nothing about this database); told not to wait as a standby
        # (tests/integration/test_standby_*.py), it refuses and leaves nothing running.
        threads = {t.name for t in threading.enumerate()}
        with pytest.raises(HostAlreadyRunning):
            start_host(HostConfig(state_dir=other_state_dir / "other", database=str(shared), lease_s=5,
                                  standby=False))
        assert {t.name for t in threading.enumerate()} <= threads
        with Client(state_dir) as client:  # the first host still holds its lease
            status = client.request("host.status")
            assert status.outcome == "accepted" and status.receipt["epoch"] == host.epoch
    finally:
        host.stop()


def test_a_bad_database_url_is_refused_in_one_line(state_dir: Path) -> None:
    with pytest.raises(StoreRefused, match="unsupported database URL scheme 'mysql'"):
        start_host(HostConfig(state_dir=state_dir, database="mysql://x/y"))
