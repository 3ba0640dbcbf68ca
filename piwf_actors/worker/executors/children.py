"""The executors of the kinds that start child runs: run_workflow, map_workflow, parallel.

User callbacks run here, in the worker, like every other node's: a fan-out's `items(ctx)` and
`input(item, ctx)`, a child workflow's concurrency key. A child input without the child workflow's
input shape fails the parent node (`bad_request`) before any child starts. A child workflow is
named by its attribute in the module the parent was loaded from (`Workflow.namespace`), so the child
run loads it from the same snapshot. Each asks the host first whether its wait exists (`probe`): the
launch after the wake-up finds it rather than computing the children again.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import Wait, WaitRequestError
from piwf_actors.workflows.context import NodeContext
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.rate_limits import rate_spec
from piwf_actors.workflows.shapes import input_refusal
from piwf_actors.workflows.waits import MAX_CHILDREN, concurrency_key, wait_topics


def _child(parent: Workflow, child: Workflow, run_input: Any, which: str = "") -> dict[str, Any]:
    refusal = input_refusal(child.input_shape, run_input)
    if refusal is not None:  # refused here, before any child starts: the parent node fails, no child crashes
        raise WaitRequestError(f"child workflow {child.name!r}{which}: {refusal}")
    attr = parent.namespace.get(child.digest)
    if attr is None:
        raise WaitRequestError(
            f"child workflow {child.name!r} is not a module-level attribute of "
            f"{parent.source_path or 'the parent workflow file'}: define or import it there")
    start: dict[str, Any] = {"workflow": child.name, "workflow_attr": attr, "definition_digest": child.digest,
                             "input": run_input, "wait_topics": wait_topics(child)}
    limited = concurrency_key(child, run_input)
    if limited is not None:
        start.update(concurrency_key=limited[0], concurrency_max=limited[1])
    start.update(rate_spec(child, run_input))  # its rate limit holds for a child's start too
    return start


def _base(spec: Any) -> dict[str, Any]:
    return {"kind": "children", "on_failure": spec.on_failure}


def run_one(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    child_input = ctx.input if spec.input is None else spec.input(ctx)
    return {**_base(spec), "mode": "run", "children": [_child(workflow, spec.child, child_input)]}


def run_per_item(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    items = spec.items(ctx)
    if not isinstance(items, (list, tuple)):
        raise WaitRequestError(f"items must return a list, got {type(items).__name__}")
    if len(items) > MAX_CHILDREN:
        raise WaitRequestError(f"items returned {len(items)} items; a node starts at most {MAX_CHILDREN} children")
    inputs = [item if spec.input is None else spec.input(item, ctx) for item in items]
    return {**_base(spec), "mode": "map", "max_parallel": spec.max_parallel,
            "children": [_child(workflow, spec.child, child_input, f" (item {index})")
                         for index, child_input in enumerate(inputs)]}


def run_each_named(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    names = list(spec.workflows)
    children = [_child(workflow, spec.workflows[name], ctx.input if spec.input is None else spec.input(name, ctx),
                       f" ({name!r})") for name in names]
    return {**_base(spec), "mode": "parallel", "names": names, "children": children}


RUN_WORKFLOW = Wait(run_one, probe=True)
MAP_WORKFLOW = Wait(run_per_item, probe=True)
PARALLEL = Wait(run_each_named, probe=True)
