"""A definition's graph as stored data: what the host keeps with a run so that drawing it runs no code.

When a run starts, the host (which holds the loaded definition) stores `graph_document(workflow)` —
the `Graph` of `graph.build_graph` as plain JSON, together with the graphs of every workflow the run
may start as a child (run_workflow, map_workflow, parallel; theirs too), each once, keyed by its
definition digest:

    {"format": "piwf.graph.v1", "workflow": "<digest of the run's workflow>",
     "graphs": {"<digest>": {"graph": {workflow, start, description, digest, nodes, edges, groups},
                             "starts": ["<digest of a child workflow>", ...]}, ...}}

The document is a function of the definition alone, so equal definitions give equal bytes
(`document_bytes`, canonical JSON) and share one stored blob. A child run's document is cut from its
parent's (`child_document`) by the digest the worker names, without loading any code.

`graph_of(document)` is the way back: it checks the document (one `GraphDataError` line for anything
malformed) and returns the `Graph` the renderers draw — one representation for a workflow object
(`build_graph`) and a stored run alike. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from piwf_actors.canonical import canonical_json
from piwf_actors.workflows.function_parts import function_parts
from piwf_actors.workflows.graph import Graph, GraphEdge, GraphGroup, GraphNode, build_graph
from piwf_actors.workflows.kinds import KINDS
from piwf_actors.workflows.model import END, Workflow

GRAPH_FORMAT = "piwf.graph.v1"


class GraphDataError(ValueError):
    """A stored graph document that is not one this module writes (one line: what is wrong)."""


# --- a workflow object → the stored document ---------------------------------------------------------------


def child_workflows(workflow: Workflow) -> list[Workflow]:
    """The workflows `workflow`'s nodes start as child runs, in node order, each once."""
    found: dict[str, Workflow] = {}
    for child in function_parts(workflow)[1]:  # a function workflow's: those its code names
        found.setdefault(child.digest, child)
    for spec in workflow.nodes.values():
        kind = KINDS.of(spec)
        for _, child in () if kind is None else kind.children(spec):
            found.setdefault(child.digest, child)
    return list(found.values())


def graph_data(graph: Graph) -> dict[str, Any]:
    """`graph` as plain JSON data (what `graph_of` reads back); `function` only for a function
    workflow's, so a graph workflow's stored document stays as it was."""
    return {**({"function": True} if graph.function else {}), "workflow": graph.workflow, "start": graph.start, "description": graph.description,
            "digest": graph.digest,
            "nodes": [{"node_id": n.node_id, "kind": n.kind, "summary": n.summary, "group": n.group,
                       "children": [list(child) for child in n.children]} for n in graph.nodes],
            "edges": [{"source": e.source, "target": e.target, "label": e.label, "on": e.on, "exit": e.exit}
                      for e in graph.edges],
            "groups": [{"mount_id": g.mount_id, "parent": g.parent, "workflow": g.workflow, "exits": list(g.exits)}
                       for g in graph.groups]}


def graph_document(workflow: Workflow) -> dict[str, Any]:
    """The document stored with a run of `workflow` (see the module docstring). Calls no callback."""
    graphs: dict[str, dict[str, Any]] = {}
    pending = [workflow]
    while pending:
        current = pending.pop()
        if current.digest in graphs:
            continue
        children = child_workflows(current)
        graphs[current.digest] = {"graph": graph_data(build_graph(current)),
                                  "starts": [child.digest for child in children]}
        pending.extend(children)
    return {"format": GRAPH_FORMAT, "workflow": workflow.digest, "graphs": graphs}


def document_bytes(document: Mapping[str, Any]) -> bytes:
    """The stored form: canonical JSON, so equal documents are equal bytes (one blob)."""
    return canonical_json(document).encode()


def graph_blob(workflow: Workflow) -> bytes:
    """What the host stores with a run of `workflow`: its document's bytes."""
    return document_bytes(graph_document(workflow))


def child_document(document: Mapping[str, Any], digest: str) -> dict[str, Any] | None:
    """The document of the child workflow `digest` started by a run whose document is `document` (the
    graphs it reaches, as `graph_document` of that workflow would give), or None when it holds no such
    workflow (the worker's definition is not the one the host stored: a module it imports changed)."""
    graphs = document.get("graphs")
    if not isinstance(graphs, Mapping) or digest not in graphs:
        return None
    reached: dict[str, Any] = {}
    pending = [digest]
    while pending:
        current = pending.pop()
        if current in reached or current not in graphs:
            continue
        reached[current] = graphs[current]
        starts = graphs[current].get("starts") if isinstance(graphs[current], Mapping) else None
        pending.extend(str(start) for start in (starts if isinstance(starts, list) else ()))
    return {"format": GRAPH_FORMAT, "workflow": digest, "graphs": reached}


