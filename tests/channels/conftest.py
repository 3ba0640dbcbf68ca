"""Fixtures of the channel tests: a fake Bot API on 127.0.0.1, a process guard, a config directory
with one Telegram profile and a workflow file (tests/channels/telegram_host.py has the rest)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from telegram_host import FLOWS, TAG_VAR, TOKEN, write_config
from testsupport import ProcessGuard, guarded

from piwf_actors.testing.fake_telegram import FakeBotApi


@pytest.fixture
def fake() -> Iterator[FakeBotApi]:
    with FakeBotApi(token=TOKEN) as api:
        yield api


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ProcessGuard]:
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: ProcessGuard(TAG_VAR, tag, tmp_path))


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    return {"config": write_config(tmp_path / "config"), "flows": flows}
