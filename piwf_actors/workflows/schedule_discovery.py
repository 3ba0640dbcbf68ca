"""Find the schedules a host runs, and notice when their files change.

The host looks in each project it was given (`piwf-host --project DIR`,
`HostConfig.projects`), in `<project>/.piwf/workflows/*.py`, then in the
user's `$XDG_CONFIG_HOME/piwf/workflows/*.py` — the directories workflow
discovery uses (`discovery.workflow_dirs`). Files load in file-name order,
each as a fresh module (`loader.exec_fresh`), and every public module-level
`Schedule` is found. Schedule names are global to the host: on a clash the
first found wins (projects in the order given, then the user directory) and
the clash is reported. A file that fails to load is reported and skipped.

A schedule whose workflow is a `Workflow` object is started through the
module attribute that holds it (`path.py:attr`), so a run snapshots the code
the schedule saw; one named by a string is resolved like `run.start` does
for that project (a discovered name, `module:attr` or `file.py[:attr]`).

`directory_stamps` is what the keeper polls: one `stat` per file, so a
change (edit, new file, removed file) is seen without loading anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piwf_actors.errors import UserCodeTimeout
from piwf_actors.workflows.discovery import LoadFailure, workflow_dirs
from piwf_actors.workflows.loader import exec_fresh
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.schedules import Schedule

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedSchedule:
    """A schedule as the host runs it: the definition, where it was found, and the workflow spec it starts."""

    schedule: Schedule
    path: str
    attr: str
    project_path: str | None  # None: the user's config directory
    workflow_spec: str

    @property
    def name(self) -> str:
        return self.schedule.name

    @property
    def digest(self) -> str:
        """The definition's digest together with where its workflow comes from."""
        text = "\0".join((self.schedule.digest, self.workflow_spec, self.project_path or ""))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ScheduleSet:
    """Every schedule found (by name), the files that failed, and the names defined more than once."""

    schedules: dict[str, LoadedSchedule]
    failures: tuple[LoadFailure, ...] = ()
    clashes: tuple[str, ...] = ()


def schedule_dirs(projects: Sequence[str]) -> list[tuple[str | None, Path]]:
    """(project path or None, directory) in precedence order: each project's, then the user's."""
    dirs: list[tuple[str | None, Path]] = []
    for project in projects:
        project_path = os.path.abspath(project)
        dirs.append((project_path, workflow_dirs(project_path)[0]))
    dirs.append((None, workflow_dirs(None)[-1]))
    return dirs


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.py") if not p.name.startswith((".", "_")))


def directory_stamps(dirs: Sequence[tuple[str | None, Path]]) -> tuple[Any, ...]:
    """A value that changes whenever a schedule file is added, removed or changed."""
    stamps: list[Any] = []
    for _project, directory in dirs:
        entries: list[tuple[str, int, int, int]] = []
        for file in _files(directory):
            try:
                info = file.stat()
            except OSError:
                continue
            entries.append((file.name, info.st_mtime_ns, info.st_size, info.st_ino))
        stamps.append((str(directory), tuple(entries)))
    return tuple(stamps)


def _workflow_spec(schedule: Schedule, module_vars: dict[str, Any], path: str) -> str:
    workflow = schedule.workflow
    if not isinstance(workflow, Workflow):
        return workflow
    for attr, value in module_vars.items():
        if value is workflow and not attr.startswith("_"):
            return f"{path}:{attr}"
    return workflow.name  # not a module attribute: found by name, like `piwf start NAME`


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def load_file(path: str, project_path: str | None) -> list[LoadedSchedule]:
    """The public module-level schedules of one file (loading it runs it). Raises what the file raises."""
    path = os.path.abspath(path)
    module = exec_fresh(Path(path).read_bytes(), path, project_path)
    found = []
    module_vars = vars(module)
    for attr, value in module_vars.items():
        if isinstance(value, Schedule) and not attr.startswith("_"):
            found.append(LoadedSchedule(value, path, attr, project_path, _workflow_spec(value, module_vars, path)))
    return found


def load_schedules(projects: Sequence[str]) -> ScheduleSet:
    """Every schedule in the host's directories (see the module docstring)."""
    schedules: dict[str, LoadedSchedule] = {}
    failures: list[LoadFailure] = []
    clashes: list[str] = []
    for project_path, directory in schedule_dirs(projects):
        for file in _files(directory):
            path = os.path.abspath(file)
            try:
                loaded = load_file(path, project_path)
            except UserCodeTimeout as exc:  # its import, started by an earlier load, never finished
                error = exc.one_line()
                log.warning("skipping schedule file: %s", error)
                failures.append(LoadFailure(path, error))
                continue
            except (Exception, SystemExit) as exc:  # a schedule file must not stop the host
                error = _one_line(f"cannot load {path}: {type(exc).__name__}: {exc}")
                log.warning("skipping schedule file: %s", error)
                failures.append(LoadFailure(path, error))
                continue
            for item in loaded:
                first = schedules.get(item.name)
                if first is None:
                    schedules[item.name] = item
                elif first.schedule is not item.schedule:
                    message = (f"schedule {item.name!r} is defined in {first.path}:{first.attr} and again in "
                               f"{path}:{item.attr}; the first is used")
                    log.warning("%s", message)
                    clashes.append(message)
    return ScheduleSet(schedules, tuple(failures), tuple(clashes))
