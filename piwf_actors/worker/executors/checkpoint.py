"""The executor of checkpoints: the request the host presents, with its deadline computed here,
once per request (the host stores the deadline it makes of it)."""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import Ask
from piwf_actors.workflows.context import NodeContext, evaluate
from piwf_actors.workflows.kinds.checks import checked_seconds


def contract(node_id: str, spec: Any, ctx: NodeContext) -> tuple[dict[str, Any], float | None, Any]:
    # The audience only when given: a checkpoint without one keeps the contract (and request id) it had.
    audience = {} if spec.audience is None else {"audience": spec.audience}
    return ({"kind": "checkpoint", "prompt": str(evaluate(spec.prompt, ctx) or ""), **audience},
            checked_seconds(node_id, evaluate(spec.timeout_s, ctx)), None)


CHECKPOINT = Ask(contract)
