"""The executor of agent steps: the request the host presents, and the check of a submission
(its expected shape, then the node's own `validate`), run here in the worker."""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import Ask
from piwf_actors.worker.node_guard import one_line
from piwf_actors.workflows.context import NodeContext, evaluate
from piwf_actors.workflows.model import thaw
from piwf_actors.workflows.schema import validate_shape


def contract(node_id: str, spec: Any, ctx: NodeContext) -> tuple[dict[str, Any], float | None, Any]:
    return ({"kind": "agent", "prompt": str(evaluate(spec.prompt, ctx)),
             "expected_output": thaw(spec.expected_output), "max_submissions": spec.max_submissions,
             "timeout_s": spec.timeout_s}, spec.timeout_s, None)


def check_submission(spec: Any, ctx: NodeContext, value: Any) -> str | None:
    """Why the submitted `value` is refused (one line of at most 1,000 characters), or None."""
    if spec.expected_output is not None:
        problems = validate_shape(thaw(spec.expected_output), value)
        if problems:
            return "; ".join(problems)[:1000]
    if spec.validate is not None:
        try:
            reason = spec.validate(ctx, value)
        except Exception as exc:
            return f"validate raised {one_line(exc)}"
        if reason:
            return str(reason)[:1000]
    return None


AGENT = Ask(contract, check_submission)
