"""The explicit adapter list (`channels/registry.py`): it names exactly the modules that are adapters,
each is importable and declares the type it is listed under, and nothing is imported before use."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import piwf_actors.channels
import piwf_actors.testing
from piwf_actors.channels.base import ProfileSection
from piwf_actors.channels.registry import (
    ADAPTERS,
    adapter_options,
    channel_module,
    known_channel_types,
    profile_section,
    update_order,
)
from piwf_actors.channels.telegram import TelegramOptions
from piwf_actors.config import HostConfig


def _modules_declaring_channel_type(package: object) -> dict[str, str]:
    """CHANNEL_TYPE → module name, for every module of `package` that declares one."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):  # type: ignore[attr-defined]
        channel_type = getattr(importlib.import_module(info.name), "CHANNEL_TYPE", None)
        if channel_type is not None:
            assert isinstance(channel_type, str) and channel_type not in found, info.name
            found[channel_type] = info.name
    return found


def test_the_list_is_exactly_the_modules_that_declare_a_channel_type() -> None:
    # The scan the registry no longer does at run time, done here so a new adapter module cannot be
    # forgotten in ADAPTERS (nor a listed one lose its CHANNEL_TYPE).
    assert dict(ADAPTERS) == _modules_declaring_channel_type(piwf_actors.channels)
    assert known_channel_types() == tuple(sorted(ADAPTERS)) and "telegram" in known_channel_types()


@pytest.mark.parametrize("channel_type", sorted(ADAPTERS))
def test_each_listed_adapter_imports_and_has_the_adapter_contract(channel_type: str) -> None:
    module = channel_module(channel_type)
    assert module.__name__ == ADAPTERS[channel_type]
    assert channel_type == module.CHANNEL_TYPE
    assert callable(module.open_channel)
    # What the adapter brings besides its I/O: its section of channels.toml, its cursor's order, its options.
    assert isinstance(module.PROFILE_SECTION, ProfileSection) and module.PROFILE_SECTION is profile_section(channel_type)
    assert isinstance(module.UPDATE_ORDER.start, str) and module.UPDATE_ORDER is update_order(channel_type)
    assert callable(module.options)


def test_the_shipped_test_doubles_are_not_adapters() -> None:
    assert _modules_declaring_channel_type(piwf_actors.testing) == {}
    # The program that serves the fake (`python -m piwf_actors.testing.fake_telegram_console`) lives with it in
    # piwf_actors/testing/: no fake-named module is left among the adapters.
    assert [info.name for info in pkgutil.iter_modules(piwf_actors.channels.__path__)
            if info.name.startswith("fake")] == []


def test_an_unlisted_type_is_a_lookup_error_naming_the_known_ones() -> None:
    with pytest.raises(LookupError, match=r"no channel adapter for type 'slack' \(known: telegram\)"):
        channel_module("slack")
    # Not a module path either: only listed names are imported.
    with pytest.raises(LookupError):
        channel_module("config")


def test_reading_channels_toml_imports_no_adapter(tmp_path: Path) -> None:
    (tmp_path / "channels.toml").write_text('[slack.ops]\ncredential = "x"\n')
    (tmp_path / "channels.toml").chmod(0o644)
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from piwf_actors.channels.config import load_channels\n"
        f"config = load_channels(Path({str(tmp_path)!r}))\n"
        "print(config.file_error)\n"
        f"print(sorted(name for name in sys.modules if name in {sorted(ADAPTERS.values())!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    error, imported = done.stdout.splitlines()
    assert error == "channels.toml: unknown channel type 'slack' (known: telegram)"
    assert imported == "[]"


def test_an_adapter_makes_its_own_options_of_what_the_host_is_told() -> None:
    """The host names no adapter's settings (it used to hold `telegram_api_base` and build
    `TelegramOptions` itself): `HostConfig.channel_options` carries a plain mapping per type, which
    the type's adapter checks and turns into its options."""
    assert adapter_options("telegram", {"api_base": "http://127.0.0.1:9"}) == TelegramOptions("http://127.0.0.1:9")
    assert adapter_options("telegram") == TelegramOptions()
    config = HostConfig(channel_options={"telegram": {"api_base": "http://127.0.0.1:9"}})
    assert config.channel_options == {"telegram": {"api_base": "http://127.0.0.1:9"}}
    with pytest.raises(ValueError, match=r"^unknown Telegram option 'api_bsae' \(known: api_base, request_timeout_s\)$"):
        HostConfig(channel_options={"telegram": {"api_bsae": "http://127.0.0.1:9"}})
    with pytest.raises(ValueError, match="request_timeout_s must be a positive number"):
        HostConfig(channel_options={"telegram": {"request_timeout_s": 0}})
    with pytest.raises(ValueError, match=r"^channel_options: no channel adapter for type 'slack' \(known: telegram\)$"):
        HostConfig(channel_options={"slack": {}})
