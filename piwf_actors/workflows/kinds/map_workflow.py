"""map_workflow: one child run of a workflow per item of `items(ctx)`, at most `max_parallel` at
once; the output is their outputs in item order (`collect`: `{outputs, failed: [...]}`). The worker
computes the items and asks the host to start the children (worker/executors/children.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail, positive_int
from piwf_actors.workflows.kinds.children import ChildRunsSpec, check_child_runs, require_workflow
from piwf_actors.workflows.model import Callback, Workflow


@dataclass(frozen=True, kw_only=True, slots=True)
class MapWorkflowSpec(ChildRunsSpec):
    kind: ClassVar[str] = "map_workflow"
    child: Workflow
    items: Callback  # fn(ctx) -> list
    input: Callback | None = None  # fn(item, ctx); None: the item itself
    max_parallel: int | None = None


def map_workflow(child: Workflow, items: Callback, input: Callback | None = None, max_parallel: int | None = None,
                 on_failure: str = "fail_fast", retries: int = 0) -> MapWorkflowSpec:
    """One child run of `child` per item of `items(ctx)`, at most `max_parallel` at once; the output is
    their outputs in item order (`collect`: `{outputs, failed: [{index, run_id, error}]}`)."""
    return MapWorkflowSpec(child=child, items=items, input=input, max_parallel=max_parallel,
                           on_failure=on_failure, retries=retries)


def check(node_id: str, spec: MapWorkflowSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    check_child_runs(node_id, spec)
    require_workflow(node_id, spec.child, "child")
    if not callable(spec.items):
        raise fail(node_id, f"items must be a callable of ctx returning a list, got {type(spec.items).__name__}")
    if spec.max_parallel is not None and not positive_int(spec.max_parallel):
        raise fail(node_id, f"max_parallel must be a positive integer, got {spec.max_parallel!r}")
    return changes


def describe(spec: MapWorkflowSpec) -> list[str]:
    return [f"{spec.child.name} per item", *([] if spec.max_parallel is None else [f"max_parallel {spec.max_parallel}"])]


def children(spec: MapWorkflowSpec) -> tuple[tuple[str, Workflow], ...]:
    return (("per item", spec.child),)


KIND = NodeKind(spec=MapWorkflowSpec, check=check, describe=describe, drawing=Drawing(('[["', '"]]'), "box3d"),
                children=children)
