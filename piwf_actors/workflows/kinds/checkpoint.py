"""checkpoint: the run waits for an answer; the node's output is the answer's input.

With an `audience`, the channels that route it deliver the prompt too (docs/channels.md). Its
`timeout_s` may be computed from the run (a callable of ctx, checked in the worker with
`checks.checked_seconds`). The worker asks the host for the request (worker/executors/checkpoint.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, optional_audience, text_or_callable
from piwf_actors.workflows.kinds.summary import text_of, timeout_part
from piwf_actors.workflows.model import NodeSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointSpec(NodeSpec):
    """Waits for an answer; the output is the answer's input. `timeout_s` may be a callable of ctx,
    evaluated in the worker when the request is made (`checks.checked_seconds`)."""

    kind: ClassVar[str] = "checkpoint"
    timeout_s: Any = None  # float | Callback | None
    prompt: Any = ""  # str | Callback
    audience: str | None = None  # delivered to the channels that route it (docs/channels.md)


def checkpoint(prompt: Any = "", timeout_s: Any = None, audience: str | None = None) -> CheckpointSpec:
    """Wait for an answer; `prompt` is a string or a callable of ctx. With an `audience`, the
    channels that route it (channels.toml) deliver the prompt too, answered there by a reply.
    `timeout_s` (seconds, None for none) may be a callable of ctx: the worker calls it when the
    request is made, and a result that is not a positive number or None fails the node."""
    return CheckpointSpec(prompt=prompt, timeout_s=timeout_s, audience=audience)


def check(node_id: str, spec: CheckpointSpec) -> dict[str, Any]:
    text_or_callable(node_id, "prompt", spec.prompt)
    optional_audience(node_id, spec.audience)
    return common(node_id, spec, computed_timeout=True)


def describe(spec: CheckpointSpec) -> list[str]:
    return [text_of(spec.prompt), *timeout_part(spec)]


KIND = NodeKind(spec=CheckpointSpec, check=check, describe=describe,
                drawing=Drawing(('("', '")'), "box", dot_style="rounded"))
