"""piwf_actors: a durable, local-first workflow host built on pykka actors and SQLite.

The embedding entry point is `start_host(HostConfig(...))`, which returns a
`HostHandle`; `HostHandle.stop()` leaves nothing running. The names are
imported lazily so that worker processes and the client do not pay for the
host's imports.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HostConfig", "HostHandle", "start_host"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("HostHandle", "start_host"):
        from piwf_actors.actors import host

        return getattr(host, name)
    if name == "HostConfig":
        from piwf_actors.config import HostConfig

        return HostConfig
    raise AttributeError(name)
