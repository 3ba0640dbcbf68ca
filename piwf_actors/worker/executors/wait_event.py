"""The executor of wait_event nodes: the match (computed here, in the worker, when it is a function of
ctx: the only place a wait's user code runs), the deadline, the look-back and the output after the
deadline."""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import Wait, WaitRequestError
from piwf_actors.workflows.context import NodeContext, evaluate
from piwf_actors.workflows.kinds.wait_event import match_problem
from piwf_actors.workflows.model import Workflow, thaw


def request(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    match = thaw(evaluate(spec.match, ctx))
    problem = match_problem(match)
    if problem is not None:
        raise WaitRequestError(f"{problem}, got {match!r}"[:500])
    payload: dict[str, Any] = {"kind": "event", "topic": spec.name, "match": match or {},
                               "timeout_s": spec.timeout_s, "lookback_s": spec.lookback_s}
    if spec.on_timeout is not None:
        payload["on_timeout"] = thaw(spec.on_timeout)
    return payload


WAIT_EVENT = Wait(request)
