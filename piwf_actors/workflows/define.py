"""`define_workflow`: validate a definition and flatten its includes.

Flattening: an included workflow's nodes, routes and mounts are copied under
the qualified prefix `mount/` (recursively, so nested includes give
`a/b/c`). An edge to the mount id enters the child's start node. The child's
exits are its nodes that can end it: nodes without a route, and nodes whose
switch has a case (or default) to `END`. An outer `edge("mount.exit", t)`
gives a route-less exit the outer route, or replaces the `END` targets of an
exit's switch with `t` (such an exit can only be left with a plain edge). An
exit without an outer route still ends the whole run.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.digest import workflow_digest
from piwf_actors.workflows.events import checked_triggers
from piwf_actors.workflows.kinds import KINDS
from piwf_actors.workflows.model import (
    END,
    Edge,
    Include,
    Mount,
    NodeSpec,
    Route,
    RouteDef,
    Switch,
    Workflow,
)
from piwf_actors.workflows.rate_limits import checked_debounce, checked_rate
from piwf_actors.workflows.routing import OUTCOMES, RESULT_OUTCOME, is_valid_on
from piwf_actors.workflows.shapes import ShapeError, checked_shape
from piwf_actors.workflows.validation import check_node_id, check_workflow_name, checked_node, fail
from piwf_actors.workflows.waits import checked_limit

_CHOICE_PATHS = ("$.choice", "$output.choice")


def child_exits(workflow: Workflow) -> list[str]:
    """The (child-relative) node ids through which `workflow` can be left when included."""
    return [
        node_id for node_id in workflow.nodes
        if node_id not in workflow.routes or END in _targets(workflow.routes[node_id])
    ]


def _targets(route: Route) -> tuple[str, ...]:
    return (route.target,) if isinstance(route, Edge) else route.targets()


def _map_targets(route: Route, change: Any) -> Route:
    if isinstance(route, Edge):
        return Edge(change(route.target))
    default = change(route.default) if route.default is not None else None
    cases = MappingProxyType({key: change(target) for key, target in route.cases.items()})
    return Switch(on=route.on, cases=cases, default=default)


def _qualify(prefix: str, node_id: str | None) -> str | None:
    if node_id is None:
        return prefix
    return node_id if node_id == END else f"{prefix}/{node_id}"


class _Builder:
    """Accumulates the flattened tables of one definition; raises on the first error."""

    def __init__(self, name: str, own: dict[str, NodeSpec], includes: dict[str, Include]) -> None:
        self.name = name
        self.own = own
        self.includes = includes
        self.nodes: dict[str, NodeSpec] = {}
        self.routes: dict[str, Route] = {}
        self.mounts: dict[str, Mount] = {}

    def mount_all(self, order: Sequence[str]) -> None:
        for node_id in order:
            if node_id in self.own:
                self.nodes[node_id] = self.own[node_id]
            else:
                self._mount(node_id, self.includes[node_id])

    def _mount(self, mount_id: str, include: Include) -> None:
        child = include.workflow
        self.mounts[mount_id] = Mount(
            mount_id=mount_id, parent=None, workflow_name=child.name,
            start=f"{mount_id}/{child.start_at}", input=include.input,
        )
        for inner_id, inner in child.mounts.items():
            self.mounts[f"{mount_id}/{inner_id}"] = dataclasses.replace(
                inner, mount_id=f"{mount_id}/{inner_id}", parent=_qualify(mount_id, inner.parent),
                start=f"{mount_id}/{inner.start}",
            )
        for child_id, spec in child.nodes.items():
            self.nodes[f"{mount_id}/{child_id}"] = dataclasses.replace(
                spec, mount=_qualify(mount_id, spec.mount)
            )
        for child_id, route in child.routes.items():
            self.routes[f"{mount_id}/{child_id}"] = _map_targets(
                route, lambda target: _qualify(mount_id, target)
            )

    def target(self, target: Any, where: str) -> str:
        if not isinstance(target, str):
            raise WorkflowDefinitionError(f"{where}: target must be a node id, got {target!r}")
        if target == END or target in self.own:
            return target
        if target in self.includes:
            return self.mounts[target].start
        hint = ""
        if "." in target or "/" in target:
            hint = " (an edge may enter an include only through its id)"
        raise WorkflowDefinitionError(f"{where}: unknown target node {target!r}{hint}")

    def source(self, source: Any, where: str) -> str:
        if not isinstance(source, str):
            raise WorkflowDefinitionError(f"{where}: source must be a node id, got {source!r}")
        if source in self.own:
            return source
        if source in self.includes:
            names = ", ".join(f"{source}.{e}" for e in child_exits(self.includes[source].workflow))
            raise WorkflowDefinitionError(
                f"{where}: {source!r} is an include; leave it through one of its exits ({names})"
            )
        mount_id, dot, exit_name = source.partition(".")
        if dot and mount_id in self.includes:
            exits = child_exits(self.includes[mount_id].workflow)
            if exit_name in exits:
                return f"{mount_id}/{exit_name}"
            raise WorkflowDefinitionError(
                f"{where}: {exit_name!r} is not an exit of include {mount_id!r} "
                f"(exits: {', '.join(exits)})"
            )
        raise WorkflowDefinitionError(f"{where}: unknown source node {source!r}")

    def route(self, route: Any, where: str) -> Route:
        if isinstance(route, Edge):
            return Edge(self.target(route.target, where))
        if not isinstance(route, Switch):
            raise WorkflowDefinitionError(f"{where}: build routes with edge() or switch()")
        if not is_valid_on(route.on):
            raise WorkflowDefinitionError(
                f"{where}: on={route.on!r} must be '$.field[.sub]', '$output.field[.sub]' "
                "or '$result.outcome'"
            )
        if not isinstance(route.cases, Mapping) or not (route.cases or route.default is not None):
            raise WorkflowDefinitionError(f"{where}: cases must be a mapping with at least one case")
        cases: dict[str, str] = {}
        for key, target in route.cases.items():
            if not isinstance(key, str):
                raise WorkflowDefinitionError(f"{where}: case key {key!r} must be a string")
            if route.on == RESULT_OUTCOME and key not in OUTCOMES:
                raise WorkflowDefinitionError(
                    f"{where}: case {key!r} can never match $result.outcome ('ok' or 'failed')"
                )
            cases[key] = self.target(target, f"{where}, case {key!r}")
        default = None if route.default is None else self.target(route.default, f"{where}, default")
        return Switch(on=route.on, cases=MappingProxyType(cases), default=default)

    def add_routes(self, edges: Any) -> None:
        if not isinstance(edges, (list, tuple)):
            raise WorkflowDefinitionError(f"workflow {self.name!r}: edges must be a list")
        first_index: dict[str, int] = {}
        for index, definition in enumerate(edges):
            if not isinstance(definition, RouteDef):
                raise WorkflowDefinitionError(
                    f"workflow {self.name!r}: edges[{index}] must be built with edge() or switch()"
                )
            kind = "edge" if isinstance(definition.route, Edge) else "switch"
            where = f"{kind} from {definition.source!r}"
            if definition.source in first_index:
                raise WorkflowDefinitionError(
                    f"{where}: node {definition.source!r} has more than one outgoing route "
                    f"(edges[{first_index[definition.source]}] and edges[{index}])"
                )
            first_index[definition.source] = index
            self._attach(self.source(definition.source, where), self.route(definition.route, where), where)

    def _attach(self, source: str, route: Route, where: str) -> None:
        inner = self.routes.get(source)
        if inner is None:
            # edge(x, END) only says "x is terminal": store no route at all.
            if route != Edge(END):
                self.routes[source] = route
            return
        # `source` is an include exit whose switch ends the child on some cases.
        if not isinstance(route, Edge):
            raise WorkflowDefinitionError(
                f"{where}: this exit already routes through a switch inside the include; "
                "leave it with edge()"
            )
        self.routes[source] = _map_targets(inner, lambda t: route.target if t == END else t)

    def check_decisions(self) -> None:
        """A switch on `$.choice` from a node whose kind has choices (a human decision) has one case
        per choice and no other."""
        for source, route in self.routes.items():
            spec = self.nodes[source]
            if not isinstance(route, Switch) or route.on not in _CHOICE_PATHS:
                continue
            kind = KINDS.of(spec)
            if kind is None or kind.switch_cases is None:
                continue
            choices = kind.switch_cases(spec)
            for key in route.cases:
                if key not in choices:
                    raise WorkflowDefinitionError(
                        f"switch on node {source!r}: case {key!r} is not a choice "
                        f"(choices: {', '.join(choices)})"
                    )
            for key in choices:
                if key not in route.cases:
                    raise WorkflowDefinitionError(
                        f"switch on node {source!r}: choice {key!r} has no case"
                    )

    def check_reachable(self, start: str) -> None:
        seen = {start}
        queue = deque([start])
        while queue:
            route = self.routes.get(queue.popleft())
            for target in _targets(route) if route is not None else ():
                if target != END and target not in seen:
                    seen.add(target)
                    queue.append(target)
        for node_id in self.nodes:
            if node_id not in seen:
                top = node_id.split("/", 1)[0]
                what = f"include {top!r}" if top in self.includes else f"node {top!r}"
                raise WorkflowDefinitionError(f"{what} is unreachable from start node {start!r}")


def _check_include(name: str, node_id: str, include: Include) -> None:
    child = include.workflow
    if not isinstance(child, Workflow):
        raise fail(node_id, f"include_workflow() needs a Workflow, got {type(child).__name__}")
    if include.input is not None and not callable(include.input):
        raise fail(node_id, f"include input must be callable, got {type(include.input).__name__}")
    lineage = [child.name] + [mount.workflow_name for mount in child.mounts.values()]
    if name in lineage:
        raise fail(
            node_id, f"include cycle: workflow {name!r} would include itself through {child.name!r}"
        )


def _caller_file() -> str | None:
    # Two frames up: define_workflow's caller. Only real files count (not <stdin>).
    filename = sys._getframe(2).f_code.co_filename
    return os.path.abspath(filename) if os.path.isfile(filename) else None


def define_workflow(
    name: str,
    start_at: str,
    nodes: Mapping[str, Any],
    edges: Sequence[RouteDef],
    max_steps: int = 100,
    description: str = "",
    concurrency: Any = None,
    input: Any = None,
    rate: Any = None,
    debounce: Any = None,
    on_event: Any = None,
    batch: Any = None,
) -> Workflow:
    """A validated, flattened `Workflow`; every problem is a WorkflowDefinitionError
    that names the offending workflow, node or edge. `concurrency=limit(n, key=fn(input))` allows
    at most `n` active runs of it per key (workflows/waits.py). `input` is the shape a run's input
    must have: a shape of `schema.py` or a Python type such as a dataclass (`shapes.py`); `run.start`
    refuses an input without it. `rate=rate_limit(n, per_s=s, key=fn)` and `debounce=debounce(s, key=fn,
    max_wait_s=m)` control how often runs start (workflows/rate_limits.py); `on_event=on_event(NAME,
    filter=fn, input=fn)` starts a run per matching event, `batch=batch(max_items=N, max_wait_s=T, key=fn)`
    one per batch of them (workflows/events.py)."""
    check_workflow_name(name)
    limit = checked_limit(name, concurrency)
    rate_limit_, debounce_ = checked_rate(name, rate), checked_debounce(name, debounce)
    trigger, batching = checked_triggers(name, on_event, batch)
    try:
        input_shape = checked_shape(input, "input")
    except ShapeError as exc:
        raise WorkflowDefinitionError(f"workflow {name!r}: {exc}") from None
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps <= 0:
        raise WorkflowDefinitionError(f"workflow {name!r}: max_steps must be a positive integer, got {max_steps!r}")
    if not isinstance(description, str):
        raise WorkflowDefinitionError(f"workflow {name!r}: description must be a string")
    if not isinstance(nodes, Mapping) or not nodes:
        raise WorkflowDefinitionError(f"workflow {name!r}: nodes must be a non-empty mapping")
    own: dict[str, NodeSpec] = {}
    includes: dict[str, Include] = {}
    for node_id, spec in nodes.items():
        check_node_id(node_id)
        if isinstance(spec, Include):
            _check_include(name, node_id, spec)
            includes[node_id] = spec
        else:
            own[node_id] = checked_node(node_id, spec)
    builder = _Builder(name, own, includes)
    builder.mount_all(list(nodes))
    if not isinstance(start_at, str) or (start_at not in own and start_at not in includes):
        raise WorkflowDefinitionError(f"workflow {name!r}: unknown start node {start_at!r}")
    start = builder.target(start_at, f"workflow {name!r} start")
    builder.add_routes(edges)
    builder.check_decisions()
    builder.check_reachable(start)
    flat_nodes = MappingProxyType(builder.nodes)
    flat_routes = MappingProxyType(builder.routes)
    flat_mounts = MappingProxyType(builder.mounts)
    digest = workflow_digest(
        name=name, description=description, start_at=start, max_steps=max_steps,
        nodes=flat_nodes, routes=flat_routes, mounts=flat_mounts, concurrency=limit, input_shape=input_shape,
        rate=rate_limit_, debounce=debounce_,
    )
    return Workflow(
        name=name, start_at=start, nodes=flat_nodes, routes=flat_routes, max_steps=max_steps,
        digest=digest, source_path=_caller_file(), attr=None, description=description,
        mounts=flat_mounts, concurrency=limit, input_shape=input_shape, rate=rate_limit_, debounce=debounce_,
        on_event=trigger, batch=batching,
    )
