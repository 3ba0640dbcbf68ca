"""What a node kind is made of, and the registry that finds a kind by its spec or by its name.

A node kind is one module of this package that ends with a `KIND = NodeKind(...)`: its spec (a
frozen `NodeSpec` subclass whose class attribute `kind` is the kind's name), its checks (what
`define_workflow` runs on a helper-built spec), its description (the parts of the one-line summary a
graph shows; no callback is called), how it is drawn (`Drawing`), and the few facts the definition
code asks of a kind (the child workflows it starts, whether it takes `output=`, the choices a switch
on it must cover). `kinds/__init__.py` lists every kind in `KINDS`; the worker's executor table
(worker/executors/) is checked against that list when it is imported.

Pure data and functions: nothing here runs a node or touches I/O. A kind's `check` runs in the
thread that calls `define_workflow` (a host's user-code thread while it loads a workflow file, the
worker while it loads a snapshot, a CLI); `describe` and `children` in whichever builds a graph.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import NodeKindError
from piwf_actors.workflows.model import NodeSpec, Workflow

#: How a kind's name is spelled: it is stored with every graph and shown in every tree.
KIND_NAME = re.compile(r"[a-z][a-z0-9_]*")

#: Checks: `check(node_id, spec) -> changes`, the normalized fields for `dataclasses.replace` (common
#: options included), or a WorkflowDefinitionError naming `node_id`.
Check = Callable[[str, Any], dict[str, Any]]
#: Description: `describe(spec) -> parts` of the node's one-line summary, from its literal options only.
Describe = Callable[[Any], list[str]]
#: Child workflows: `children(spec) -> ((label, workflow), ...)` a node of the kind starts as child runs.
Children = Callable[[Any], tuple[tuple[str, Workflow], ...]]


def no_children(spec: Any) -> tuple[tuple[str, Workflow], ...]:
    """The children of a kind that starts no child runs."""
    return ()


@dataclass(frozen=True, slots=True)
class Drawing:
    """How a node of a kind is drawn (workflows/graph_render.py): the brackets around its label in a
    Mermaid flowchart (`('["', '"]')` is a box), its Graphviz `shape`, and a Graphviz `style` added to
    the node's own ("rounded"; "" for none)."""

    mermaid: tuple[str, str]
    dot_shape: str
    dot_style: str = ""


#: How a node of a kind the renderer does not know is drawn (a graph stored by another version, or
#: one built from a run.get view, which has no kinds).
PLAIN = Drawing(('["', '"]'), "box")


@dataclass(frozen=True, slots=True)
class NodeKind:
    """One node kind (see the module docstring). Built once per kind module, at import; a part
    missing or of the wrong type raises NodeKindError naming the kind."""

    spec: type[NodeSpec]
    check: Check
    describe: Describe
    drawing: Drawing
    children: Children = no_children
    #: Whether `output=` (the shape its output must have) applies: only to nodes whose output is what
    #: their author's function returns (compute, action).
    takes_output_shape: bool = False
    #: The case keys a `switch` on `$.choice` from a node of the kind must have, exactly, as
    #: `define_workflow` checks them (None: such a switch is not checked against the node).
    switch_cases: Callable[[Any], Collection[str]] | None = None

    def __post_init__(self) -> None:
        spec = self.spec
        name = getattr(spec, "kind", None)
        if not (isinstance(spec, type) and issubclass(spec, NodeSpec) and spec is not NodeSpec):
            raise NodeKindError(str(name), f"its spec must be a subclass of NodeSpec, got {spec!r}")
        if not isinstance(name, str) or not KIND_NAME.fullmatch(name):
            raise NodeKindError(str(name), f"{spec.__name__}.kind must be a name matching {KIND_NAME.pattern}")
        for part in ("check", "describe", "children"):
            if not callable(getattr(self, part)):
                raise NodeKindError(name, f"its {part} must be a function")
        if self.switch_cases is not None and not callable(self.switch_cases):
            raise NodeKindError(name, "its switch_cases must be a function or None")
        if not isinstance(self.drawing, Drawing):
            raise NodeKindError(name, f"its drawing must be a Drawing, got {type(self.drawing).__name__}")

    @property
    def name(self) -> str:
        """The kind's name: its spec's `kind` (`compute`, `human_decision` …)."""
        return self.spec.kind


class KindRegistry:
    """The node kinds, in the order they were listed; found by spec (its class, or the nearest
    registered class it derives from) or by name. Built once, at import; never changed after."""

    def __init__(self, kinds: Iterable[NodeKind]) -> None:
        self._by_spec: dict[type[NodeSpec], NodeKind] = {}
        self._by_name: dict[str, NodeKind] = {}
        for kind in kinds:
            if not isinstance(kind, NodeKind):
                raise NodeKindError(str(getattr(kind, "name", kind)), "a registry lists NodeKind records only")
            if kind.name in self._by_name:
                raise NodeKindError(kind.name, "registered twice")
            if kind.spec in self._by_spec:
                raise NodeKindError(kind.name, f"its spec {kind.spec.__name__} is registered already")
            self._by_name[kind.name] = kind
            self._by_spec[kind.spec] = kind

    def __iter__(self) -> Iterator[NodeKind]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    @property
    def specs(self) -> tuple[type[NodeSpec], ...]:
        return tuple(self._by_spec)

    def of(self, spec: Any) -> NodeKind | None:
        """The kind of `spec` (a node spec instance), or None when no registered kind has its class."""
        for cls in type(spec).__mro__:
            kind = self._by_spec.get(cls)
            if kind is not None:
                return kind
        return None

    def named(self, name: str) -> NodeKind | None:
        return self._by_name.get(name)

    def drawing(self, name: str) -> Drawing:
        """How a node of the kind `name` is drawn; `PLAIN` for a name no kind has."""
        kind = self._by_name.get(name)
        return PLAIN if kind is None else kind.drawing
