"""Shared fixtures: every test gets its own short state directory.

AF_UNIX socket paths are limited to ~107 bytes and pytest's tmp_path can be
longer, so state dirs live under /tmp with a short random name.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def state_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
