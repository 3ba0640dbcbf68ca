"""What the three kinds that start child runs share (run_workflow, map_workflow, parallel): their
spec's base and its checks.

A child run is an ordinary run with `parent_run_id` set; the parent node parks until its children
end (store/commands/child_runs.py). `on_failure` says what a failed child does to the node:
`fail_fast` fails it, `collect` gathers the failures into its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.checks import fail, optional_callable
from piwf_actors.workflows.model import NodeSpec, Workflow

ON_FAILURE = ("fail_fast", "collect")


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildRunsSpec(NodeSpec):
    """Start child runs and wait for them (the three helpers differ in how children are listed)."""

    kind: ClassVar[str] = ""
    on_failure: str = "fail_fast"


def check_child_runs(node_id: str, spec: Any) -> None:
    """The options every child-runs node has: `on_failure`, no `timeout_s`, an optional `input` function."""
    if spec.on_failure not in ON_FAILURE:
        raise fail(node_id, f"on_failure must be one of {', '.join(ON_FAILURE)}, got {spec.on_failure!r}")
    if spec.timeout_s is not None:
        raise fail(node_id, "child runs take no timeout_s (a child's own nodes have theirs)")
    optional_callable(node_id, "input", spec.input)


def require_workflow(node_id: str, value: Any, what: str) -> Workflow:
    if not isinstance(value, Workflow):
        raise fail(node_id, f"{what} must be a Workflow (from define_workflow), got {type(value).__name__}")
    return value