# --- the stored document → the Graph the renderers draw -----------------------------------------------------


def _text(value: Any, what: str, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise GraphDataError(f"{what} must be text, got {type(value).__name__}")
    return value


def _items(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise GraphDataError(f"{what} must be a list, got {type(value).__name__}")
    return value


def _map(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise GraphDataError(f"{what} must be a map, got {type(value).__name__}")
    return value


def _node(data: Any, index: int) -> GraphNode:
    node = _map(data, f"node {index}")
    children = []
    for pair in _items(node.get("children", []), f"node {index} children"):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair)):
            raise GraphDataError(f"node {index}: a child workflow must be [label, workflow]")
        children.append((pair[0], pair[1]))
    return GraphNode(_text(node.get("node_id"), f"node {index} id"), _text(node.get("kind"), f"node {index} kind"),
                     _text(node.get("summary", ""), f"node {index} summary"),
                     _text(node.get("group"), f"node {index} group", optional=True), tuple(children))


def _edge(data: Any, index: int) -> GraphEdge:
    edge = _map(data, f"edge {index}")
    return GraphEdge(_text(edge.get("source"), f"edge {index} source"),
                     _text(edge.get("target"), f"edge {index} target"),
                     _text(edge.get("label", ""), f"edge {index} label"),
                     _text(edge.get("on"), f"edge {index} on", optional=True),
                     _text(edge.get("exit"), f"edge {index} exit", optional=True))


def _group(data: Any, index: int) -> GraphGroup:
    group = _map(data, f"group {index}")
    exits = tuple(_text(exit_id, f"group {index} exit")
                  for exit_id in _items(group.get("exits", []), f"group {index} exits"))
    return GraphGroup(_text(group.get("mount_id"), f"group {index} id"),
                      _text(group.get("parent"), f"group {index} parent", optional=True),
                      _text(group.get("workflow", ""), f"group {index} workflow"), exits)


def _check(graph: Graph) -> None:
    """What the renderers rely on: every id an edge, a node or a group names exists; includes nest."""
    node_ids = [node.node_id for node in graph.nodes]
    known = set(node_ids)
    if len(known) != len(node_ids):
        raise GraphDataError("a node id appears twice")
    groups = {group.mount_id: group for group in graph.groups}
    if len(groups) != len(graph.groups):
        raise GraphDataError("an include appears twice")
    for edge in graph.edges:
        if edge.source not in known or (edge.target != END and edge.target not in known):
            raise GraphDataError(f"edge {edge.source!r} → {edge.target!r} names a node the graph does not have")
    for node in graph.nodes:
        if node.group is not None and node.group not in groups:
            raise GraphDataError(f"node {node.node_id!r} is in include {node.group!r}, which the graph does not have")
    for group in graph.groups:
        seen = {group.mount_id}
        parent = group.parent
        while parent is not None:
            if parent not in groups or parent in seen:
                raise GraphDataError(f"include {group.mount_id!r} is not nested in includes the graph has")
            seen.add(parent)
            parent = groups[parent].parent


def graph_from_data(data: Any) -> Graph:
    """The `Graph` of one `graph_data` map; GraphDataError when it is malformed."""
    graph = _map(data, "graph")
    built = Graph(_text(graph.get("workflow"), "workflow"), _text(graph.get("start"), "start"),
                  tuple(_node(node, index) for index, node in enumerate(_items(graph.get("nodes"), "nodes"))),
                  tuple(_edge(edge, index) for index, edge in enumerate(_items(graph.get("edges"), "edges"))),
                  tuple(_group(group, index) for index, group in enumerate(_items(graph.get("groups", []), "groups"))),
                  _text(graph.get("description", ""), "description"), _text(graph.get("digest", ""), "digest"),
                  function=graph.get("function") is True)
    _check(built)
    return built


def graph_of(document: Any) -> Graph:
    """The graph of the run's own workflow in a stored document; GraphDataError when it is not one."""
    found = _map(document, "graph document")
    if found.get("format") != GRAPH_FORMAT:
        raise GraphDataError(f"not a {GRAPH_FORMAT} document (format {str(found.get('format'))[:40]!r})")
    graphs = _map(found.get("graphs"), "graphs")
    entry = graphs.get(_text(found.get("workflow"), "workflow"))
    if entry is None:
        raise GraphDataError("the document has no graph of its own workflow")
    return graph_from_data(_map(entry, "graph entry").get("graph"))


def document_from_bytes(data: bytes) -> dict[str, Any]:
    """A stored document read back (its graph unchecked: `graph_of` checks); GraphDataError if not JSON."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GraphDataError(f"a stored graph is not JSON ({exc})") from None
    return dict(_map(document, "graph document"))
