"""Run operations shared by the embedding API and the client gateway.

Each function takes the host's writer handle (or a reader) and plain
arguments, and returns plain data. Workflow specs are resolved here, in the
calling thread: the host reads the workflow file once to compute its
definition digest and keep its source snapshot; the worker executes the
snapshot, never the file as it is later.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from piwf_actors.actors.writer import WriterHandle
from piwf_actors.errors import Rejected
from piwf_actors.store.requests import WriteCommand
from piwf_actors.workflows import ResolvedWorkflow, json_problem, resolve


@dataclass(frozen=True, slots=True)
class _CacheKey:
    spec: str
    project_path: str | None
    stamp: tuple[Any, ...]


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


def start_run(writer: WriterHandle, resolver: WorkflowResolver, **kwargs: Any) -> dict[str, Any]:
    """Resolve `workflow` and queue a run; returns {outcome, receipt: {run_id, status}, revision}."""
    command = start_run_command(resolver, **kwargs)
    return writer.call(command.name, command.args)


def start_run_command(resolver: WorkflowResolver, *, workflow: str, input: Any = None,
                      project_path: str | None = None, session_id: str | None = None, run_id: str | None = None,
                      client_id: str | None = None, idempotency_key: str | None = None,
                      request_id: str | None = None) -> WriteCommand:
    """The `run.start` command for a workflow spec (resolving it reads the workflow file)."""
    problem = json_problem(input)
    if problem is not None:
        raise Rejected(f"run input: {problem.replace('output is', 'it is')}")
    if project_path is not None:
        project_path = os.path.abspath(project_path)
    resolved = resolver.resolve(workflow, project_path)
    spec = {
        "workflow": resolved.workflow.name, "workflow_path": resolved.path, "workflow_attr": resolved.attr,
        "definition_digest": resolved.workflow.digest, "source": resolved.source, "input": input,
        "project_path": project_path, "session_id": session_id, "run_id": run_id,
    }
    fingerprint_payload = {"workflow": workflow, "input": input, "project_path": project_path,
                           "session_id": session_id, "run_id": run_id}
    return WriteCommand("run.start", {"spec": spec, "client_id": client_id, "idempotency_key": idempotency_key,
                                      "client_request_id": request_id, "payload": fingerprint_payload})
