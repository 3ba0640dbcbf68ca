"""The executor of wait_message nodes: the topic (computed here when it is a function of ctx), the
deadline and the output after it."""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import Wait, WaitRequestError
from piwf_actors.workflows.context import NodeContext, evaluate
from piwf_actors.workflows.model import Workflow, thaw


def request(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    topic = evaluate(spec.topic, ctx)
    if not isinstance(topic, str) or not topic.strip():
        raise WaitRequestError(f"topic must be a non-empty string, got {topic!r}")
    payload: dict[str, Any] = {"kind": "message", "topic": topic, "timeout_s": spec.timeout_s}
    if spec.on_timeout is not None:
        payload["on_timeout"] = thaw(spec.on_timeout)
    return payload


WAIT_MESSAGE = Wait(request)
