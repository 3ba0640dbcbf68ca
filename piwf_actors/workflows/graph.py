"""The picture of a workflow as plain data (pure: no I/O, no clock).

`build_graph(workflow) -> Graph` reads a validated `Workflow` (never calling its callbacks): its
nodes in definition order with their kind and a one-line summary (a shell command, a decision's
audience and choices, a message topic, a fan-out's child workflow: what each kind's `describe` says,
in its module of `workflows/kinds/`), its routes as edges (a switch's cases are labelled edges, its
default `else`), its includes as groups with their named exits, and the child workflows a fan-out
starts. An edge that leaves an include carries the exit's name as
the author wrote it (`review.approved`). `graph_data` stores a `Graph` with each run and reads it
back. `graph_from_view(view)` is the graph a run.get view shows without the definition: the nodes
the run reached, nested by include, no kinds, no routes.

What a run did on it is `graph_run.overlay`; the pictures are drawn by `graph_render`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from piwf_actors.workflows.function_parts import function_parts, step_kind
from piwf_actors.workflows.kinds import KINDS
from piwf_actors.workflows.model import END, Edge, NodeSpec, Workflow

#: How long a summary may be (characters); a longer one ends with `…`.
SUMMARY_CHARS = 60


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One node: its qualified id, kind, summary, innermost include (`group`) and, for a fan-out, the
    child workflows it starts as (label, workflow name): `("", w)`, `("per item", w)`, `(name, w)`."""

    node_id: str
    kind: str
    summary: str = ""
    group: str | None = None
    children: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class GraphEdge:
    """A route from `source` to `target` (a node id or `END`). `label`: a switch case's key, `else`
    for its default, "" for a plain edge; `on`: the switch's path; `exit`: the include exit the edge
    leaves through (`mount.exit`), None when it stays inside."""

    source: str
    target: str
    label: str = ""
    on: str | None = None
    exit: str | None = None


@dataclass(frozen=True, slots=True)
class GraphGroup:
    """An include: its qualified mount id, the enclosing one, the included workflow's name, and its
    exits (qualified node ids)."""

    mount_id: str
    parent: str | None
    workflow: str
    exits: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Graph:
    workflow: str
    start: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    groups: tuple[GraphGroup, ...] = ()
    description: str = ""
    digest: str = ""
    #: Built from a run.get view alone (`graph_from_view`): no kinds, and no routes known.
    from_view: bool = False
    #: A durable function workflow: no routes; its nodes are the steps its code names (a definition) or
    #: the steps a run took (`function_run_graph`).
    function: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def routes_of(self, node_id: str) -> list[GraphEdge]:
        return [edge for edge in self.edges if edge.source == node_id]


# --- the graph of a definition ----------------------------------------------------------------------------


