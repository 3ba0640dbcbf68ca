"""What the test kit says when a wait runs out, and how it names a workflow for the host.

`describe_run` turns a run's view, its open requests and its last events
into the few lines a failing test needs: what the run is doing (its status
and why it parked, the node it is at, the request or wait it is held by and
how much timer time that has left) and what happened last.

`workflow_spec` turns what a test passes to `Piwf.start` into the name a run
records: a `Workflow` object becomes `path/to/file.py:attr` (the worker loads
the run from that file's snapshot, so the workflow must be a module-level
attribute of a real file), a `file.py[:attr]` string becomes absolute, and a
name or `module:attr` is passed on for the host to resolve in the project.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from piwf_actors.results import RunEvent, RunView
from piwf_actors.timefmt import duration
from piwf_actors.workflows.model import Workflow

#: How many of a run's last events a failure message lists.
LAST_EVENTS = 8


def workflow_spec(workflow: Workflow | str) -> str:
    """The workflow name `run.start` gets for `workflow` (see the module docstring). Raises ValueError
    for a Workflow that is not a module-level attribute of a file."""
    if isinstance(workflow, str):
        path, sep, attr = workflow.partition(".py:")
        if sep:
            return f"{os.path.abspath(path + '.py')}:{attr}"
        return os.path.abspath(workflow) if workflow.endswith(".py") else workflow
    if not isinstance(workflow, Workflow):
        raise TypeError(f"start needs a Workflow or a workflow name, got {type(workflow).__name__}")
    if workflow.source_path and workflow.attr:
        return f"{workflow.source_path}:{workflow.attr}"
    if workflow.source_path is None:
        raise ValueError(f"workflow {workflow.name!r} was not defined in a file; the host's worker loads a run "
                         "from its workflow file, so define it at module level of a .py file")
    found = _attribute_of(workflow)
    if found is None:
        raise ValueError(f"workflow {workflow.name!r} is not a module-level attribute of {workflow.source_path}; "
                         "the host's worker loads a run from that file by attribute name, so assign it to a "
                         "module-level name (or pass 'file.py:attr')")
    return f"{workflow.source_path}:{found}"


def _attribute_of(workflow: Workflow) -> str | None:
    """The name `workflow` has in the loaded module of its source file, if any."""
    wanted = os.path.realpath(str(workflow.source_path))
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if not filename or os.path.realpath(filename) != wanted:
            continue
        for name, value in list(vars(module).items()):
            if value is workflow and not name.startswith("_"):
                return name
    return None


def _request_line(request: dict[str, Any]) -> str:
    """One open request of run.get's `waiting` (its clock counted on timer time by the host)."""
    left = request.get("remaining_s")
    if request.get("clock") == "running":
        clock = f"deadline in {duration(float(left))} of timer time" if left else "deadline passed (being applied)"
    elif request.get("clock") == "paused":
        clock = f"paused, {duration(float(left or 0))} left"
    else:
        clock = "no deadline"
    return f"{request.get('kind')} {request.get('node_id')!r} ({request.get('request_id')}) is open: {clock}"


def _wait_line(wait: dict[str, Any]) -> str:
    kind = wait.get("kind")
    left = wait.get("remaining_s")
    clock = "" if left is None else f", {duration(float(left))} of timer time left"
    if kind == "sleep":
        return f"sleep {wait.get('node_id')!r}{clock}"
    if kind == "message":
        return f"waiting for a message on topic {wait.get('topic')!r} at {wait.get('node_id')!r}{clock}"
    return (f"waiting for child runs at {wait.get('node_id')!r} "
            f"({wait.get('children_open')} of {wait.get('children_total')} open)")


def _event_line(event: RunEvent) -> str:
    where = f" {event.node_id}" if event.node_id else ""
    payload = event.payload if isinstance(event.payload, dict) else {}
    detail = payload.get("error_code") or payload.get("outcome") or payload.get("reason") or ""
    return f"{event.seq} {event.kind}{where}{f' ({detail})' if detail else ''}"


def describe_run(view: RunView | None, run_id: str, events: Sequence[RunEvent]) -> str:
    """A few lines on what run `run_id` is doing (None: there is no such run)."""
    if view is None:
        return f"there is no run {run_id}"
    status = view.status
    if view.park_reason:
        status += f" ({view.park_reason})"
    lines = [f"run {run_id} (workflow {view.workflow}) is {status}"
             + (f" at node {view.current_node!r}" if view.current_node else "")
             + f" after {view.steps} step(s)"]
    if view.error is not None:
        lines.append(f"error: {view.error.code}: {view.error.message}")
    lines += [_request_line(request) for request in view.extra.get("waiting") or ()]
    lines += [_wait_line(wait) for wait in view.waits]
    lines += [f"effect {effect.effect_id} of {effect.node_id!r} is {effect.status}"
              for effect in view.effects if effect.status in ("applying", "ambiguous")]
    if view.queue_reason:
        lines.append(f"queued: {view.queue_reason}")
    if events:
        lines.append("last events: " + "; ".join(_event_line(event) for event in events[-LAST_EVENTS:]))
    return "\n  ".join(lines)
