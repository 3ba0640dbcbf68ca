"""docs/resource-managers.md shows the resource manager of examples/resources/ as it is: its Python block
is the manager file's code and its TOML block the resource file, so what `make demo` and the CLI tests
run (`piwf resource apply -f examples/resources/docs-site.toml`) is what the page shows."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "resource-managers.md"
EXAMPLE = REPO / "examples" / "resources"


def _code(source: str) -> str:
    """The module's code without its docstring and comments, as the parser sees it."""
    module = ast.parse(source)
    body = module.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def test_the_pages_manager_is_the_example_manager_file() -> None:
    [block] = [block for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
               if "define_resource_manager(" in block]
    assert _code(block) == _code((EXAMPLE / ".piwf" / "resource-managers" / "sites.py").read_text())


def test_the_pages_resource_is_the_example_resource_file() -> None:
    [block] = re.findall(r"```toml\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert block.startswith("# examples/resources/docs-site.toml\n")
    assert tomllib.loads(block) == tomllib.loads((EXAMPLE / "docs-site.toml").read_text())
