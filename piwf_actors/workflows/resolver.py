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

    def cached(self, spec: str, project_path: str | None) -> ResolvedWorkflow | None:
        """The resolution of `spec` if one is cached and its file is unchanged, else None.

        Never loads a file (one `stat`), so a caller on a thread that must not run
        workflow code (the client gateway) can use it and hand only a miss to a worker thread.
        """
        with self._lock:
            cached = self._cache.get((spec, project_path))
        if cached is not None and cached[0] == _stamp(cached[1].path):
            return cached[1]
        return None

    def resolve(self, spec: str, project_path: str | None) -> ResolvedWorkflow:
        found = self.cached(spec, project_path)
        if found is not None:
            return found
        key = (spec, project_path)
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
