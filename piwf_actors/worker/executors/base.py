"""The three shapes of a node executor, what a node that runs in the worker gets from it, and the
check that builds the executor table.

The engine (worker/engine.py) owns the protocol with the host — reserving an effect, asking for an
interactive request, asking for a durable wait, reporting the result — and dispatches on the shape
of a node's executor, never on its kind:

- `Run`: the worker runs the node itself (compute, action, shell, notify). `call(node)` returns the
  report's outcome fields (`outcome`, `output`, `error`…); an exception it raises is the node's
  failure, reported by the engine (NodeTimeout: `timeout`, anything else: `node_error`). `pipelined`:
  the result of a pure node, which the engine need not wait for (worker/engine.py `_pipelined`).
- `Ask`: a person or an agent answers (checkpoint, human_decision, agent). `contract(node_id, spec,
  ctx) -> (contract, seconds to its deadline or None, default response or None)` is what the host
  presents; `check_submission(spec, ctx, value) -> problem or None` checks a submission in the worker
  for kinds whose answers are submissions (agent; such a spec has `max_submissions`).
- `Wait`: the run parks on a durable wait (sleep, wait_message, the child runs). `request(workflow,
  spec, ctx)` is the `wait_request` fields; `probe`: ask the host first whether the wait exists, so a
  request computed from the run (a fan-out's children) is computed once.

Every executor runs in the worker process, in the thread that executes the launch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from piwf_actors.errors import NodeKindError
from piwf_actors.workflows.context import NodeContext
from piwf_actors.workflows.kinds import KindRegistry
from piwf_actors.workflows.model import NodeSpec, Workflow


class WaitRequestError(Exception):
    """The node's spec could not be turned into a request (its callback raised or returned nonsense)."""


@dataclass(frozen=True, slots=True)
class NodeCall:
    """One attempt of a node the worker runs itself: what a `Run` executor gets. `notify` sends the
    supervisor a one-way note (a chunk of a command's output); `register_child` records a process the
    node started (pid, create time) before it can do anything lasting, for orphan reaping, and
    `release_children` forgets them once they have ended."""

    node_id: str
    attempt_id: str
    spec: Any
    ctx: NodeContext
    notify: Callable[[dict[str, Any]], None]
    register_child: Callable[[int, float | None], None]
    release_children: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Run:
    call: Callable[[NodeCall], dict[str, Any]]
    pipelined: bool = False


@dataclass(frozen=True, slots=True)
class Ask:
    contract: Callable[[str, Any, NodeContext], tuple[dict[str, Any], float | None, Any]]
    check_submission: Callable[[Any, NodeContext, Any], str | None] | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    request: Callable[[Workflow, Any, NodeContext], dict[str, Any]]
    probe: bool = False


Executor = Run | Ask | Wait


def executor_table(entries: Iterable[tuple[type[NodeSpec], Executor]],
                   kinds: KindRegistry) -> Mapping[type[NodeSpec], Executor]:
    """The table spec class → executor, checked against the registered `kinds`: every kind has
    exactly one executor of one of the three shapes, and every entry is for a registered kind. A
    mistake raises NodeKindError naming the kind (at import of worker/executors/)."""
    table: dict[type[NodeSpec], Executor] = {}
    registered = set(kinds.specs)
    for spec, executor in entries:
        name = str(getattr(spec, "kind", spec))
        if spec not in registered:
            raise NodeKindError(name, f"the executor table lists {getattr(spec, '__name__', spec)}, "
                                      "which is not a registered kind (workflows/kinds/__init__.py)")
        if spec in table:
            raise NodeKindError(name, "the executor table lists it twice")
        if not isinstance(executor, (Run, Ask, Wait)):
            raise NodeKindError(name, f"its executor must be a Run, an Ask or a Wait, got {type(executor).__name__}")
        table[spec] = executor
    for kind in kinds:
        if kind.spec not in table:
            raise NodeKindError(kind.name, f"no executor: add {kind.spec.__name__} to the worker's table "
                                           "(worker/executors/__init__.py)")
    return MappingProxyType(table)
