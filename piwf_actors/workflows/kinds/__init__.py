"""Every node kind, one module each, listed in `KINDS`.

A kind's module holds its spec (the frozen dataclass a workflow's node is), its helper (`compute(…)`),
its checks, its description and how it is drawn, gathered in a `base.NodeKind` record named `KIND`.
Definition code asks this registry instead of testing spec classes one by one: `validation.checked_node`
runs the kind's checks, `graph.summary` its description, `graph_render` its drawing, `graph_data` and
`graph` its child workflows, `define_workflow` the cases a switch on its choices must cover. The
worker finds each kind's executor in its own table (worker/executors/), checked against this list
when it is imported.

Adding a kind (docs/architecture.md, "Adding a node kind"): its module here and one line in `KINDS`,
its executor and one line in the worker's table, its helper in `workflows/__init__.py`, its docs.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.workflows.kinds import (
    action,
    agent,
    checkpoint,
    compute,
    human_decision,
    map_workflow,
    notify,
    parallel,
    run_workflow,
    shell,
    sleep,
    wait_event,
    wait_message,
)
from piwf_actors.workflows.kinds.base import PLAIN, Drawing, KindRegistry, NodeKind

#: The node kinds, in the order the docs list them.
KINDS = KindRegistry([
    compute.KIND,
    action.KIND,
    shell.KIND,
    checkpoint.KIND,
    notify.KIND,
    agent.KIND,
    human_decision.KIND,
    # The waiting kinds: a durable sleep, a message, child runs (docs/architecture.md, "Waits, children and limits").
    sleep.KIND,
    wait_message.KIND,
    wait_event.KIND,
    run_workflow.KIND,
    map_workflow.KIND,
    parallel.KIND,
])

#: Every kind's name.
NODE_KINDS: tuple[str, ...] = KINDS.names


def kind_of(spec: Any) -> NodeKind | None:
    """The kind of the node spec `spec`, or None when it is of no registered kind."""
    return KINDS.of(spec)


__all__ = ["KINDS", "NODE_KINDS", "PLAIN", "Drawing", "KindRegistry", "NodeKind", "kind_of"]
