"""The executor of the function nodes, compute and action: call `run(ctx)` under the node's
timeout and check what it returned (worker/output_check.py).

A compute node is pure, so its result is pipelined; an action's effect was reserved by the engine
before this runs, and an output that fails its check after the effect happened is reported as such
(`effect_applied`) rather than raised.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors.base import NodeCall, Run
from piwf_actors.worker.node_guard import deadline
from piwf_actors.worker.output_check import returned_report


def call_function(node: NodeCall) -> dict[str, Any]:
    spec = node.spec
    with deadline(spec.timeout_s):
        output = spec.run(node.ctx)
    return returned_report(spec, output)  # an action's check failing: worker/output_check.py


COMPUTE = Run(call_function, pipelined=True)
ACTION = Run(call_function)
