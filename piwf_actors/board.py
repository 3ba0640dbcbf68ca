"""Live figures the actors publish for status views (host.status, piwf-top).

Each actor writes its own section after it changes; readers (the gateway,
the embedding API) take a snapshot without asking the actor, so a status
request never blocks on a busy writer or scheduler and no actor waits on
another. Values are replaced whole (never mutated in place).
"""

from __future__ import annotations

import threading
from typing import Any


class HostBoard:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sections: dict[str, dict[str, Any]] = {}

    def publish(self, section: str, values: dict[str, Any]) -> None:
        with self._lock:
            self._sections[section] = values

    def snapshot(self, section: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._sections.get(section, {}))
