"""A channel that is not Telegram-shaped, through the seam (channels/base.py, channels/registry.py): ids that
are not numbers, a section of channels.toml with a key of its own, and a cursor that only its adapter reads
(the store's side: tests/store/test_channel_commands.py). The adapter is a module of this test's own, listed
in the registry for the test."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from piwf_actors.channels import registry
from piwf_actors.channels.config import load_channels
from piwf_actors.channels.telegram_updates import UPDATE_ORDER as TELEGRAM_ORDER

#: The channels.toml side of a chat service whose people and rooms are named like Slack's and whose
#: tokens start with "xapp-" (reading its tables needs nothing else of the adapter).
ADAPTER = '''
from piwf_actors.channels.base import ProfileSection

CHANNEL_TYPE = "roomchat"


def _named(prefix):
    return lambda value: value if isinstance(value, str) and value.startswith(prefix) and value[1:].isalnum() else None


PROFILE_SECTION = ProfileSection(
    user_id=_named("U"), chat_id=_named("C"), user_ids="user ids like 'U024BE7LH'",
    chat_ids="room ids like 'C024BE91L'",
    credential=lambda value: None if value.startswith("xapp-") else "is not an app token ('xapp-…')",
    keys={"workspace": lambda value: None if isinstance(value, str) and value else "must be a workspace name"})
'''


@pytest.fixture
def roomchat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "roomchat_adapter.py").write_text(ADAPTER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "ADAPTERS", {**registry.ADAPTERS, "roomchat": "roomchat_adapter"})
    yield "roomchat"
    sys.modules.pop("roomchat_adapter", None)


def _config(directory: Path, profile: str, credential: str = "xapp-1-A0-secret") -> Path:
    directory.mkdir(mode=0o700)
    (directory / "channels.toml").write_text(textwrap.dedent(profile))
    (directory / "credentials.toml").write_text(f'team_app = "{credential}"\n')
    (directory / "channels.toml").chmod(0o644)
    (directory / "credentials.toml").chmod(0o600)
    return directory


def test_a_channel_type_reads_its_own_section_with_ids_that_are_not_numbers(roomchat, tmp_path: Path) -> None:
    config = load_channels(_config(tmp_path / "good", """
        [roomchat.team]
        credential = "team_app"
        allowed_user_ids = ["U024BE7LH"]
        allowed_chat_ids = ["C024BE91L", "C0OTHER"]
        audiences = ["*"]
        workspace = "acme"
        """))
    assert config.file_error is None and config.errors == {} and config.startable() == ["team"]
    team = config.profiles["team"]
    assert (team.channel_type, team.allowed_user_ids, team.allowed_chat_ids, dict(team.settings)) == (
        "roomchat", frozenset({"U024BE7LH"}), ("C024BE91L", "C0OTHER"), {"workspace": "acme"})
    assert team.allows("U024BE7LH", "C0OTHER") and not team.allows("U024BE7LH", "C999")


def test_a_channel_type_refuses_what_its_section_does_not_hold(roomchat, tmp_path: Path) -> None:
    config = load_channels(_config(tmp_path / "bad", """
        [roomchat.team]
        credential = "team_app"
        allowed_user_ids = [1001]
        allowed_chat_ids = ["C024BE91L"]
        audiences = ["*"]
        workspace = ""
        """, credential="123456:telegram-token"))
    assert config.errors == {"team": "channels.toml: [roomchat.team] allowed_user_ids must be a non-empty list of "
                                     "user ids like 'U024BE7LH'; workspace must be a workspace name"}
    fixed = load_channels(_config(tmp_path / "token", """
        [roomchat.team]
        credential = "team_app"
        allowed_user_ids = ["U1"]
        allowed_chat_ids = ["C1"]
        audiences = ["*"]
        """, credential="123456:telegram-token"))
    assert fixed.errors == {"team": "credentials.toml: credential 'team_app' is not an app token ('xapp-…')"}


def test_telegrams_cursor_is_a_number_in_text() -> None:
    """Telegram's order reads its cursor as the integer it is: "10" is past "9", although "9" > "10" as text."""
    order = TELEGRAM_ORDER
    assert order.start == "0"
    assert order.confirms("1006", "1005") and not order.confirms("1006", "1006")
    assert (order.past("1006", "1006"), order.past("1006", "5"), order.past("9", "10")) == ("1007", "1006", "11")
    assert order.later("9", "10") == order.later("10", "9") == "10"


def test_the_adapter_of_the_docs_reads_its_section_and_its_cursor(tmp_path: Path, monkeypatch) -> None:
    """docs/channels.md "Writing an adapter": its module, listed, reads a `[webhook.<profile>]` table of its
    own shape, and its order moves a cursor that is not a number."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "channels.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S) if 'CHANNEL_TYPE = "webhook"' in b]
    (tmp_path / "webhook_from_docs.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "ADAPTERS", {**registry.ADAPTERS, "webhook": "webhook_from_docs"})
    try:
        config = load_channels(_config(tmp_path / "config", """
            [webhook.ops]
            credential = "team_app"
            allowed_user_ids = ["ann"]
            allowed_chat_ids = ["releases"]
            audiences = ["*"]
            endpoint = "https://hooks.example/piwf"
            """, credential="whk_secret"))
        assert config.errors == {} and config.startable() == ["ops"]
        ops = config.profiles["ops"]
        assert (ops.allowed_user_ids, ops.allowed_chat_ids, dict(ops.settings)) == (
            frozenset({"ann"}), ("releases",), {"endpoint": "https://hooks.example/piwf"})
        order = registry.update_order("webhook")
        assert order.past(order.start, "2026-12-06/1") == "2026-12-06/1"
        assert order.confirms("2026-12-06/1", "2026-12-05/9") and not order.confirms("2026-12-06/1", "2026-12-06/2")
        assert registry.adapter_options("webhook", {"secret_header": "X-Key"}) == {"secret_header": "X-Key"}
        with pytest.raises(ValueError, match="unknown webhook option secret"):
            registry.adapter_options("webhook", {"secret": "x"})
    finally:
        sys.modules.pop("webhook_from_docs", None)
