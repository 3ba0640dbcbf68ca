"""The layering rule of the house, read from the imports so the next change keeps it.

Nothing below `actors/` imports `actors/` (the packages that hold data, SQL,
the protocol, the worker and the leaves at the top level are the floors the
actors stand on), and no two modules of the package import each other, even
through a chain (`TYPE_CHECKING` and function-level imports count: a circle
hidden in a function is still a circle a reader has to untangle). The root
package is the lazy front door and is not counted as a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import piwf_actors

PACKAGE = Path(piwf_actors.__file__).parent

#: Packages below actors/: they must not import piwf_actors.actors.
BELOW = ("protocol", "store", "runner", "client", "workflows", "messages", "resources", "channels", "testing",
         "tracing")
#: Top-level modules below actors/ (leaves and plain data).
LOOSE_BELOW = ("metrics", "config", "errors", "paths", "ids", "canonical", "statuses", "logs", "results", "board",
               "run_notices", "wire_records", "actor_refs")


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


def _is_below(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 1 and (parts[1] in BELOW or (len(parts) == 2 and parts[1] in LOOSE_BELOW))


def test_nothing_below_actors_imports_actors() -> None:
    back = sorted(f"{name} -> {dep}" for name, deps in _graph().items() if _is_below(name)
                  for dep in deps if dep == "piwf_actors.actors" or dep.startswith("piwf_actors.actors."))
    assert back == [], "imports of actors/ from below it:\n" + "\n".join(back)


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
