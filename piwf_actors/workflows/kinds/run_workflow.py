"""run_workflow: one child run of a workflow; the node's output is the child's output, and a failed
or cancelled child fails the node. The worker asks the host to start it (worker/executors/children.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common
from piwf_actors.workflows.kinds.children import ChildRunsSpec, check_child_runs, require_workflow
from piwf_actors.workflows.model import Callback, Workflow


@dataclass(frozen=True, kw_only=True, slots=True)
class RunWorkflowSpec(ChildRunsSpec):
    kind: ClassVar[str] = "run_workflow"
    child: Workflow
    input: Callback | None = None  # fn(ctx); None: the parent node's ctx.input


def run_workflow(child: Workflow, input: Callback | None = None, retries: int = 0) -> RunWorkflowSpec:
    """Run `child` as a child run and output its output; a failed or cancelled child fails the node."""
    return RunWorkflowSpec(child=child, input=input, retries=retries)


def check(node_id: str, spec: RunWorkflowSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    check_child_runs(node_id, spec)
    require_workflow(node_id, spec.child, "child")
    return changes


def describe(spec: RunWorkflowSpec) -> list[str]:
    return [spec.child.name]


def children(spec: RunWorkflowSpec) -> tuple[tuple[str, Workflow], ...]:
    return (("", spec.child),)


KIND = NodeKind(spec=RunWorkflowSpec, check=check, describe=describe, drawing=Drawing(('[["', '"]]'), "box3d"),
                children=children)
