"""wait_message: the next message on a topic in the run's mailbox (sent with `message.send`,
`piwf send`, `ctx.send_message`); its output is the message's payload. After `timeout_s` the node
outputs `on_timeout` when one is given, else it fails `message_timeout` (routed like any failure).
The worker asks the host for the wait (worker/executors/wait_message.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail, is_json_value
from piwf_actors.workflows.kinds.summary import text_of, timeout_part
from piwf_actors.workflows.model import NodeSpec, Workflow, freeze


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitMessageSpec(NodeSpec):
    """Wait for the next message on `topic` (a string or a callable of ctx)."""

    kind: ClassVar[str] = "wait_message"
    topic: Any
    on_timeout: Any = None  # the output after `timeout_s` (frozen JSON); None: fail `message_timeout`


def wait_message(topic: Any, timeout_s: float | None = None, on_timeout: Any = None) -> WaitMessageSpec:
    """The next message on `topic`; after `timeout_s` the output is `on_timeout`, or the node fails
    `message_timeout` when there is none."""
    return WaitMessageSpec(topic=topic, timeout_s=timeout_s, on_timeout=on_timeout)


def check(node_id: str, spec: WaitMessageSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    if not (isinstance(spec.topic, str) and spec.topic.strip()) and not callable(spec.topic):
        raise fail(node_id, "topic must be a non-empty string or a callable of ctx")
    if spec.on_timeout is not None and not is_json_value(spec.on_timeout):
        raise fail(node_id, "on_timeout must be JSON-shaped (string keys, finite numbers)")
    if spec.on_timeout is not None and spec.timeout_s is None:
        raise fail(node_id, "on_timeout needs timeout_s")
    return changes | {"on_timeout": freeze(spec.on_timeout)}


def describe(spec: WaitMessageSpec) -> list[str]:
    return [f"topic {text_of(spec.topic, '(computed)')}", *timeout_part(spec)]


def wait_topics(workflow: Workflow) -> list[str] | None:
    """The topics a run of `workflow` can wait for a message on: the constant topics of its
    `wait_message` nodes (an included workflow's are among its nodes), sorted; None when one is
    computed by a function, so any topic could be. Reads the definition only (no callback is called):
    the host stores it with each run it makes, for `message.send` to tell a topic nobody waits on."""
    topics: set[str] = set()
    for spec in workflow.nodes.values():
        if isinstance(spec, WaitMessageSpec):
            if not isinstance(spec.topic, str):
                return None
            topics.add(spec.topic)
    return sorted(topics)


KIND = NodeKind(spec=WaitMessageSpec, check=check, describe=describe, drawing=Drawing(('(["', '"])'), "ellipse"))
