"""The context a node callback receives, scoped to the include it sits in.

A node inside an include sees the world as the included workflow would see
it when run by itself:

- `ctx.input` is the include's `input(ctx)` if it has one, else the input of
  the enclosing scope (the run input at the top level). Nested includes
  apply their input functions outermost first; each input function gets the
  context of the scope that contains its mount.
- `ctx.outputs` holds only the outputs of nodes inside the same include,
  keyed by ids relative to it (`mount/step` is seen as `step`, a nested
  `mount/inner/step` as `inner/step`); top-level nodes see every output.
- `ctx.node_id` is the qualified id, unique within the run.

Input functions must be pure: the engine calls `node_context` for every
node it starts, so they run again against the outputs accepted so far.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from piwf_actors.workflows.model import Workflow


@dataclass(frozen=True, slots=True)
class NodeContext:
    """What a callback (`run`, `request`, `command`, …) is called with."""

    input: Any
    outputs: Mapping[str, Any]
    run_id: str
    node_id: str
    attempt_id: str
    # Set by the engine for the node it runs: `send_message`'s way to the host.
    messenger: Any = None
    # The W3C trace context of this node attempt's span when the host traces (docs/tracing.md), else None.
    traceparent: str | None = None

    def send_message(self, run_id: str, topic: str, payload: Any = None) -> dict[str, Any]:
        """Put `payload` into run `run_id`'s mailbox on `topic` (a `wait_message` there takes it).

        An effect-free write, idempotent by this node's attempt: the n-th message an attempt sends
        is sent once, also when the node runs again after a crash. Returns the receipt
        ({message_id, run_id, topic, seq, status}); raises MessageRefused when the host refuses
        (the run has ended, the topic is not a string) or the payload is not a value a run can hold
        (JSON, nested at most 20 deep: docs/protocol.md)."""
        if self.messenger is None:
            raise RuntimeError("ctx.send_message works only inside a node the host runs")
        result: dict[str, Any] = self.messenger(run_id, topic, payload)
        return result


def evaluate(value: Any, ctx: NodeContext) -> Any:
    """`value(ctx)` for a callable option (prompt, command, …), else `value` itself."""
    return value(ctx) if callable(value) else value


def scoped_outputs(outputs: Mapping[str, Any], mount_id: str | None) -> Mapping[str, Any]:
    """The outputs a node of `mount_id` sees: those under its include, prefix removed.

    Top-level nodes see every output (an include's results stay reachable as
    `mount/exit`), exactly as an included workflow run by itself would.
    """
    if mount_id is None:
        return MappingProxyType(dict(outputs))
    prefix = mount_id + "/"
    return MappingProxyType({
        key[len(prefix):]: value for key, value in outputs.items() if key.startswith(prefix)
    })


def _chain(workflow: Workflow, mount_id: str | None) -> list[str]:
    chain: list[str] = []
    while mount_id is not None:
        chain.append(mount_id)
        mount_id = workflow.mounts[mount_id].parent
    return chain[::-1]


def node_context(
    workflow: Workflow,
    node_id: str,
    run_input: Any,
    outputs: Mapping[str, Any],
    *,
    run_id: str = "",
    attempt_id: str = "",
    messenger: Any = None,
    traceparent: str | None = None,
) -> NodeContext:
    """The context for starting `node_id` given the run input and the latest
    accepted output per qualified node id. Exceptions from include input
    functions propagate (the engine fails the node with them)."""
    spec = workflow.nodes.get(node_id)
    if spec is None:
        raise ValueError(f"workflow {workflow.name!r} has no node {node_id!r}")
    scope_input = run_input
    parent: str | None = None
    for mount_id in _chain(workflow, spec.mount):
        mount = workflow.mounts[mount_id]
        if mount.input is not None:
            outer = NodeContext(
                input=scope_input, outputs=scoped_outputs(outputs, parent),
                run_id=run_id, node_id=mount_id, attempt_id=attempt_id,
            )
            scope_input = mount.input(outer)
        parent = mount_id
    return NodeContext(
        input=scope_input, outputs=scoped_outputs(outputs, spec.mount),
        run_id=run_id, node_id=node_id, attempt_id=attempt_id, messenger=messenger, traceparent=traceparent,
    )


def node_input(workflow: Workflow, node_id: str, run_input: Any, outputs: Mapping[str, Any]) -> Any:
    """The `ctx.input` node `node_id` sees (see the module docstring)."""
    return node_context(workflow, node_id, run_input, outputs).input
