"""Test doubles shipped with the package.

They live here, outside the packages they stand in for, so that nothing
mistakes them for the real thing: `fake_telegram.FakeBotApi` is a loopback
fake of the Telegram Bot API for the tests and `make demo` (examples/demo.py),
which run without a real bot. Nothing in the host imports this package; a test
or an example points a channel at the fake's URL.
"""
