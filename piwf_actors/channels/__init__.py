"""Decision channels: delivering pending decisions to chat and taking answers from it.

Each configured profile runs as a `ChannelAdapter` actor (`actors/channel.py`)
that uses one adapter module from this package for its I/O, the shape of its
channels.toml tables and the meaning of its update cursor (ids and cursors are
opaque text everywhere else: `base.py`); Telegram (`telegram.py`) is the first. `registry.py` lists every adapter by name; see
docs/channels.md for how to write another. The fake Bot API the tests use is a
test double and lives in `piwf_actors/testing/`, not here, with the program that
serves it to a person (`python -m piwf_actors.testing.fake_telegram_console`).
"""
