"""Execute a workflow file's source as a fresh module.

Each call builds a new module object under a unique name, so two loads of
the same source share no module state. The module is in `sys.modules` only
while its code runs (dataclasses and some imports look themselves up there)
and is removed afterwards. During the exec the file's directory, its
package root and the project directory are on `sys.path` so sibling imports
work; sibling `.py` modules first imported by this exec are dropped from
`sys.modules` afterwards, so the next load sees their current source too.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import types
import uuid

# sys.path and sys.modules are process-global: serialize the window in which
# a load changes them, so concurrent loads cannot remove each other's entries.
# Reentrant because a workflow file may itself load workflows.
_IMPORT_WINDOW = threading.RLock()
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


def _is_sibling(module: object, root: str) -> bool:
    filename = getattr(module, "__file__", None)
    if not isinstance(filename, str) or not filename.endswith(".py"):
        return False  # extension modules cannot be loaded twice; keep them
    filename = os.path.abspath(filename)
    return filename.startswith(root + os.sep) and "site-packages" not in filename


@functools.lru_cache(maxsize=64)
def _compiled(source: bytes, path: str) -> types.CodeType:
    """Compiling is pure and code objects are immutable, so a warm worker reuses them;
    every load still executes the code into a fresh module (no shared module state)."""
    return compile(source, path, "exec", dont_inherit=True)


def exec_fresh(source: bytes, path: str, project_path: str | None) -> types.ModuleType:
    """Run `source` as a new module whose `__file__` is `path`; exceptions propagate."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    package, package_root = package_of(path)
    name = f"_piwf_workflow_{next(_sequence)}_{uuid.uuid4().hex[:12]}"
    module = types.ModuleType(name)
    module.__file__ = path
    module.__package__ = package
    code = _compiled(source, path)
    wanted = [directory, package_root] + ([os.path.abspath(project_path)] if project_path else [])
    with _IMPORT_WINDOW:
        added = [entry for entry in dict.fromkeys(wanted) if entry not in sys.path]
        sys.path[:0] = added
        before = set(sys.modules)
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        finally:
            sys.modules.pop(name, None)
            for entry in added:
                if entry in sys.path:
                    sys.path.remove(entry)
            for loaded in set(sys.modules) - before:
                if _is_sibling(sys.modules[loaded], directory):
                    del sys.modules[loaded]
    return module
