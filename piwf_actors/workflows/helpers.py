"""The helpers a workflow file calls to describe routes and includes.

The node helpers (`compute`, `shell`, `human_decision`, …) live with their kinds, one module each in
`workflows/kinds/`; `piwf_actors.workflows` exports them all. Helpers only record their arguments.
`define_workflow` validates them, so a mistake is reported with the id of the node it belongs to (a
helper does not know that id yet).
"""

from __future__ import annotations

from collections.abc import Mapping

from piwf_actors.workflows.model import Callback, Edge, Include, RouteDef, Switch, Workflow


def include_workflow(workflow: Workflow, input: Callback | None = None) -> Include:
    """Mount `workflow` under the node id this is given in `nodes`.

    Route into it with an edge to that id; leave it through `"id.exit"`, where
    the exits are the child's terminal nodes. `input(ctx)` becomes the child's
    `ctx.input` (default: the enclosing scope's input).
    """
    return Include(workflow=workflow, input=input)


def edge(source: str, target: str) -> RouteDef:
    """Always route `source` to `target` (a node id, an include id, or `END`)."""
    return RouteDef(source=source, route=Edge(target))


def switch(
    source: str, on: str, cases: Mapping[str, str], default: str | None = None
) -> RouteDef:
    """Route `source` by a value of its result.

    `on` is `$.field[.sub]` / `$output.field[.sub]` (the output) or
    `$result.outcome` (`"ok"`/`"failed"`); see `routing.route` for matching.
    """
    return RouteDef(source=source, route=Switch(on=on, cases=cases, default=default))


def decision_switch(source: str, cases: Mapping[str, str]) -> RouteDef:
    """`switch(source, on="$.choice", cases=cases)`: one case per choice."""
    return switch(source, on="$.choice", cases=cases)
