"""What a waiting node asks the host for (`wait_request`), computed in the worker from its spec.

User callbacks run here, in the worker, like every other node's: a sleep's `until(ctx)`, a topic
function, a fan-out's `items(ctx)` and `input(item, ctx)`, a child workflow's concurrency key. A
child input without the child workflow's input shape fails the parent node (`bad_request`) before
any child starts. A
child workflow is named by its attribute in the module the parent was loaded from
(`Workflow.namespace`), so the child run loads it from the same snapshot.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from piwf_actors.workflows import Workflow, evaluate
from piwf_actors.workflows.context import NodeContext
from piwf_actors.workflows.model import is_number, thaw
from piwf_actors.workflows.shapes import input_refusal
from piwf_actors.workflows.waits import (
    MAX_CHILDREN,
    MapWorkflowSpec,
    ParallelSpec,
    RunWorkflowSpec,
    SleepSpec,
    WaitMessageSpec,
    concurrency_key,
    wait_topics,
)


class WaitRequestError(Exception):
    """The node's spec could not be turned into a request (its callback raised or returned nonsense)."""


#: The latest wake-up time a sleep's `until=` may return: the end of the year 9999, the last time a
#: screen can write as a date (datetime.MAXYEAR).
LATEST_WAKE = _dt.datetime(_dt.MAXYEAR, 12, 31, 23, 59, 59, tzinfo=_dt.UTC).timestamp()


def _epoch(value: Any) -> float:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise WaitRequestError("sleep until= returned a naive datetime; give it a time zone")
        return value.timestamp()
    if isinstance(value, float) and not math.isfinite(value):
        raise WaitRequestError(f"sleep until= returned {value!r}: not a time")
    if is_number(value):
        if value > LATEST_WAKE:
            raise WaitRequestError(f"sleep until= returned {value!r}: after the year 9999")
        return float(value)
    raise WaitRequestError(f"sleep until= must return epoch seconds or an aware datetime, got {type(value).__name__}")


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
    return start


def wait_payload(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    """The `wait_request` fields of a waiting node (besides node_id and attempt_id)."""
    if isinstance(spec, SleepSpec):
        if spec.until is not None:
            return {"kind": "sleep", "until": _epoch(spec.until(ctx))}
        return {"kind": "sleep", "seconds": spec.seconds}
    if isinstance(spec, WaitMessageSpec):
        topic = evaluate(spec.topic, ctx)
        if not isinstance(topic, str) or not topic.strip():
            raise WaitRequestError(f"topic must be a non-empty string, got {topic!r}")
        payload: dict[str, Any] = {"kind": "message", "topic": topic, "timeout_s": spec.timeout_s}
        if spec.on_timeout is not None:
            payload["on_timeout"] = thaw(spec.on_timeout)
        return payload
    base = {"kind": "children", "on_failure": spec.on_failure}
    if isinstance(spec, RunWorkflowSpec):
        child_input = ctx.input if spec.input is None else spec.input(ctx)
        return {**base, "mode": "run", "children": [_child(workflow, spec.child, child_input)]}
    if isinstance(spec, MapWorkflowSpec):
        items = spec.items(ctx)
        if not isinstance(items, (list, tuple)):
            raise WaitRequestError(f"items must return a list, got {type(items).__name__}")
        if len(items) > MAX_CHILDREN:
            raise WaitRequestError(f"items returned {len(items)} items; a node starts at most {MAX_CHILDREN} children")
        inputs = [item if spec.input is None else spec.input(item, ctx) for item in items]
        return {**base, "mode": "map", "max_parallel": spec.max_parallel,
                "children": [_child(workflow, spec.child, child_input, f" (item {index})")
                             for index, child_input in enumerate(inputs)]}
    assert isinstance(spec, ParallelSpec)
    names = list(spec.workflows)
    children = [_child(workflow, spec.workflows[name], ctx.input if spec.input is None else spec.input(name, ctx),
                       f" ({name!r})") for name in names]
    return {**base, "mode": "parallel", "names": names, "children": children}
