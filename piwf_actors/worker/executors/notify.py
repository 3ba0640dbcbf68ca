"""The executor of notify nodes: the message, evaluated and bounded, is the node's output and its
notification (to the session outbox, and with an audience to the channels that route it). Pure:
its result is pipelined, and only a committed result is delivered.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import NodeCall, Run
from piwf_actors.worker.output_check import MAX_PRESENTED_BYTES, checked_output
from piwf_actors.workflows.context import evaluate


def deliver(node: NodeCall) -> dict[str, Any]:
    spec = node.spec
    message = checked_output(evaluate(spec.message, node.ctx), MAX_PRESENTED_BYTES, "notification")
    report: dict[str, Any] = {"outcome": "ok", "output": {"message": message}, "notification": message}
    if spec.audience is not None:  # the channels that route it send it too
        report["notification_audience"] = spec.audience
    return report


NOTIFY = Run(deliver, pipelined=True)
