"""A small synchronous client for the host's Unix socket (protocol v1)."""

from __future__ import annotations

from piwf_actors.client.connection import Client, ContentReader, HostNotRunning, Response

__all__ = ["Client", "ContentReader", "HostNotRunning", "Response"]
