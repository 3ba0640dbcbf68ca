"""Find workflows by name, load them, and reload a stored source snapshot.

Discovery scans `<project>/.piwf/workflows/*.py`, then
`$XDG_CONFIG_HOME/piwf/workflows/*.py` (default `~/.config`), in file-name
order, and loads each file as a fresh module (`loader.exec_fresh`). Every
module-level `Workflow` attribute not starting with `_` is found under its
workflow name. On a name clash the project wins over the user directory;
within one directory a workflow defined in the file wins over one the file
only imported, then the first file and attribute win (a warning is logged).
A file that fails to load is skipped with a warning and mentioned in the
`WorkflowNotFound` detail when a name is not found (leading the detail, as it
is the likely cause), followed by close names (difflib) or what was found.
`discover_all` lists both the workflows and the files that failed (`piwf
workflows`).

The source bytes that `resolve` returns are exactly the bytes it executed,
so a run's snapshot is the code its workflow object came from.
"""

from __future__ import annotations

import difflib
import importlib.util
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from piwf_actors.errors import UserCodeTimeout, WorkflowLoadFailed, WorkflowLoadTimedOut, WorkflowNotFound
from piwf_actors.workflows.graph_data import graph_blob
from piwf_actors.workflows.import_scope import in_scope
from piwf_actors.workflows.loader import exec_fresh
from piwf_actors.workflows.model import Workflow

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkflowRef:
    """A discovered workflow: its name and where it is defined (and the shape its input must have,
    for listings; not part of a ref's identity)."""

    name: str
    path: str
    attr: str
    input_shape: Mapping[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ResolvedWorkflow:
    """A loaded workflow with the exact source snapshot it was loaded from."""

    workflow: Workflow
    path: str
    attr: str
    source: bytes
    # The definition's graph as stored with each run (workflows/graph_data.py), built once on first use:
    # the resolver keeps a resolution while its file is unchanged, so a start does not build it again.
    _graph: list[bytes] = field(default_factory=list, compare=False, repr=False)

    def graph(self) -> bytes:
        """The bytes of `graph_data.graph_document(self.workflow)` (no callback of it is called)."""
        if not self._graph:
            self._graph.append(graph_blob(self.workflow))
        return self._graph[0]


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A workflow file that discovery could not load, with the one-line reason."""

    path: str
    error: str


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery found: the workflows by name, the files that failed, the directories searched."""

    workflows: dict[str, WorkflowRef]
    failures: list[LoadFailure]
    dirs: list[Path]


@dataclass(frozen=True, slots=True)
class _Found:
    ref: WorkflowRef
    rank: tuple[int, int, int, int]  # (scope, imported?, file, attribute) — lower wins
    loaded: ResolvedWorkflow


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _load_error(path: str, exc: BaseException) -> WorkflowLoadFailed:
    return WorkflowLoadFailed(_one_line(f"cannot load {path}: {type(exc).__name__}: {exc}"))


def workflow_dirs(project_path: str | None) -> list[Path]:
    """The discovery directories in priority order (existing or not)."""
    dirs: list[Path] = []
    if project_path:
        dirs.append(Path(project_path).resolve() / ".piwf" / "workflows")
    config_home = os.environ.get("XDG_CONFIG_HOME", "")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(config_home) if os.path.isabs(config_home) else Path.home() / ".config"
    dirs.append(base / "piwf" / "workflows")
    return dirs


def _load_file(path: str, project_path: str | None) -> tuple[bytes, dict[str, Workflow], set[str]]:
    """The file's bytes, its public module-level workflows by attribute name
    (with `source_path`/`attr` set to this file), and the attributes whose
    workflow was defined by this file rather than imported into it."""
    path = os.path.abspath(path)
    try:
        source = Path(path).read_bytes()
        module = exec_fresh(source, path, project_path)
    except UserCodeTimeout as exc:  # another load of the file ran out of time (shared, on the host)
        raise WorkflowLoadTimedOut(exc.one_line()) from None
    except (Exception, SystemExit) as exc:  # a workflow file must not stop the host
        raise _load_error(path, exc) from exc
    found: dict[str, Workflow] = {}
    defined_here: set[str] = set()
    for attr, value in vars(module).items():
        if isinstance(value, Workflow) and not attr.startswith("_"):
            if value.source_path == path:
                defined_here.add(attr)
            found[attr] = replace(value, source_path=path, attr=attr)
    return source, found, defined_here


def _scan(project_path: str | None) -> tuple[dict[str, _Found], list[LoadFailure]]:
    best: dict[str, _Found] = {}
    failures: list[LoadFailure] = []
    for scope, directory in enumerate(workflow_dirs(project_path)):
        try:
            present = directory.is_dir()
        except OSError:  # a path the system refuses (a name too long, …) holds no workflows either
            present = False
        if not present:
            continue
        files = sorted(p for p in directory.glob("*.py") if not p.name.startswith((".", "_")))
        for file_index, file in enumerate(files):
            path = os.path.abspath(file)
            try:
                source, found, defined_here = _load_file(path, project_path)
            except WorkflowLoadFailed as exc:
                logger.warning("skipping workflow file: %s", exc)
                failures.append(LoadFailure(path, str(exc)))
                continue
            for attr_index, (attr, workflow) in enumerate(found.items()):
                rank = (scope, int(attr not in defined_here), file_index, attr_index)
                current = best.get(workflow.name)
                if current is not None and current.rank[0] == scope and (
                    current.loaded.workflow.digest != workflow.digest
                ):
                    logger.warning(
                        "two workflows named %r in %s: %s:%s and %s:%s", workflow.name, directory,
                        current.ref.path, current.ref.attr, path, attr,
                    )
                if current is None or rank < current.rank:
                    ref = WorkflowRef(name=workflow.name, path=path, attr=attr, input_shape=workflow.input_shape)
                    loaded = ResolvedWorkflow(workflow, path, attr, source)
                    best[workflow.name] = _Found(ref, rank, loaded)
    return best, failures


def discover(project_path: str | None) -> dict[str, WorkflowRef]:
    """Every discoverable workflow by name (see the module docstring for precedence)."""
    best, _ = _scan(project_path)
    return {name: found.ref for name, found in best.items()}


def discover_all(project_path: str | None) -> Discovery:
    """Every discoverable workflow by name, and every workflow file that failed to load (why, in one line)."""
    best, failures = _scan(project_path)
    return Discovery({name: found.ref for name, found in best.items()}, failures, workflow_dirs(project_path))


def _not_found_detail(name: str, found: list[str], failures: list[LoadFailure], dirs: list[Path]) -> str:
    """Why `name` is not a discovered workflow. A file that failed to load leads (the one named most like
    `name` when there is one): it likely defines the workflow. Then the discovered names close to `name`
    (a typo), else the names found. When a close name exists and no failed file is named like `name`,
    the typo is the likelier cause, and the suggestion leads."""
    close = difflib.get_close_matches(name, found, n=3, cutoff=0.6)
    suggestion = ("did you mean " + " or ".join(repr(other) for other in close) + "?") if close else ""
    failure = ""
    likely: list[str] = []
    if failures:
        stems = [Path(item.path).stem for item in failures]
        likely = difflib.get_close_matches(name, stems, n=1, cutoff=0.6)
        first = failures[stems.index(likely[0])] if likely else failures[0]
        error = first.error if len(first.error) <= 300 else first.error[:299] + "…"
        failure = f"{len(failures)} workflow file(s) failed to load, first: {error}"
    if failure and (likely or not close):
        parts = [failure, suggestion]
    else:
        parts = ["not among the discovered workflows", suggestion, failure]
    if not close:
        names = sorted(found)
        parts.append(("discovered: " + ", ".join(names[:10]) + (" …" if len(names) > 10 else "")) if names else
                     "no workflow was discovered in " + " or ".join(str(d) for d in dirs))
    return "; ".join(part for part in parts if part)


def _file_spec_path(file_part: str, project_path: str | None) -> str:
    if os.path.isabs(file_part):
        return os.path.abspath(file_part)
    if project_path:
        candidate = os.path.join(project_path, file_part)
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return os.path.abspath(file_part)


def _module_path(module_name: str, project_path: str | None) -> str:
    # Finding a submodule imports its package (its __init__ runs): in a scope searching the project
    # first, which drops what it imported afterwards.
    try:
        spec = in_scope([project_path] if project_path else [], lambda _scope: importlib.util.find_spec(module_name))
    except (ImportError, ValueError) as exc:
        raise WorkflowNotFound(module_name, _one_line(f"cannot import: {exc}")) from exc
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py") or not os.path.isfile(origin):
        raise WorkflowNotFound(module_name, "not an importable Python source module")
    return origin


def _from_file(spec: str, path: str, attr: str | None, project_path: str | None) -> ResolvedWorkflow:
    if not os.path.isfile(path):
        raise WorkflowNotFound(spec, f"no file {path}")
    source, found, _ = _load_file(path, project_path)
    if attr is None:
        if len({id(w) for w in found.values()}) != 1:
            raise WorkflowNotFound(spec, f"{path} defines {len(found)} workflows; name one as {path}:attr")
        attr = next(iter(found))
    workflow = found.get(attr)
    if workflow is None:
        close = difflib.get_close_matches(attr, list(found), n=3, cutoff=0.6)
        hint = ("did you mean " + " or ".join(repr(other) for other in close) + "?") if close else (
            "its workflows: " + ", ".join(found) if found else "it defines no workflow")
        raise WorkflowNotFound(spec, _one_line(f"{path} has no workflow attribute {attr!r}; {hint}"))
    return ResolvedWorkflow(workflow=workflow, path=path, attr=attr, source=source)


def resolve(spec: str, project_path: str | None) -> ResolvedWorkflow:
    """Load the workflow named by `spec`.

    `spec` is a discovered workflow name, `module:attr` (an importable module;
    the path is the module's file), or `path/to/file.py[:attr]` (relative to
    `project_path` if it exists there, else to the current directory; `attr`
    may be left out when the file defines exactly one workflow). Raises
    WorkflowNotFound for an unknown name, file, module or attribute and
    WorkflowLoadFailed when the file fails to execute.
    """
    if not isinstance(spec, str) or not spec:
        raise WorkflowNotFound(str(spec), "empty workflow spec")
    target, colon, attr = spec.rpartition(":")
    if not colon:
        target, attr = spec, ""
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = _file_spec_path(target, project_path)
        return _from_file(spec, path, attr or None, project_path)
    if colon:
        if not attr:
            raise WorkflowNotFound(spec, "expected module:attr")
        return _from_file(spec, _module_path(target, project_path), attr, project_path)
    best, failures = _scan(project_path)
    found = best.get(spec)
    if found is None:
        raise WorkflowNotFound(spec, _one_line(_not_found_detail(spec, list(best), failures,
                                                                 workflow_dirs(project_path))))
    return found.loaded


def load_snapshot(
    source: bytes, path: str, attr: str, expected_digest: str, project_path: str | None
) -> Workflow:
    """The workflow `attr` defined by executing `source` as a fresh module.

    Raises WorkflowLoadFailed (one-line message) when the source fails to
    execute, `attr` is missing or not a Workflow, or its digest is not
    `expected_digest` (the snapshot no longer builds the workflow the run
    started with, e.g. because a module it imports changed).
    """
    try:
        module = exec_fresh(source, path, project_path)
    except UserCodeTimeout as exc:
        raise WorkflowLoadTimedOut(exc.one_line()) from None
    except (Exception, SystemExit) as exc:
        raise _load_error(path, exc) from exc
    workflow = getattr(module, attr, None)
    if not isinstance(workflow, Workflow):
        what = "missing" if workflow is None else f"a {type(workflow).__name__}, not a Workflow"
        raise WorkflowLoadFailed(_one_line(f"cannot load {path}:{attr}: attribute is {what}"))
    if workflow.digest != expected_digest:
        raise WorkflowLoadFailed(_one_line(
            f"workflow {workflow.name!r} from {path}:{attr} has digest {workflow.digest[:12]}…, "
            f"expected {expected_digest[:12]}…; it no longer builds the workflow the run started with"
        ))
    namespace = {value.digest: name for name, value in vars(module).items()
                 if isinstance(value, Workflow) and not name.startswith("__")}
    return replace(workflow, source_path=os.path.abspath(path), attr=attr, namespace=MappingProxyType(namespace))
