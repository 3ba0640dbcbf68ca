"""What the package ships for tests: the test kit and test doubles.

- `Piwf` (`kit.py`): a real host in the test's process on a clock the test
  moves (`skip`, `advance_to`), with short helpers to start, wait for,
  answer and read runs; `WaitTimeout` and `Submission` are what it raises
  and returns. The pytest fixture `piwf` (`pytest_plugin.py`, registered
  by the package's `pytest11` entry point) gives each test one.
- `fake_telegram.FakeBotApi`: a loopback fake of the Telegram Bot API for
  the tests and `make demo` (examples/demo.py), which run without a real
  bot; a test or an example points a channel at the fake's URL.

They live here, outside the packages they stand in for, so that nothing
mistakes them for the real thing; nothing in the host imports this package.
The names are imported lazily: the pytest plugin loads this package in every
pytest session of anyone who installs piwf_actors.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Piwf", "Submission", "WaitTimeout"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from piwf_actors.testing import kit

        return getattr(kit, name)
    raise AttributeError(name)
