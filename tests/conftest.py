"""Shared fixtures: every test gets its own short state directory (and a second one on request);
`hosts` starts in-process hosts that teardown stops.

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

from piwf_actors import HostConfig, HostHandle, start_host

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


@pytest.fixture
def hosts() -> Iterator[Callable[..., HostHandle]]:
    """Factory `hosts(state_dir, **config)`; every host started is stopped in teardown."""
    started: list[HostHandle] = []

    def start(state_dir: Path, **config: Any) -> HostHandle:
        host = start_host(HostConfig(state_dir=state_dir, **config))
        started.append(host)
        return host

    try:
        yield start
    finally:
        for host in started:
            host.stop("test teardown")
