"""The layering rule of the house, read from the imports so the next change keeps it.

The floors, from the bottom: the packages that hold data, SQL, the protocol,
the worker and the channels, with the leaves at the top level (`BELOW`,
`LOOSE_BELOW`); `actors/`; `embedding` (the handle an application holds);
`testing/` (the test kit runs a real host through `embedding`, and the fake
Bot API's program lives beside it). Nothing imports a floor above its own,
directly or through a chain: a module's floor is judged by everything it
imports, so a leaf that imports a module that imports `actors/` stands on
`actors/` too. No two modules of the package import each other, even through
a chain (`TYPE_CHECKING` and function-level imports count: a circle hidden
in a function is still a circle a reader has to untangle). The root package
is the lazy front door and is not counted as a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import piwf_actors

PACKAGE = Path(piwf_actors.__file__).parent

#: Packages below actors/: they must not import piwf_actors.actors.
BELOW = ("protocol", "store", "worker", "client", "workflows", "wire", "resources", "channels", "tracing",
         "durable")
#: Top-level modules below actors/ (leaves and plain data).
LOOSE_BELOW = ("metrics", "config", "errors", "paths", "ids", "canonical", "statuses", "logs", "results", "board",
               "run_notices", "actor_refs")


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = {_module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
                named = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in files]
                found.update(named or [base])
        graph[name] = {dep for dep in found if dep in files and dep not in (name, "piwf_actors")}
    return graph


#: The floors above those, from the bottom: a module of one imports nothing of a floor above it.
ABOVE = ("actors", "embedding", "testing")


def _is_below(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 1 and (parts[1] in BELOW or (len(parts) == 2 and parts[1] in LOOSE_BELOW))


def _floor(name: str) -> int | None:
    """0 below actors/, then 1 + the index in ABOVE; None for a module no floor rule places (cli/, top/ …)."""
    if _is_below(name):
        return 0
    parts = name.split(".")
    return ABOVE.index(parts[1]) + 1 if len(parts) > 1 and parts[1] in ABOVE else None


def _chain(graph: dict[str, set[str]], start: str, wanted: set[str]) -> list[str] | None:
    """The shortest import chain from `start` to a module of `wanted` (start included), or None."""
    came_from: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for dep in sorted(graph[node]):
                if dep in came_from:
                    continue
                came_from[dep] = node
                if dep in wanted:
                    chain: list[str] = [dep]
                    while (step := came_from[chain[-1]]) is not None:
                        chain.append(step)
                    return chain[::-1]
                following.append(dep)
        frontier = following
    return None


def _climbs(graph: dict[str, set[str]]) -> list[str]:
    """Every module that reaches a floor above its own, with the chain that gets there."""
    floors = {name: _floor(name) for name in graph}
    found = []
    for name in sorted(graph):
        floor = floors[name]
        if floor is None:
            continue
        higher = {other for other, other_floor in floors.items() if other_floor is not None and other_floor > floor}
        chain = _chain(graph, name, higher)
        if chain is not None:
            found.append(" -> ".join(chain))
    return found


def test_nothing_imports_a_floor_above_its_own_even_through_a_chain() -> None:
    climbs = _climbs(_graph())
    assert climbs == [], "imports of a higher floor:\n" + "\n".join(climbs)


def test_no_import_circles() -> None:
    graph = _graph()
    circles: set[tuple[str, ...]] = set()
    # Tarjan's strongly connected components: every component of more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(graph[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.add(tuple(sorted(component)))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in sorted(circles))


def test_the_rule_sees_a_back_arrow_and_a_circle(tmp_path: Path) -> None:
    """The check itself can fail: a fake package with one back-arrow and one circle is caught."""
    fake = tmp_path / "piwf_actors"
    (fake / "actors").mkdir(parents=True)
    (fake / "store").mkdir()
    for init in (fake / "__init__.py", fake / "actors" / "__init__.py", fake / "store" / "__init__.py"):
        init.write_text("")
    (fake / "actors" / "writer.py").write_text("from piwf_actors.store import queries\n")
    (fake / "store" / "queries.py").write_text("from piwf_actors.actors.writer import x\n")
    graph = _graph(fake)
    assert graph["piwf_actors.store.queries"] == {"piwf_actors.actors.writer"}
    assert graph["piwf_actors.actors.writer"] == {"piwf_actors.store.queries"}
    assert _is_below("piwf_actors.store.queries") and not _is_below("piwf_actors.actors.writer")
    assert _climbs(graph) == ["piwf_actors.store.queries -> piwf_actors.actors.writer"]


def test_a_floor_is_judged_by_what_it_imports_through_a_chain(tmp_path: Path) -> None:
    """A leaf that imports a module that imports actors/ stands on actors/; a channel module that
    reaches the test kit (which stands on embedding) climbs two floors."""
    fake = tmp_path / "piwf_actors"
    for package in ("actors", "store", "channels", "testing", "cli"):
        (fake / package).mkdir(parents=True)
        (fake / package / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "clock.py").write_text("from piwf_actors.actors import ticker\n")  # placed on no floor itself
    (fake / "config.py").write_text("from piwf_actors import clock\n")
    (fake / "actors" / "ticker.py").write_text("")
    (fake / "embedding.py").write_text("from piwf_actors.actors import ticker\n")
    (fake / "testing" / "kit.py").write_text("from piwf_actors import embedding\n")
    (fake / "channels" / "entry.py").write_text("from piwf_actors.store import helper\n")
    (fake / "store" / "helper.py").write_text("def main():\n    from piwf_actors.testing import kit\n")
    (fake / "cli" / "main.py").write_text("from piwf_actors.testing import kit\n")  # no floor: not judged
    assert _climbs(_graph(fake)) == [
        "piwf_actors.channels.entry -> piwf_actors.store.helper -> piwf_actors.testing.kit",
        "piwf_actors.config -> piwf_actors.clock -> piwf_actors.actors.ticker",
        "piwf_actors.store.helper -> piwf_actors.testing.kit",
    ]
