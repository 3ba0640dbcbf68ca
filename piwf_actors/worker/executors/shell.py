"""The executor of shell nodes: run the command (worker/shell.py), stream its output to the
supervisor as it comes, and register the processes it starts for orphan reaping.

A command killed at its `timeout_s` may have done its effect: unless the node is idempotent the
report says `interrupted`, and the engine parks the run on it (`ambiguous_effect`).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import NodeCall, Run
from piwf_actors.worker.output_stream import OutputStreamer
from piwf_actors.worker.shell import run_shell


def run_command(node: NodeCall) -> dict[str, Any]:
    streamer = OutputStreamer(node.notify, node.node_id, node.attempt_id)
    result = run_shell(node.spec, node.ctx, on_spawn=node.register_child, on_output=streamer.feed)
    streamer.flush()
    node.release_children()
    report: dict[str, Any] = {"outcome": result.outcome, "output": result.output}
    if result.error:
        report["error"] = result.error
    if result.timed_out:
        report.update(error_code="timeout", interrupted=not node.spec.idempotent)
    return report


SHELL = Run(run_command)
