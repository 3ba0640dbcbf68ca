"""Imports made while one workflow file loads, with no process-wide lock around the load.

A workflow file imports its siblings (`from helpers import x`), modules of its package and of its
project. Putting those directories on `sys.path` for the length of the load would need a lock held
while the file runs — and a file whose import blocks would then block every other load of the host.
Instead, an `ImportScope` (one per load, entered on the loading thread):

- searches its directories through a finder on `sys.meta_path` that answers only on the thread whose
  scope is active (`sys.path` is never changed), so the search is the old one: the file's
  directory, its package root and the project, before the rest of `sys.path`;
- holds the top-level name of each module its code imports (through an `__import__` of its own in
  the builtins of the file and of every module the scope creates): while one load holds a name whose
  module comes from one file, another load whose `helpers` is another file waits (no longer than its
  own time limit) instead of being handed the first one's `helpers` from `sys.modules`; loads that
  import the same file share it;
- drops what it created (its siblings, their submodules) from `sys.modules` when the last load
  holding them ends, so the next load sees their current source.

Two loads that each hold a name the other wants would wait for each other until their limits ran
out, so a load that holds names waits only for younger loads (by when their outermost load began);
when an older one holds the name it wants, it lets go of everything and starts again once the name is
free (`RestartLoad`, caught by the loader: the file's import-time code then runs again from the top).
Waits then only ever go from older to younger loads, and a load that starts again keeps its age, so
it is the oldest in the end. A load nested in another on one thread (a workflow file that loads
workflows) cannot wait for the one around it: another module of a name that one holds is an
ImportError at once.

Modules already imported for everyone (the standard library, installed packages, piwf_actors) are
never held: they are shared as `sys.modules` shares them. `importlib.import_module` does not pass
through a scope's `__import__`: what it imports is found the same way but not held.
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import itertools
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from piwf_actors.workflows.user_code import remaining

T = TypeVar("T")


@dataclass
class _Holders:
    """Who holds one top-level module name, and which file it is imported from."""

    origin: str | None  # None: not found in the holders' directories (a library)
    scopes: set[ImportScope] = field(default_factory=set)
    created: bool = False  # a scope's finder created the module: dropped when the last holder leaves


class _Names:
    """The held names of every active scope (process-wide, as `sys.modules` is)."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.held: dict[str, _Holders] = {}


_NAMES = _Names()
#: Ages of outermost loads: lower is older.
_AGES = itertools.count()


class RestartLoad(BaseException):
    """Raised in a load that holds names and wants one an older load holds (see the module docstring):
    the loader lets go of everything the load holds, waits for the name (`wait_until_free`), and runs
    the file again. A BaseException, so the file's own `except Exception` around an import passes it on."""

    def __init__(self, name: str, origin: str | None) -> None:
        super().__init__(f"module {name!r} is held by an older load")
        self.name, self.origin = name, origin

    def wait_until_free(self) -> None:
        """Until no load holds the name from another place than this load's; bounded like any wait of a
        load (ImportError when the time of the current phase runs out)."""
        left = remaining()
        deadline = None if left is None else time.monotonic() + left
        with _NAMES.lock:
            while True:
                holders = _NAMES.held.get(self.name)
                if holders is None or holders.origin == self.origin:
                    return
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    raise _busy(self.name, holders)
                _NAMES.lock.wait(wait)


def _busy(top: str, holders: _Holders) -> ImportError:
    return ImportError(f"module {top!r} is being imported from {holders.origin or 'elsewhere'} by another load "
                       "that has not finished")


class _Stack(threading.local):
    scopes: list[ImportScope]

    def __init__(self) -> None:
        self.scopes = []


_stack = _Stack()


def _current() -> ImportScope | None:
    return _stack.scopes[-1] if _stack.scopes else None


