"""Pictures of a `Graph` (workflows/graph.py), optionally with a run on it (graph_run.py): a tree,
Mermaid, Graphviz dot.

Pure functions of their arguments, returning strings (or plain tree data):

- `tree(graph, run)` → `TreeItem`s: the workflow's nodes in definition order, includes as branches
  holding their nodes, each node with its routes (`ship → ship`, `→ end`), the child workflows of
  a fan-out, and with a run: its status, attempts and note, its open waits, its children by status
  and where the run is. `render_text` draws it with box guides (`piwf graph --format text`);
  piwf-top draws the same items in its detail pane (top/tree.py).
- `render_mermaid` → a `flowchart TD` (GitHub renders it): shapes by kind (each kind's `Drawing`,
  in its module of workflows/kinds/; a kind not known here is a plain box), includes as
  subgraphs, switch cases and include exits as edge labels, fan-out children as dashed edges to
  their workflow; with a run, classes per status and a thick border on the current node.
- `render_dot` → the same as a `digraph` (`dot -Tsvg`).

Node ids never become diagram ids (they may hold `/`, `-` or Mermaid keywords such as `end`):
nodes are `n1…`, includes `g1…`, child workflows `c1…`, plus `start` and `stop`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from piwf_actors.workflows.graph import Graph, GraphEdge, GraphGroup, GraphNode, exit_label
from piwf_actors.workflows.graph_run import NodeState, RunOverlay
from piwf_actors.workflows.kinds import KINDS
from piwf_actors.workflows.model import END

#: A status's mark in the tree and its class in the diagrams.
MARKS = {"succeeded": "✓", "failed": "✗", "timed_out": "✗", "running": "▶", "interrupted": "↯", "waiting": "⏳"}
CLASSES = {"succeeded": "succeeded", "failed": "failed", "timed_out": "failed", "running": "running",
           "interrupted": "interrupted", "waiting": "waiting"}
#: Mermaid classes (and the dot fills) per class.
COLORS = {"succeeded": ("#dcfce7", "#16a34a"), "failed": ("#fee2e2", "#dc2626"), "running": ("#dbeafe", "#2563eb"),
          "waiting": ("#fef9c3", "#ca8a04"), "interrupted": ("#ffedd5", "#ea580c")}
#: Children of a fan-out listed one by one in the tree (those not done first).
CHILDREN_LISTED = 5


@dataclass(frozen=True, slots=True)
class TreeItem:
    """One line of the tree and what hangs below it. `role`: title, node, group, route, child (a
    fan-out's child workflow), wait, children (counts), child_run. `status`: the node's status in
    the run (None: not reached, or no run); `current`: the run is here."""

    text: str
    role: str
    node_id: str | None = None
    status: str | None = None
    current: bool = False
    items: tuple[TreeItem, ...] = ()


# --- the tree -------------------------------------------------------------------------------------------------


def state_text(state: NodeState) -> str:
    """`✓ succeeded ×2  exit 0`: the mark, status, attempts (when more than one) and note."""
    text = f"{MARKS.get(state.status, '·')} {state.status}"
    if state.attempts > 1:
        text += f" ×{state.attempts}"
    return f"{text}  {state.note}" if state.note else text


def _target(target: str) -> str:
    return "end" if target == END else target


def _route_text(edge: GraphEdge) -> str:
    if edge.on is None:
        text = f"→ {_target(edge.target)}"
    elif edge.label == "else":
        text = f"else → {_target(edge.target)}"
    else:
        text = f"{edge.on} = {edge.label} → {_target(edge.target)}"
    return f"{text}  (exit {edge.exit})" if edge.exit else text


def _children_items(state: NodeState) -> list[TreeItem]:
    if not state.children:
        return []
    counts = " · ".join(f"{status} {count}" for status, count in state.children)
    shown = sum(count for _, count in state.children)
    if state.children_total is not None:
        counts += f"  ({shown} of {state.children_total} listed)"
    elif state.children_partial:
        counts += "  (of those run.get lists)"
    runs = sorted(state.child_runs, key=lambda child: (child.get("status") == "done", child.get("child_index") or 0))
    items = [TreeItem(f"children: {counts}", "children")]
    for child in runs[:CHILDREN_LISTED]:
        if child.get("status") == "done":
            break
        index = child.get("child_index")
        items.append(TreeItem(f"{'' if index is None else f'#{index} '}{child.get('run_id')}  "
                              f"{child.get('workflow')}  {child.get('status')}", "child_run",
                              status=str(child.get("status"))))
    return items


def _node_item(graph: Graph, node: GraphNode, run: RunOverlay | None, routes: bool, summaries: bool) -> TreeItem:
    text = node.node_id + (f"  {node.kind}" if node.kind else "") + (
        f": {node.summary}" if node.summary and summaries else "")
    state = run.nodes.get(node.node_id) if run is not None else None
    items: list[TreeItem] = []
    current = run is not None and run.current == node.node_id
    if state is not None:
        text += f"   {state_text(state)}"
        items += [TreeItem(f"⏳ {words}", "wait", node.node_id) for words in state.waits]
        items += _children_items(state)
    elif run is not None:
        text += "   · not reached"
    if current:
        text += "   ◀ ended here" if run is not None and run.ended else "   ◀ here"
    items += [TreeItem(f"⇉ {f'{label}: ' if label else ''}{workflow}", "child", node.node_id)
              for label, workflow in node.children]
    if routes:
        edges = graph.routes_of(node.node_id)
        items += [TreeItem(_route_text(edge), "route", node.node_id) for edge in edges] or [
            TreeItem("→ end", "route", node.node_id)]
    return TreeItem(text, "node", node.node_id, None if state is None else state.status, current, tuple(items))


def _group_text(group: GraphGroup) -> str:
    exits = ", ".join(exit_label(group.mount_id, node_id) for node_id in group.exits)
    what = f"include {group.mount_id}" + (f": {group.workflow}" if group.workflow else "")
    return what + (f"  (exits {exits})" if exits else "")


def _child_group(groups: dict[str, GraphGroup], group: str | None, parent: str | None) -> str | None:
    """The include directly inside `parent` that holds the include `group` (itself, or an ancestor)."""
    while group is not None and group in groups:
        if groups[group].parent == parent:
            return group
        group = groups[group].parent
    return None


def _level(graph: Graph, parent: str | None, item_of: Callable[[GraphNode], TreeItem]) -> tuple[TreeItem, ...]:
    """The items directly inside `parent` (an include, or None for the top level) in definition order:
    its own nodes, and each include inside it at the place of its first node."""
    groups = {group.mount_id: group for group in graph.groups}
    items: list[TreeItem] = []
    placed: set[str] = set()
    for node in graph.nodes:
        if node.group == parent:
            items.append(item_of(node))
            continue
        owner = _child_group(groups, node.group, parent)
        if owner is not None and owner not in placed:
            placed.add(owner)
            inner = _level(graph, owner, item_of)
            items.append(TreeItem(_group_text(groups[owner]), "group", owner, items=inner,
                                  current=any(item.current for item in _walk(inner))))
    return tuple(items)


def _walk(items: tuple[TreeItem, ...]) -> list[TreeItem]:
    out: list[TreeItem] = []
    for item in items:
        out.append(item)
        out += _walk(item.items)
    return out


def tree(graph: Graph, run: RunOverlay | None = None, *, routes: bool = True, summaries: bool = True) -> TreeItem:
    """The tree of `graph` (with `run` on it); `routes=False` leaves the routes out and `summaries=False`
    the nodes' summaries (piwf-top: a narrow pane keeps each node's status in view)."""
    title = f"workflow {graph.workflow}  start {graph.start}"
    if graph.function:  # no routes to draw: its code decides; the steps it names (or a run took)
        title = f"workflow {graph.workflow}  function workflow: " + (
            "the steps its code names (a run draws the steps it took)" if run is None else "the steps the run took")
    if run is not None:
        title = f"run {run.run_id}  {graph.workflow}{'  (function)' if graph.function else ''}  {run.status}" + (
            f" ({run.park_reason})" if run.park_reason else "")
    routes = routes and not graph.from_view and not graph.function
    return TreeItem(title, "title",
                    items=_level(graph, None, lambda node: _node_item(graph, node, run, routes, summaries)))


def tree_lines(root: TreeItem) -> list[tuple[str, TreeItem]]:
    """(guide, item) per line: the root first with no guide, then `├── ` / `└── ` under `│   `."""
    lines: list[tuple[str, TreeItem]] = [("", root)]

    def walk(items: tuple[TreeItem, ...], lead: str) -> None:
        for index, item in enumerate(items):
            last = index == len(items) - 1
            lines.append((lead + ("└── " if last else "├── "), item))
            walk(item.items, lead + ("    " if last else "│   "))

    walk(root.items, "")
    return lines


def render_text(graph: Graph, run: RunOverlay | None = None) -> str:
    return "\n".join(guide + item.text for guide, item in tree_lines(tree(graph, run))) + "\n"


# --- diagrams ----------------------------------------------------------------------------------------------------

class _Ids:
    """Diagram ids: `n1…` for nodes in definition order, `g1…` for includes, `c1…` for child workflows."""

    def __init__(self, graph: Graph) -> None:
        self.nodes = {node.node_id: f"n{index}" for index, node in enumerate(graph.nodes, 1)}
        self.groups = {group.mount_id: f"g{index}" for index, group in enumerate(graph.groups, 1)}
        self.children = [(node.node_id, label, workflow, f"c{index}")
                         for index, (node, label, workflow) in enumerate(
                             ((node, label, workflow) for node in graph.nodes for label, workflow in node.children), 1)]

    def target(self, target: str) -> str:
        return "stop" if target == END else self.nodes[target]


def _label_lines(node: GraphNode, run: RunOverlay | None) -> list[str]:
    lines = [node.node_id, f"{node.kind}: {node.summary}" if node.summary else node.kind]
    state = run.nodes.get(node.node_id) if run is not None else None
    if state is not None:
        lines.append(state_text(state))
    return lines


def _edge_label(edge: GraphEdge) -> str:
    return " · ".join(part for part in (edge.label, edge.exit or "") if part)


def _status_class(state: NodeState) -> str | None:
    return "waiting" if state.waits else CLASSES.get(state.status)


def _ends(graph: Graph) -> list[str]:
    """Node ids without a route: the run (or an include with no outer route) ends there. None for a
    graph of a run.get view alone, whose routes are unknown."""
    if graph.from_view or graph.function:
        return []
    sources = {edge.source for edge in graph.edges}
    return [node.node_id for node in graph.nodes if node.node_id not in sources]


def _mermaid_text(text: str) -> str:
    """Text for inside a quoted Mermaid label: its own `"`, `<`, `>`, `#` and backticks as entities."""
    return ("".join({"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;", "`": "#96;"}.get(c, c) for c in text))


def _nesting(graph: Graph) -> tuple[dict[str | None, list[GraphNode]], dict[str | None, list[GraphGroup]]]:
    """The nodes of each group and the groups inside each group (None: the top level), as both diagrams nest them."""
    by_group: dict[str | None, list[GraphNode]] = {}
    for node in graph.nodes:
        by_group.setdefault(node.group, []).append(node)
    inner: dict[str | None, list[GraphGroup]] = {}
    for group in graph.groups:
        inner.setdefault(group.parent, []).append(group)
    return by_group, inner


def render_mermaid(graph: Graph, run: RunOverlay | None = None) -> str:
    ids = _Ids(graph)
    out = ["flowchart TD"]
    by_group, inner = _nesting(graph)

    def emit(parent: str | None, indent: str) -> None:
        for node in by_group.get(parent, []):
            opening, closing = KINDS.drawing(node.kind).mermaid
            label = "<br/>".join(_mermaid_text(text) for text in _label_lines(node, run))
            out.append(f"{indent}{ids.nodes[node.node_id]}{opening}{label}{closing}")
        for group in inner.get(parent, []):
            out.append(f'{indent}subgraph {ids.groups[group.mount_id]}["{_mermaid_text(_group_text(group))}"]')
            emit(group.mount_id, indent + "    ")
            out.append(f"{indent}end")

    emit(None, "    ")
    if graph.start in ids.nodes:
        out.append(f"    start((start)) --> {ids.nodes[graph.start]}")
    ends = _ends(graph)
    if ends or any(edge.target == END for edge in graph.edges):
        out.append("    stop((end))")
    for edge in graph.edges:
        label = _edge_label(edge)
        arrow = f'-->|"{_mermaid_text(label)}"|' if label else "-->"
        out.append(f"    {ids.nodes[edge.source]} {arrow} {ids.target(edge.target)}")
    out += [f"    {ids.nodes[node_id]} --> stop" for node_id in ends]
    for node_id, label, workflow, child_id in ids.children:
        out.append(f'    {child_id}("workflow {_mermaid_text(workflow)}")')
        arrow = f'-.->|"{_mermaid_text(label)}"|' if label else "-.->"
        out.append(f"    {ids.nodes[node_id]} {arrow} {child_id}")
    if run is not None:
        out += _mermaid_classes(graph, run, ids)
    return "\n".join(out) + "\n"


def _mermaid_classes(graph: Graph, run: RunOverlay, ids: _Ids) -> list[str]:
    members: dict[str, list[str]] = {}
    for node in graph.nodes:
        state = run.nodes.get(node.node_id)
        name = None if state is None else _status_class(state)
        if name is not None:
            members.setdefault(name, []).append(ids.nodes[node.node_id])
    out = [f"    classDef {name} fill:{fill},stroke:{stroke}" for name, (fill, stroke) in COLORS.items()
           if name in members]
    out += [f"    class {','.join(members[name])} {name}" for name in COLORS if name in members]
    if run.current in ids.nodes:
        out.append(f"    style {ids.nodes[run.current]} stroke-width:4px")
    return out


def _dot_text(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(graph: Graph, run: RunOverlay | None = None) -> str:
    ids = _Ids(graph)
    out = [f"digraph {_dot_text(graph.workflow)} {{", "    rankdir=TB;",
           '    node [fontname="Helvetica", fontsize=11];', '    edge [fontname="Helvetica", fontsize=10];',
           '    start [shape=circle, label="start", fontsize=9];']
    by_group, inner = _nesting(graph)

    def emit(parent: str | None, indent: str) -> None:
        for node in by_group.get(parent, []):
            drawing = KINDS.drawing(node.kind)
            attrs = [f"shape={drawing.dot_shape}", f"label={_dot_text(chr(10).join(_label_lines(node, run)))}"]
            styles = [drawing.dot_style] if drawing.dot_style else []
            state = run.nodes.get(node.node_id) if run is not None else None
            name = None if state is None else _status_class(state)
            if name is not None:
                fill, stroke = COLORS[name]
                styles.append("filled")
                attrs += [f'fillcolor="{fill}"', f'color="{stroke}"']
            if styles:
                attrs.append(f'style="{",".join(styles)}"')
            if run is not None and run.current == node.node_id:
                attrs.append("penwidth=3")
            out.append(f"{indent}{ids.nodes[node.node_id]} [{', '.join(attrs)}];")
        for group in inner.get(parent, []):
            out.append(f"{indent}subgraph cluster_{ids.groups[group.mount_id]} {{")
            out.append(f"{indent}    label={_dot_text(_group_text(group))};")
            emit(group.mount_id, indent + "    ")
            out.append(f"{indent}}}")

    emit(None, "    ")
    ends = _ends(graph)
    if ends or any(edge.target == END for edge in graph.edges):
        out.append('    stop [shape=doublecircle, label="end", fontsize=9];')
    if graph.start in ids.nodes:
        out.append(f"    start -> {ids.nodes[graph.start]};")
    for edge in graph.edges:
        label = _edge_label(edge)
        out.append(f"    {ids.nodes[edge.source]} -> {ids.target(edge.target)}"
                   + (f" [label={_dot_text(label)}]" if label else "") + ";")
    out += [f"    {ids.nodes[node_id]} -> stop;" for node_id in ends]
    for node_id, label, workflow, child_id in ids.children:
        out.append(f'    {child_id} [shape=component, style=dashed, label={_dot_text("workflow " + workflow)}];')
        out.append(f"    {ids.nodes[node_id]} -> {child_id} [style=dashed"
                   + (f", label={_dot_text(label)}" if label else "") + "];")
    out.append("}")
    return "\n".join(out) + "\n"


RENDERERS: dict[str, Callable[[Graph, RunOverlay | None], str]] = {
    "text": render_text, "mermaid": render_mermaid, "dot": render_dot}
