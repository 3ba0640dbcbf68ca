"""`WorkflowResolver`: workflow specs resolved once per version of their file.

Shared by the embedding API and the client gateway (one cache per host).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from piwf_actors.workflows.discovery import ResolvedWorkflow, resolve


class WorkflowResolver:
    """Resolves workflow specs, reusing a result while the defining file is unchanged.

    The cache key includes the file's (mtime_ns, size, inode), so an edited
    workflow file is loaded again; loading runs the file as a fresh module.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str | None], tuple[tuple[Any, ...], ResolvedWorkflow]] = {}

    def resolve(self, spec: str, project_path: str | None) -> ResolvedWorkflow:
        key = (spec, project_path)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] == _stamp(cached[1].path):
            return cached[1]
        resolved = resolve(spec, project_path)
        with self._lock:
            self._cache[key] = (_stamp(resolved.path), resolved)
        return resolved


def _stamp(path: str) -> tuple[Any, ...]:
    try:
        info = os.stat(path)
    except OSError:
        return ()
    return (info.st_mtime_ns, info.st_size, info.st_ino)
