"""Fixtures for the interaction tests: `ix`, a `Harness` bound to the test's state directory."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from interactions_support import TAG_VAR, Harness


@pytest.fixture
def ix(state_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Harness]:
    """Hosts, host scripts and clients for one test; every process it causes inherits a tag
    (an environment variable) so that teardown can prove none is left running."""
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_VAR, tag)
    harness = Harness(state_dir, tag, tmp_path)
    try:
        yield harness
    finally:
        problems = harness.teardown()
        if problems:
            pytest.fail("teardown: " + " | ".join(problems), pytrace=False)
