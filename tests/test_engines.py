"""The test suite's two engines: a host of a `both_engines` test runs on the engine it was given (and
under `make test-pg` every host runs on PostgreSQL), so a test that passes on "postgresql" really
exercised PostgreSQL."""

from __future__ import annotations

import shutil

from testsupport import both_engines, host_state_row

from piwf_actors import HostConfig, start_host
from piwf_actors.store.engines.postgresql import PostgresDatabase


@both_engines
def test_hosts_run_on_the_engine_of_the_test(hosts, state_dir, host_engine) -> None:
    host = hosts(state_dir, max_workers=1)
    other_dir = state_dir.parent / f"{state_dir.name}-direct"
    direct = start_host(HostConfig(state_dir=other_dir, max_workers=1))
    try:
        for handle in (host, direct):
            assert isinstance(handle.paths.database, PostgresDatabase) is (host_engine == "postgresql")
            assert (handle.paths.root / "state.db").exists() is (host_engine == "sqlite")
        assert host_state_row(state_dir)["epoch"] == host.epoch
    finally:
        direct.stop()
        shutil.rmtree(other_dir, ignore_errors=True)
