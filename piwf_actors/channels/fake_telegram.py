"""``python -m piwf_actors.channels.fake_telegram``: try Telegram decisions without a bot.

An entry point only, so that the command sits next to the channel it stands
in for. The fake itself is a test double and lives apart from the real
adapters (`piwf_actors/testing/fake_telegram.py`, its console in
`fake_telegram_console.py`); this module is not a channel type
(`registry.py` lists those) and nothing in the host imports it.
"""

from __future__ import annotations

import sys

from piwf_actors.testing.fake_telegram_console import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
