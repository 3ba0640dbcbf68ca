"""Fixtures for the interaction tests: `ix`, a `Harness` bound to the test's state directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from interactions_support import TAG_VAR, Harness
from testsupport import guarded


@pytest.fixture
def ix(state_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Harness]:
    """Hosts, host scripts and clients for one test; every process it causes inherits a tag
    (an environment variable) so that teardown can prove none is left running."""
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: Harness(state_dir, tag, tmp_path))  # type: ignore[misc]