def cut(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters (`…` at the end when cut)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(spec: NodeSpec) -> str:
    """One line about a node, made of its literal options only (no callback is called): what its
    kind's `describe` says (workflows/kinds/), then its retries."""
    kind = KINDS.of(spec)
    parts = [] if kind is None else kind.describe(spec)
    if spec.retries:
        parts.append(f"retries {spec.retries}")
    return cut(" · ".join(part for part in parts if part), SUMMARY_CHARS)


def _children(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    """The child workflows a fan-out starts, as (label, workflow name)."""
    kind = KINDS.of(spec)
    return () if kind is None else tuple((label, child.name) for label, child in kind.children(spec))


def _mounts_of(node_id: str, mounts: Mapping[str, Any]) -> list[str]:
    """The include mounts that hold `node_id`, outermost first."""
    parts = node_id.split("/")
    return [prefix for prefix in ("/".join(parts[:n]) for n in range(1, len(parts))) if prefix in mounts]


def _exit_name(source: str, target: str, mounts: Mapping[str, Any]) -> str | None:
    """`mount.exit` when the route from `source` to `target` leaves an include, as the outer
    workflow's author names it: the outermost include left, and the source's id inside it."""
    inside = set(_mounts_of(target, mounts)) if target != END else set()
    left = [mount for mount in _mounts_of(source, mounts) if mount not in inside]
    if not left:
        return None
    return exit_label(left[0], source)


def exit_label(mount_id: str, node_id: str) -> str:
    """How the outer workflow's author names the exit `node_id` of the include mounted at `mount_id`:
    `mount.exit` (the mount's own name, the node's id inside it)."""
    return f"{mount_id.rsplit('/', 1)[-1]}.{node_id[len(mount_id) + 1:]}"


def build_graph(workflow: Workflow) -> Graph:
    """The graph of `workflow` (see the module docstring)."""
    if workflow.function is not None:
        return _function_graph(workflow)
    nodes = tuple(GraphNode(node_id, spec.kind, summary(spec), spec.mount, _children(spec))
                  for node_id, spec in workflow.nodes.items())
    edges: list[GraphEdge] = []
    for node_id in workflow.nodes:
        route = workflow.routes.get(node_id)
        if route is None:
            continue
        if isinstance(route, Edge):
            edges.append(GraphEdge(node_id, route.target, exit=_exit_name(node_id, route.target, workflow.mounts)))
            continue
        cases = [*route.cases.items(), *([("else", route.default)] if route.default is not None else [])]
        for key, target in cases:
            edges.append(GraphEdge(node_id, target, key, route.on, _exit_name(node_id, target, workflow.mounts)))
    groups = []
    for mount_id, mount in workflow.mounts.items():
        exits = tuple(node.node_id for node in nodes if mount_id in _mounts_of(node.node_id, workflow.mounts) and (
            node.node_id not in workflow.routes
            or any(edge.source == node.node_id and mount_id not in _mounts_of(edge.target, workflow.mounts)
                   for edge in edges)))
        groups.append(GraphGroup(mount_id, mount.parent, mount.workflow_name, exits))
    return Graph(workflow.name, workflow.start_at, nodes, tuple(edges), tuple(groups), workflow.description,
                 workflow.digest)


def _function_graph(workflow: Workflow) -> Graph:
    """A function workflow's picture: the steps its code names, in that order, with no routes (the
    code decides), and the workflows it names as children of the function (`run_child` …)."""
    steps, children = function_parts(workflow)
    nodes = [GraphNode(step.name, *step_kind(step)) for step in steps]
    if children:
        nodes.append(GraphNode("children", "run_workflow", "workflows the function names",
                               children=tuple(("", child.name) for child in children)))
    return Graph(workflow.name, "", tuple(nodes), (), (), workflow.description, workflow.digest, function=True)


#: The node that records a function's return value (durable/replay.py's RETURN_ID).
RETURN_NODE = "return"
#: The node kind a function's wait or question ran as, by the kind of its wait or request (run.get's
#: `wait_kind`); a child run's wait says `children` whether one child or a map started it.
WAIT_KINDS = {"decision": "human_decision", "checkpoint": "checkpoint", "agent": "agent", "sleep": "sleep",
              "message": "wait_message", "children": "children", "event": "wait_event"}


def function_run_graph(graph: Graph, view: Mapping[str, Any]) -> Graph:
    """The picture of a function workflow's run: the steps it took, in the order it took them (from
    the run.get `view`), each with the kind and summary of the step of its name in `graph` (`fetch#2`
    is a call of `fetch`) — a wait or a question with the kind of what it waited on, a step called
    under another id with the kind its records show — and the node `return` where it ended."""
    known = {node.node_id: node for node in graph.nodes}
    waited = {str(item.get("node_id")): str(item.get("wait_kind") or item.get("kind") or "")
              for key in ("nodes", "waiting", "waits") for item in view.get(key) or []
              if isinstance(item, Mapping) and (item.get("wait_kind") or item.get("kind"))}
    effects = {str(effect.get("node_id")) for effect in view.get("effects") or [] if isinstance(effect, Mapping)}
    finished = {str(node.get("node_id")) for node in view.get("nodes") or [] if isinstance(node, Mapping)}

    def kind_of(node_id: str) -> str:
        """A step called under another id (`step.named`): what it did tells its kind, as for metrics."""
        if node_id in waited:
            return WAIT_KINDS.get(waited[node_id], "")
        if node_id in effects:
            return "action"
        return "compute" if node_id in finished and node_id != RETURN_NODE else ""

    reached = graph_from_view(view)
    nodes = tuple(GraphNode(node.node_id, known[base].kind, known[base].summary) if base in known
                  else GraphNode(node.node_id, kind_of(node.node_id))
                  for node in reached.nodes for base in [node.node_id.split("#", 1)[0]])
    return Graph(graph.workflow, nodes[0].node_id if nodes else "", nodes, (), (), graph.description, graph.digest,
                 function=True)


def graph_from_view(view: Mapping[str, Any]) -> Graph:
    """The graph of what a run.get view shows without the definition: the nodes the run reached, in
    the order it reached them, nested by their qualified ids (`get/ok` inside the include `get`), with
    no kinds and no routes (a run stored without its graph, before hosts kept one)."""
    node_ids = [str(node.get("node_id")) for node in view.get("nodes") or [] if isinstance(node, Mapping)]
    node_ids += [str(wait.get("node_id")) for wait in (view.get("waiting") or []) + (view.get("waits") or [])
                 if isinstance(wait, Mapping)]
    if view.get("current_node"):
        node_ids.append(str(view["current_node"]))
    mounts: dict[str, GraphGroup] = {}
    for node_id in node_ids:
        parts = node_id.split("/")
        for depth in range(1, len(parts)):
            mount_id = "/".join(parts[:depth])
            mounts.setdefault(mount_id, GraphGroup(mount_id, "/".join(parts[:depth - 1]) or None, ""))
    nodes = tuple(GraphNode(node_id, "", group=node_id.rsplit("/", 1)[0] if "/" in node_id else None)
                  for node_id in dict.fromkeys(node_ids))
    return Graph(str(view.get("workflow")), nodes[0].node_id if nodes else "", nodes, (), tuple(mounts.values()),
                 from_view=True)
