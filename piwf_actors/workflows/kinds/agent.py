"""agent: a prompt for an agent session; a client submits structured output, which the worker
checks against `expected_output` and `validate` (worker/executors/agent.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail, require_callable, shape, text_or_callable
from piwf_actors.workflows.kinds.summary import text_of, timeout_part
from piwf_actors.workflows.model import Callback, NodeSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentSpec(NodeSpec):
    """A prompt for an agent session; a client submits structured output.

    The worker checks a submission against `expected_output` (see
    `workflows.schema.validate_shape`) and then `validate(ctx, output)`, which
    returns None (accepted) or a one-line rejection reason. After
    `max_submissions` rejected submissions the node fails.
    """

    kind: ClassVar[str] = "agent"
    prompt: Any  # str | Callback
    expected_output: Mapping[str, Any] | None = None
    validate: Callback | None = None
    max_submissions: int = 3


def agent(
    prompt: Any,
    expected_output: Any = None,
    validate: Callback | None = None,
    max_submissions: int = 3,
    timeout_s: float | None = None,
) -> AgentSpec:
    """An agent step; see `AgentSpec` for how submissions are checked. `expected_output` is a shape
    or a Python type such as a dataclass (`shapes.py`)."""
    return AgentSpec(
        prompt=prompt, expected_output=expected_output, validate=validate,
        max_submissions=max_submissions, timeout_s=timeout_s,
    )


def check(node_id: str, spec: AgentSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    text_or_callable(node_id, "prompt", spec.prompt)
    schema = shape(node_id, spec.expected_output, "expected_output")  # a shape, or a Python type (shapes.py)
    if spec.validate is not None:
        require_callable(node_id, "validate", spec.validate)
    count = spec.max_submissions
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise fail(node_id, f"max_submissions must be a positive integer, got {count!r}")
    return changes | {"expected_output": schema}


def describe(spec: AgentSpec) -> list[str]:
    return [text_of(spec.prompt), *timeout_part(spec)]


KIND = NodeKind(spec=AgentSpec, check=check, describe=describe, drawing=Drawing(('[\\"', '"\\]'), "trapezium"))
