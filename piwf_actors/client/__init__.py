"""A small synchronous client for the host's Unix socket (protocol v1)."""

from piwf_actors.client.connection import Client, HostNotRunning, Response

__all__ = ["Client", "HostNotRunning", "Response"]
