"""`WorkflowResolver`: workflow specs resolved once per version of their file.

Shared by the embedding API, the client gateway and the schedule keeper (one cache per host). The
resolver is also where the host runs workflow code for a start: loading a file (`resolve`,
`load_snapshot`) and a concurrency key function (`concurrency_key`) run on its `UserCode` threads,
bounded in time (workflows/user_code.py); a caller on any other thread waits for them there.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

from piwf_actors.workflows import discovery
from piwf_actors.workflows.discovery import ResolvedWorkflow
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.rate_limits import flow_spec, rate_spec, runs_flow_code
from piwf_actors.workflows.user_code import UserCode
from piwf_actors.workflows.waits import concurrency_key, runs_user_code

#: Specs kept resolved, least recently used dropped first. A host usually starts a handful of
#: workflows; one whose clients start runs from ever new files or projects (a CI job's fresh
#: checkout each time) must not keep every workflow it ever loaded — each entry holds a loaded
#: module's objects and the file's source.
MAX_CACHED = 64


class WorkflowResolver:
    """Resolves workflow specs, reusing a result while the defining file is unchanged.

    The cache key includes the file's (mtime_ns, size, inode), so an edited
    workflow file is loaded again; loading runs the file as a fresh module,
    on `user_code` (a `UserCode` of its own unless one is given; `close()`
    closes it). At most `max_cached` specs are kept (least recently used go first).
    """

    def __init__(self, max_cached: int = MAX_CACHED, user_code: UserCode | None = None) -> None:
        if max_cached < 1:
            raise ValueError("max_cached must be at least 1")
        self.user_code = user_code or UserCode()
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
        """The cached resolution, else `spec` loaded on a user-code thread (waited for: bounded by the
        load limit per file). Raises WorkflowNotFound, WorkflowLoadFailed, UserCodeTimeout,
        UserCodeUnavailable."""
        found = self.cached(spec, project_path)
        if found is not None:
            return found
        return self.user_code.call(lambda: self._load(spec, project_path))

    def _load(self, spec: str, project_path: str | None) -> ResolvedWorkflow:
        key = (spec, project_path)
        resolved = discovery.resolve(spec, project_path)
        resolved.graph()  # built once here, beside the load, not by the gateway's thread at a start
        with self._lock:
            self._cache[key] = (_stamp(resolved.path), resolved)
            self._cache.move_to_end(key)
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return resolved

    def concurrency_key(self, workflow: Workflow, run_input: Any) -> tuple[str, int] | None:
        """`waits.concurrency_key`, its key function (if any) run on a user-code thread, bounded by the
        key limit."""
        if not runs_user_code(workflow):
            return concurrency_key(workflow, run_input)
        return self.user_code.call(lambda: concurrency_key(workflow, run_input))

    def flow_spec(self, workflow: Workflow, run_input: Any, *, rate_only: bool = False) -> dict[str, Any]:
        """`rate_limits.flow_spec` (`rate_spec` with `rate_only`: a restart is never debounced), its key
        functions (if any) run on a user-code thread, bounded by the key limit."""
        compute = rate_spec if rate_only else flow_spec
        if not runs_flow_code(workflow):
            return compute(workflow, run_input)
        return self.user_code.call(lambda: compute(workflow, run_input))

    def load_snapshot(self, source: bytes, path: str, attr: str, expected_digest: str,
                      project_path: str | None) -> Workflow:
        """`discovery.load_snapshot` on a user-code thread (it executes the snapshot)."""
        return self.user_code.call(lambda: discovery.load_snapshot(source, path, attr, expected_digest, project_path))

    def close(self) -> None:
        """Close the user-code threads (see UserCode.close); the cache stays readable."""
        self.user_code.close()


def _stamp(path: str) -> tuple[Any, ...]:
    try:
        info = os.stat(path)
    except OSError:
        return ()
    return (info.st_mtime_ns, info.st_size, info.st_ino)
