"""`WorkflowResolver`: workflow specs resolved once per version of their file.

Shared by the embedding API and the client gateway (one cache per host).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

from piwf_actors.workflows.discovery import ResolvedWorkflow, resolve

#: Specs kept resolved, least recently used dropped first. A host usually starts a handful of
#: workflows; one whose clients start runs from ever new files or projects (a CI job's fresh
#: checkout each time) must not keep every workflow it ever loaded — each entry holds a loaded
#: module's objects and the file's source.
MAX_CACHED = 64


class WorkflowResolver:
    """Resolves workflow specs, reusing a result while the defining file is unchanged.

    The cache key includes the file's (mtime_ns, size, inode), so an edited
    workflow file is loaded again; loading runs the file as a fresh module.
    At most `max_cached` specs are kept (least recently used go first).
    """

    def __init__(self, max_cached: int = MAX_CACHED) -> None:
        if max_cached < 1:
            raise ValueError("max_cached must be at least 1")
        self._lock = threading.Lock()
        self._max_cached = max_cached
        self._cache: OrderedDict[tuple[str, str | None], tuple[tuple[Any, ...], ResolvedWorkflow]] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def cached(self, spec: str, project_path: str | None) -> ResolvedWorkflow | None:
        """The resolution of `spec` if one is cached and its file is unchanged, else None.

        Never loads a file (one `stat`), so a caller on a thread that must not run
        workflow code (the client gateway) can use it and hand only a miss to a worker thread.
        """
        key = (spec, project_path)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] == _stamp(cached[1].path):
            with self._lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
            return cached[1]
        return None

    def resolve(self, spec: str, project_path: str | None) -> ResolvedWorkflow:
        found = self.cached(spec, project_path)
        if found is not None:
            return found
        key = (spec, project_path)
        resolved = resolve(spec, project_path)
        resolved.graph()  # built once here, beside the load, not by the gateway's thread at a start
        with self._lock:
            self._cache[key] = (_stamp(resolved.path), resolved)
            self._cache.move_to_end(key)
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return resolved


def _stamp(path: str) -> tuple[Any, ...]:
    try:
        info = os.stat(path)
    except OSError:
        return ()
    return (info.st_mtime_ns, info.st_size, info.st_ino)