class ImportScope:
    """The imports of one load (see the module docstring). Use as a context manager on the loading
    thread; `builtins` goes into the globals of the module the load executes."""

    def __init__(self, dirs: Sequence[str], age: int | None = None) -> None:
        """`age`: that of a load starting again (RestartLoad); a new outermost load gets the next one, a
        nested load its outermost load's."""
        self.dirs = list(dict.fromkeys(os.path.abspath(d) for d in dirs))
        self.held: set[str] = set()
        self.builtins: dict[str, Any] = {**builtins.__dict__, "__import__": self._import}
        self.age = age
        self.nested = False  # another scope was active on this thread when this one began
        self._active = False

    def __enter__(self) -> ImportScope:
        _install_finder()
        self.nested = bool(_stack.scopes)
        if self.nested:
            self.age = _stack.scopes[0].age
        elif self.age is None:
            self.age = next(_AGES)
        _stack.scopes.append(self)
        self._active = True
        return self

    def __exit__(self, *_exc: object) -> None:
        self._active = False
        _stack.scopes.remove(self)
        self._release()

    # --- holding names -------------------------------------------------------------------------

    def _import(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (),  # noqa: A002
                level: int = 0) -> types.ModuleType:
        if self._active and _current() is self:
            if level:
                package = (globals or {}).get("__package__") or ""
                top = package.partition(".")[0]
            else:
                top = name.partition(".")[0]
            if top and top not in self.held:
                self._hold(top)
        return builtins.__import__(name, globals, locals, fromlist, level)

    def _origin(self, top: str) -> str | None:
        spec = _spec_in(self.dirs, top)
        if spec is None:
            return None
        if spec.origin and spec.origin != "namespace":
            return spec.origin
        locations = list(spec.submodule_search_locations or ())
        return locations[0] if locations else None

    def _hold(self, top: str) -> None:
        """Hold `top` for this scope, waiting while another scope holds it from another file."""
        if top in sys.modules and top not in _NAMES.held:
            return  # imported for everyone already: nothing to hold
        origin = self._origin(top)
        left = remaining()
        deadline = None if left is None else time.monotonic() + left
        with _NAMES.lock:
            while True:
                holders = _NAMES.held.get(top)
                if holders is None:
                    if top in sys.modules:
                        return
                    _NAMES.held[top] = _Holders(origin, {self})
                    self.held.add(top)
                    return
                if holders.origin == origin:
                    holders.scopes.add(self)
                    self.held.add(top)
                    return
                on_this_thread = _stack.scopes
                if any(scope in holders.scopes for scope in on_this_thread):
                    raise ImportError(f"module {top!r} is imported from {holders.origin or 'elsewhere'} by a load "
                                      f"this load runs inside; a load nested in it cannot import another {top!r}")
                assert self.age is not None
                if (any(scope.held for scope in on_this_thread)
                        and any(scope.age is not None and scope.age < self.age for scope in holders.scopes)):
                    raise RestartLoad(top, origin)  # waiting could close a circle of waits
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    raise _busy(top, holders)
                _NAMES.lock.wait(wait)

    def created(self, top: str, origin: str | None) -> None:
        """The finder created module `top` for this scope: it goes when its last holder does."""
        with _NAMES.lock:
            holders = _NAMES.held.get(top)
            if holders is None:
                holders = _NAMES.held[top] = _Holders(origin, {self})
            holders.scopes.add(self)
            holders.created = True
            self.held.add(top)

    def _release(self) -> None:
        with _NAMES.lock:
            for top in self.held:
                holders = _NAMES.held.get(top)
                if holders is None:
                    continue
                holders.scopes.discard(self)
                if holders.scopes:
                    continue
                del _NAMES.held[top]
                if holders.created:
                    for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
                        del sys.modules[name]
            self.held.clear()
            _NAMES.lock.notify_all()


def in_scope(dirs: Sequence[str], work: Callable[[ImportScope], T]) -> T:
    """`work(scope)` with a new scope of `dirs` active on this thread. An outermost load that must let
    go of its names (RestartLoad) runs `work` again in a new scope of the same age, once the name it
    wants is free; a nested one passes RestartLoad on to the load around it."""
    age: int | None = None
    while True:
        scope = ImportScope(dirs, age)
        try:
            with scope:
                return work(scope)
        except RestartLoad as restart:
            if scope.nested:
                raise
            age = scope.age
            restart.wait_until_free()


def loading() -> bool:
    """Whether a load is under way on this thread (the next one would be nested in it)."""
    return bool(_stack.scopes)


# --- the finder ---------------------------------------------------------------------------------


class _ScopedLoader(importlib.abc.Loader):
    """A found module's loader, giving the module its scope's builtins (so its own imports hold
    names too); everything else is the wrapped loader's."""

    def __init__(self, loader: Any, scope: ImportScope) -> None:
        self._loader = loader
        self._scope = scope

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: types.ModuleType) -> None:
        module.__dict__["__builtins__"] = self._scope.builtins
        self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _ScopeFinder(importlib.abc.MetaPathFinder):
    """Finds modules in the directories of the loading thread's scope; inert on every other thread."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        scope = _current()
        if scope is None or not scope._active:
            return None
        top = fullname.partition(".")[0]
        if path is None:
            spec = _spec_in(scope.dirs, fullname)
            if spec is None:
                return None
            scope.created(top, spec.origin)
        else:
            holders = _NAMES.held.get(top)
            if top not in scope.held or holders is None or not holders.created:
                return None  # a submodule of something this scope did not create: the usual search
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None:
                return None
        if spec.loader is not None:
            spec.loader = _ScopedLoader(spec.loader, scope)
        return spec


def _spec_in(dirs: list[str], name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of top-level module `name` a search of `dirs` before `sys.path` finds, when it is in
    `dirs`: a module or regular package there; a namespace package with a portion there, unless a
    regular package of that name is on `sys.path` (which wins over namespace portions, as it would with
    `dirs` at the front of `sys.path`: a project's data directory must not hide an installed package)."""
    spec = importlib.machinery.PathFinder.find_spec(name, dirs)
    if spec is None or spec.origin is not None or spec.submodule_search_locations is None:
        return spec
    elsewhere = importlib.machinery.PathFinder.find_spec(name, sys.path)
    if elsewhere is not None and elsewhere.origin is not None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, [*dirs, *sys.path])


_FINDER = _ScopeFinder()
_INSTALL = threading.Lock()


def _install_finder() -> None:
    """Put the finder on `sys.meta_path` once, just before the path finder (after the built-in and
    frozen importers, which sys.path never shadowed either)."""
    if _FINDER in sys.meta_path:
        return
    with _INSTALL:
        if _FINDER in sys.meta_path:
            return
        index = next((i for i, finder in enumerate(sys.meta_path) if finder is importlib.machinery.PathFinder),
                     len(sys.meta_path))
        sys.meta_path.insert(index, _FINDER)
