"""Resource managers: reconcile loops that own workflows.

A manager is a Python file `<project>/.piwf/resource-managers/<name>.py`
exposing a module attribute built with `define_resource_manager(name, …)`;
the manager's name is the file's stem (as in pi-workflows, so the host finds
a manager's file without running any code, and a client can send the file's
digest with `resource.apply`)::

    from piwf_actors.workflows import define_resource_manager

    def reconcile(ctx):
        run = ctx.workflows.ensure("build", {"repo": ctx.spec["repo"]}, key=f"build-{ctx.generation}")
        if run["status"] != "done":
            return {"result": "requeue_after", "after_s": 30, "status_patch": {"phase": run["status"]}}
        return {"result": "done", "status_patch": {"phase": "built", "output": run["output"]}}

    builds = define_resource_manager("builds", reconcile=reconcile)

The worker loads the file fresh for every reconcile (the host never executes
it). `reconcile(ctx)` returns `{result, status_patch?, finalizers?, after_s?}`
(see `piwf_actors.resources.policy.check_result`); `finalize(ctx)`, when
given, is called instead of `reconcile` once the resource is being deleted.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError, WorkflowLoadFailed
from piwf_actors.workflows.loader import exec_fresh

#: A manager's name: its file's stem.
MANAGER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: Where a project keeps its managers.
MANAGER_DIR = (".piwf", "resource-managers")
DEFAULT_TIMEOUT_S = 60.0

Reconcile = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class ResourceManager:
    name: str
    reconcile: Reconcile
    finalize: Reconcile | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def define_resource_manager(name: str, *, reconcile: Reconcile, finalize: Reconcile | None = None,
                            timeout_s: float = DEFAULT_TIMEOUT_S) -> ResourceManager:
    """A resource manager named `name` (the stem of the file that defines it)."""
    if not isinstance(name, str) or not MANAGER_NAME.fullmatch(name):
        raise WorkflowDefinitionError(f"resource manager name {name!r} must match {MANAGER_NAME.pattern}")
    if not callable(reconcile):
        raise WorkflowDefinitionError(f"resource manager {name!r}: reconcile must be callable")
    if finalize is not None and not callable(finalize):
        raise WorkflowDefinitionError(f"resource manager {name!r}: finalize must be callable or None")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 86400:
        raise WorkflowDefinitionError(f"resource manager {name!r}: timeout_s must be in (0, 86400]")
    return ResourceManager(name, reconcile, finalize, float(timeout_s))


def manager_path(project_path: str, name: str) -> str:
    """The file that must define manager `name` in `project_path` (it may not exist)."""
    return str(Path(os.path.abspath(project_path)).joinpath(*MANAGER_DIR, f"{name}.py"))


def file_digest(path: str) -> str:
    """sha256 hex of the file's bytes: what `resource.apply` compares (the client sends the one it saw)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_manager(path: str, name: str, project_path: str | None) -> tuple[ResourceManager, str]:
    """Execute the manager file as a fresh module; its manager `name` and the digest of the bytes run.

    Raises WorkflowLoadFailed (one line) when the file is missing, fails, or defines no such manager."""
    try:
        source = Path(path).read_bytes()
        module = exec_fresh(source, path, project_path)
    except (Exception, SystemExit) as exc:
        raise WorkflowLoadFailed(" ".join(f"cannot load {path}: {type(exc).__name__}: {exc}".split())[:500]) from exc
    found = [value for attr, value in vars(module).items()
             if isinstance(value, ResourceManager) and not attr.startswith("_") and value.name == name]
    if not found:
        raise WorkflowLoadFailed(f"{path} defines no resource manager named {name!r} "
                                 "(define_resource_manager(name, …) as a module attribute)")
    return found[0], hashlib.sha256(source).hexdigest()
