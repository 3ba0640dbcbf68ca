"""parallel: one child run per named workflow, all at once; the output maps each name to its child's
output. The worker asks the host to start them (worker/executors/children.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail
from piwf_actors.workflows.kinds.children import ChildRunsSpec, check_child_runs, require_workflow
from piwf_actors.workflows.model import Callback, Workflow, freeze


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelSpec(ChildRunsSpec):
    kind: ClassVar[str] = "parallel"
    workflows: Mapping[str, Workflow]
    input: Callback | None = None  # fn(name, ctx); None: the parent node's ctx.input


def parallel(workflows: Mapping[str, Workflow], input: Callback | None = None, on_failure: str = "fail_fast",
             retries: int = 0) -> ParallelSpec:
    """One child run per named workflow, all at once; the output maps each name to its child's output."""
    return ParallelSpec(workflows=workflows, input=input, on_failure=on_failure, retries=retries)


def check(node_id: str, spec: ParallelSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    check_child_runs(node_id, spec)
    if not isinstance(spec.workflows, Mapping) or not spec.workflows:
        raise fail(node_id, "parallel needs a non-empty mapping of name to workflow")
    for name, workflow in spec.workflows.items():
        if not isinstance(name, str) or not name:
            raise fail(node_id, f"parallel names must be non-empty strings, got {name!r}")
        require_workflow(node_id, workflow, f"parallel workflow {name!r}")
    return changes | {"workflows": freeze(dict(spec.workflows))}


def describe(spec: ParallelSpec) -> list[str]:
    return [", ".join(spec.workflows)]


def children(spec: ParallelSpec) -> tuple[tuple[str, Workflow], ...]:
    return tuple((name, workflow) for name, workflow in spec.workflows.items())


KIND = NodeKind(spec=ParallelSpec, check=check, describe=describe, drawing=Drawing(('[["', '"]]'), "box3d"),
                children=children)
