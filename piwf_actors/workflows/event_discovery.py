"""Find the workflows a host starts on events: every public module-level workflow with `on_event` in
the directories the schedule keeper reads (`schedule_discovery.schedule_dirs`: each project's
`.piwf/workflows/*.py`, then the user's). A subscription is named by its workflow's name (global to
the host: on a clash the first found wins and the clash is reported); it is started through the module
attribute that holds it (`path.py:attr`), so a run snapshots the code the keeper saw.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import UserCodeTimeout
from piwf_actors.workflows.discovery import LoadFailure
from piwf_actors.workflows.loader import exec_fresh
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.schedule_discovery import schedule_dirs

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A workflow started by events, and where it was found."""

    workflow: Workflow
    path: str
    attr: str
    project_path: str | None

    @property
    def name(self) -> str:
        return self.workflow.name

    @property
    def event_name(self) -> str:
        return str(self.workflow.on_event.name)

    @property
    def workflow_spec(self) -> str:
        return f"{self.path}:{self.attr}"

    def summary(self) -> dict[str, Any]:
        """What is recorded (and listed) of the subscription."""
        batching = self.workflow.batch
        return {"workflow": self.workflow.name, "event": self.event_name, "path": self.path, "attr": self.attr,
                "project_path": self.project_path, "filter": self.workflow.on_event.filter is not None,
                "batch": None if batching is None else {"max_items": batching.max_items,
                                                        "max_wait_s": batching.max_wait_s,
                                                        "keyed": batching.key is not None}}

    @property
    def digest(self) -> str:
        return hashlib.sha256(canonical_json([self.workflow.digest, self.summary()]).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class SubscriptionSet:
    subscriptions: dict[str, Subscription]
    failures: tuple[LoadFailure, ...] = ()
    clashes: tuple[str, ...] = ()


def workflow_files(directory: Path) -> list[Path]:
    """The workflow files of a directory, in name order (as schedule discovery reads them)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.py") if not p.name.startswith((".", "_")))


def load_file(path: str, project_path: str | None) -> list[Subscription]:
    """The public module-level workflows of one file that declare `on_event` (loading it runs it)."""
    path = os.path.abspath(path)
    module = exec_fresh(Path(path).read_bytes(), path, project_path)
    return [Subscription(value, path, attr, project_path) for attr, value in vars(module).items()
            if isinstance(value, Workflow) and value.on_event is not None and not attr.startswith("_")]


def load_subscriptions(projects: Sequence[str]) -> SubscriptionSet:
    """Every subscriber in the host's directories (see the module docstring)."""
    found: dict[str, Subscription] = {}
    failures: list[LoadFailure] = []
    clashes: list[str] = []
    for project_path, directory in schedule_dirs(projects):
        for file in workflow_files(directory):
            path = os.path.abspath(file)
            try:
                loaded = load_file(path, project_path)
            except UserCodeTimeout as exc:
                failures.append(LoadFailure(path, exc.one_line()))
                continue
            except (Exception, SystemExit) as exc:  # a workflow file must not stop the host
                failures.append(LoadFailure(path, " ".join(f"cannot load {path}: {type(exc).__name__}: {exc}"
                                                           .split())[:500]))
                continue
            for item in loaded:
                first = found.get(item.name)
                if first is None:
                    found[item.name] = item
                elif first.workflow is not item.workflow:
                    message = (f"workflow {item.name!r} on event {item.event_name!r} is defined in {first.path}:"
                               f"{first.attr} and again in {path}:{item.attr}; the first is used")
                    log.warning("%s", message)
                    clashes.append(message)
    return SubscriptionSet(found, tuple(failures), tuple(clashes))
