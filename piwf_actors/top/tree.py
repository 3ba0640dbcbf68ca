"""The selected run as a tree in `piwf-top`'s detail pane (pure: no I/O, no clock).

The same tree as `piwf graph RUN --format text` (workflows/graph_render.py) without the routes and the
nodes' summaries (so a narrow pane keeps each status in view), drawn on the graph the host stored when
the run started (`run.graph`: data, so the console runs no workflow code): every node of the definition
in its order — an include's under the include — with its kind, and what the run did there: status,
attempts and a short note (a decision's choice, a shell node's exit code, an output, an error), or
`not reached`; under a node its open waits in words (an answer's deadline, `sleeping until 14:03:00`,
`waiting for a message on 'go'`) and a fan-out's children by status with the ones not done yet. A
run stored without a graph (before hosts kept one) is drawn from its run.get view alone: the nodes
it reached, in the order it reached them. Times are relative to the snapshot's `taken_at`.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from piwf_actors.cli.render import STATUS_STYLES
from piwf_actors.top.cells import cell, line
from piwf_actors.workflows.graph import Graph, function_run_graph, graph_from_view
from piwf_actors.workflows.graph_render import TreeItem, tree, tree_lines
from piwf_actors.workflows.graph_run import overlay

#: Node attempt statuses → the run status whose colour they take.
NODE_STYLES = {"succeeded": STATUS_STYLES["done"], "failed": STATUS_STYLES["failed"],
               "timed_out": STATUS_STYLES["failed"], "running": STATUS_STYLES["running"],
               "waiting": STATUS_STYLES["parked"], "interrupted": STATUS_STYLES["parked"]}


def _style(item: TreeItem) -> str:
    if item.role == "wait":
        return "yellow"
    if item.role == "children":
        return "dim"
    if item.role == "child_run":
        return STATUS_STYLES.get(str(item.status), "")
    style = NODE_STYLES.get(str(item.status), "") if item.role == "node" else "bold" if item.role == "group" else ""
    return f"bold {style}".strip() if item.current and item.role == "node" else style


def run_tree(view: dict[str, Any], now: float, graph: Graph | None = None) -> tuple[list[Text], int | None]:
    """One line per tree item below the run (guides dim, host text literal), and the index of the
    line of the node where the run is (None when it is at none). `graph`: the run's stored graph
    (None: draw the nodes `view` shows it reached)."""
    drawn = graph_from_view(view) if graph is None else function_run_graph(graph, view) if graph.function else graph
    rows = tree_lines(tree(drawn, overlay(view, now), routes=False, summaries=False))[1:]
    here = next((index for index, (_, item) in enumerate(rows) if item.current and item.role == "node"), None)
    return [line((guide, "dim"), cell(item.text, _style(item))) for guide, item in rows], here
