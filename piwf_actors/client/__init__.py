"""A small synchronous client for the host's Unix socket (protocol v1), and `LocalStore`, which answers
the read-only run operations from a stopped host's database (imported on first use: it needs the store)."""

from __future__ import annotations

from typing import Any

from piwf_actors.client.connection import Client, ContentReader, HostNotRunning, Response

__all__ = ["Client", "ContentReader", "HostNotRunning", "LocalStore", "Response"]


def __getattr__(name: str) -> Any:
    if name == "LocalStore":
        from piwf_actors.client.local import LocalStore

        return LocalStore
    raise AttributeError(name)
