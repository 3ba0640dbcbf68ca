"""The worker's table of node executors: spec class → executor, one entry per node kind.

Each executor is one module here (see base.py for the three shapes the engine runs: `Run`, `Ask`,
`Wait`). The table is checked against the registered kinds (workflows/kinds/__init__.py) when this
package is imported, so a kind without an executor stops the worker's import with one line naming
it (NodeKindError) rather than failing a run when its node is reached.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.worker.executors import (
    agent,
    checkpoint,
    children,
    compute,
    human_decision,
    notify,
    shell,
    sleep,
    wait_event,
    wait_message,
)
from piwf_actors.worker.executors.base import Executor, Wait, WaitRequestError, executor_table
from piwf_actors.workflows.context import NodeContext
from piwf_actors.workflows.kinds import KINDS
from piwf_actors.workflows.kinds.action import ActionSpec
from piwf_actors.workflows.kinds.agent import AgentSpec
from piwf_actors.workflows.kinds.checkpoint import CheckpointSpec
from piwf_actors.workflows.kinds.compute import ComputeSpec
from piwf_actors.workflows.kinds.human_decision import HumanDecisionSpec
from piwf_actors.workflows.kinds.map_workflow import MapWorkflowSpec
from piwf_actors.workflows.kinds.notify import NotifySpec
from piwf_actors.workflows.kinds.parallel import ParallelSpec
from piwf_actors.workflows.kinds.run_workflow import RunWorkflowSpec
from piwf_actors.workflows.kinds.shell import ShellSpec
from piwf_actors.workflows.kinds.sleep import SleepSpec
from piwf_actors.workflows.kinds.wait_event import WaitEventSpec
from piwf_actors.workflows.kinds.wait_message import WaitMessageSpec
from piwf_actors.workflows.model import Workflow

EXECUTORS = executor_table([
    (ComputeSpec, compute.COMPUTE),
    (ActionSpec, compute.ACTION),
    (ShellSpec, shell.SHELL),
    (CheckpointSpec, checkpoint.CHECKPOINT),
    (NotifySpec, notify.NOTIFY),
    (AgentSpec, agent.AGENT),
    (HumanDecisionSpec, human_decision.HUMAN_DECISION),
    (SleepSpec, sleep.SLEEP),
    (WaitMessageSpec, wait_message.WAIT_MESSAGE),
    (WaitEventSpec, wait_event.WAIT_EVENT),
    (RunWorkflowSpec, children.RUN_WORKFLOW),
    (MapWorkflowSpec, children.MAP_WORKFLOW),
    (ParallelSpec, children.PARALLEL),
], KINDS)


def executor_for(spec: Any) -> Executor | None:
    """The executor of `spec`'s kind (its class, or the nearest registered class it derives from),
    or None when it is of no registered kind."""
    for cls in type(spec).__mro__:
        executor = EXECUTORS.get(cls)
        if executor is not None:
            return executor
    return None


def wait_payload(workflow: Workflow, spec: Any, ctx: NodeContext) -> dict[str, Any]:
    """The `wait_request` fields of a waiting node (besides node_id and attempt_id); WaitRequestError
    when its callback returned what cannot be waited for (its own exception propagates)."""
    executor = executor_for(spec)
    if not isinstance(executor, Wait):
        raise WaitRequestError(f"a {spec.kind} node does not wait")
    return executor.request(workflow, spec, ctx)


__all__ = ["EXECUTORS", "WaitRequestError", "executor_for", "wait_payload"]
