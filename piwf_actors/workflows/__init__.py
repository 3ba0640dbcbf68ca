"""Workflow definitions: helpers, validation, digest, routing, discovery.

A workflow file builds workflows with the helpers and exposes them as
module attributes::

    release = define_workflow(
        name="release", start_at="test",
        nodes={"test": shell(["pytest", "-q"]), "done": compute(run=lambda ctx: {"ok": True})},
        edges=[edge("test", "done")],
    )

The model the engine consumes (all frozen dataclasses, see `model.py`):

`Workflow(name, start_at, nodes, routes, max_steps, digest, source_path, attr,
description, mounts)`
    `nodes: Mapping[str, NodeSpec]` is flattened: nodes of included
    workflows appear under qualified ids `mount/node` (`a/b/c` when nested).
    `routes: Mapping[str, Route]` by qualified source id; a node without a
    route is terminal. `start_at` is a qualified node id. `digest` is the hex
    sha256 of structure + callable code (`digest.py`), stable across
    processes. `source_path`/`attr` say which file attribute it was loaded
    from (not part of the digest). `mounts: Mapping[str, Mount]` records every
    include: `Mount(mount_id, parent, workflow_name, start, input)`.

`NodeSpec` (base of `ComputeSpec`, `ActionSpec`, `ShellSpec`,
`CheckpointSpec`, `NotifySpec`, `AgentSpec`, `HumanDecisionSpec`, `SleepSpec`,
`WaitMessageSpec`, `RunWorkflowSpec`, `MapWorkflowSpec`, `ParallelSpec`)
    Class attributes `kind` and `has_side_effect` (True for action and
    shell); fields `timeout_s: float | None`, `retries: int`,
    `retry_backoff_s: float`, `idempotent: bool` (always True except for
    action/shell, where the author declares it) and `mount: str | None` (the
    innermost include the node belongs to), plus the kind's own options.
    Each kind is one module of `kinds/` (spec, helper, checks, description,
    drawing), listed in `kinds.KINDS`; `NODE_KINDS` holds their names.

`Route` = `Edge(target)` | `Switch(on, cases, default)`
    Targets are qualified node ids or `END` (the run ends with this node's
    output). `route(workflow, node_id, outcome, output) -> RouteDecision`
    is the pure routing function (`routing.py`).

`NodeContext(input, outputs, run_id, node_id, attempt_id)`
    What callbacks receive; build it with `node_context(...)`, which applies
    include scoping (`context.py`): a node inside an include sees the
    include's input and the include's outputs under child-relative ids.

Typed inputs and outputs (`schema.py`, `shapes.py`): `define_workflow(input=…)`,
`compute(output=…)`, `action(output=…)` and `agent(expected_output=…)` take a
shape (a JSON-Schema subset) or a Python type (dataclass, TypedDict, `list[str]`
…) that `shape_of` converts; `Workflow.input_shape` and `NodeSpec.output_shape`
hold the frozen shape.

Discovery and snapshots (`discovery.py`): `discover`, `resolve`,
`load_snapshot`.

Schedules (`schedules.py`, `schedule_time.py`, `schedule_discovery.py`):
`define_schedule(name, workflow, cron=… | every_s=…, input=…, timezone=…,
catch_up=…, max_catch_up=…)` builds a `Schedule`, found as a module
attribute of workflow files by the host's schedule keeper.
"""

from piwf_actors.workflows.context import NodeContext, evaluate, node_context, node_input
from piwf_actors.workflows.define import child_exits, define_workflow
from piwf_actors.workflows.digest import fingerprint
from piwf_actors.workflows.discovery import (
    ResolvedWorkflow,
    WorkflowRef,
    discover,
    load_snapshot,
    resolve,
)
from piwf_actors.workflows.events import Batch, OnEvent, batch, on_event
from piwf_actors.workflows.helpers import decision_switch, edge, include_workflow, switch
from piwf_actors.workflows.kinds import NODE_KINDS
from piwf_actors.workflows.kinds.action import ActionSpec, action
from piwf_actors.workflows.kinds.agent import AgentSpec, agent
from piwf_actors.workflows.kinds.checkpoint import CheckpointSpec, checkpoint
from piwf_actors.workflows.kinds.compute import ComputeSpec, compute
from piwf_actors.workflows.kinds.human_decision import HumanDecisionSpec, choice, human_decision, text_input
from piwf_actors.workflows.kinds.map_workflow import MapWorkflowSpec, map_workflow
from piwf_actors.workflows.kinds.notify import NotifySpec, notify
from piwf_actors.workflows.kinds.parallel import ParallelSpec, parallel
from piwf_actors.workflows.kinds.run_workflow import RunWorkflowSpec, run_workflow
from piwf_actors.workflows.kinds.shell import ShellSpec, shell
from piwf_actors.workflows.kinds.sleep import SleepSpec, sleep
from piwf_actors.workflows.kinds.wait_event import WaitEventSpec, wait_event
from piwf_actors.workflows.kinds.wait_message import WaitMessageSpec, wait_message
from piwf_actors.workflows.model import (
    END,
    Choice,
    DecisionTimeout,
    Edge,
    Include,
    Mount,
    NodeSpec,
    Route,
    RouteDef,
    Switch,
    TextInput,
    Workflow,
    freeze,
    thaw,
)
from piwf_actors.workflows.rate_limits import Debounce, RateLimit, debounce, rate_limit, rate_limiter
from piwf_actors.workflows.resource_manager import ResourceManager, define_resource_manager
from piwf_actors.workflows.routing import RouteDecision, route
from piwf_actors.workflows.schedules import Schedule, define_schedule
from piwf_actors.workflows.schema import validate_shape
from piwf_actors.workflows.shapes import ShapeError, shape_of
from piwf_actors.workflows.validation import check_decision_response, json_problem
from piwf_actors.workflows.waits import ConcurrencyLimit, limit

__all__ = [
    "END", "NODE_KINDS", "ActionSpec", "AgentSpec", "CheckpointSpec", "Choice", "ComputeSpec",
    "DecisionTimeout", "Edge", "HumanDecisionSpec", "Include", "Mount", "NodeContext", "NodeSpec",
    "NotifySpec", "ResolvedWorkflow", "ResourceManager", "Route", "RouteDecision", "RouteDef", "Schedule", "ShellSpec",
    "Switch", "TextInput", "Workflow", "WorkflowRef", "action", "agent", "check_decision_response",
    "checkpoint", "child_exits", "choice", "compute", "decision_switch", "define_resource_manager", "define_schedule",
    "define_workflow",
    "discover", "edge", "evaluate", "fingerprint", "freeze", "human_decision", "include_workflow",
    "json_problem", "load_snapshot", "node_context", "node_input", "notify", "resolve", "route",
    "shell", "switch", "text_input", "thaw", "validate_shape",
    # typed inputs and outputs (shapes.py)
    "ShapeError", "shape_of",
    # waiting, children and flow control (waits.py)
    "ConcurrencyLimit", "MapWorkflowSpec", "ParallelSpec", "RunWorkflowSpec", "SleepSpec", "WaitMessageSpec",
    "limit", "map_workflow", "parallel", "run_workflow", "sleep", "wait_message",
    # flow control by rate (rate_limits.py)
    "Debounce", "RateLimit", "debounce", "rate_limit", "rate_limiter",
    # events and batches (events.py, kinds/wait_event.py)
    "Batch", "OnEvent", "WaitEventSpec", "batch", "on_event", "wait_event",
]
