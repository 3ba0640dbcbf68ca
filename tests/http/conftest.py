"""The `door` fixture: an in-process host with its HTTP door (see http_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from http_support import Door, open_door


@pytest.fixture
def door(state_dir: Path) -> Iterator[Door]:
    with open_door(state_dir) as made:
        yield made
