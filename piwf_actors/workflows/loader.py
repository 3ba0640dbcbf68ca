"""Execute a workflow file's source as a fresh module.

Each call builds a new module object under a unique name, so two loads of
the same source share no module state (except on a host's user-code threads,
where loads of the same bytes at the same time share one execution:
workflows/user_code.py). The module is in `sys.modules` only while its code
runs (dataclasses and some imports look themselves up there) and is removed
afterwards. Its imports are those of an `ImportScope` (workflows/import_scope.py):
the file's directory, its package root and the project directory are searched
first, so sibling imports work, without changing `sys.path` and without a lock
held while the file runs; sibling modules the load imported are dropped from
`sys.modules` afterwards, so the next load sees their current source too. A
load that would wait in a circle with another for their siblings' names lets
go of them and runs the file again (`in_scope`).
On a host's user-code thread the execution is a `LOAD` phase: bounded by
`UserCodeLimits.load_timeout_s`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import sys
import types
import uuid

from piwf_actors.workflows.import_scope import ImportScope, in_scope, loading
from piwf_actors.workflows.user_code import LOAD, on_user_code_thread, shared

_sequence = itertools.count()


def package_of(path: str) -> tuple[str, str]:
    """`(package name, directory to put on sys.path)` for a module file.

    Walks up while directories hold `__init__.py`, so a file inside a
    package gets `__package__` set and its relative imports work.
    """
    directory = os.path.dirname(path)
    parts: list[str] = []
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        parts.append(os.path.basename(directory))
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return ".".join(reversed(parts)), directory


@functools.lru_cache(maxsize=64)
def _compiled(source: bytes, path: str) -> types.CodeType:
    """Compiling is pure and code objects are immutable, so a warm worker reuses them;
    every load still executes the code into a fresh module (no shared module state)."""
    return compile(source, path, "exec", dont_inherit=True)


def exec_fresh(source: bytes, path: str, project_path: str | None) -> types.ModuleType:
    """Run `source` as a new module whose `__file__` is `path`; exceptions propagate. On a user-code
    thread, bounded (`UserCodeTimeout`) and shared with a concurrent load of the same bytes; a load
    inside another (a workflow file that loads workflows) runs within that one's time and is not shared."""
    path = os.path.abspath(path)
    if loading() or not on_user_code_thread():
        # Nothing to share or bound (a worker's launch, a CLI): no key to hash the source for.
        return _exec(source, path, project_path)
    key = ("exec", path, project_path, hashlib.sha256(source).digest())
    return shared(key, LOAD, f"cannot load {path}: its import", lambda: _exec(source, path, project_path))


def _exec(source: bytes, path: str, project_path: str | None) -> types.ModuleType:
    directory = os.path.dirname(path)
    package, package_root = package_of(path)
    code = _compiled(source, path)

    def run(scope: ImportScope) -> types.ModuleType:
        name = f"_piwf_workflow_{next(_sequence)}_{uuid.uuid4().hex[:12]}"
        module = types.ModuleType(name)
        module.__file__ = path
        module.__package__ = package
        module.__dict__["__builtins__"] = scope.builtins
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        finally:
            sys.modules.pop(name, None)
        return module

    return in_scope([directory, package_root] + ([project_path] if project_path else []), run)
