"""docs/functions.md's example runs as the page shows it: its Python block is written to a file and
started on a real host (the test kit), answered, left to its deadline, and drawn."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from piwf_actors.testing.kit import Piwf
from piwf_actors.workflows.discovery import resolve
from piwf_actors.workflows.graph import build_graph

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "functions.md"


@pytest.fixture
def release_file(tmp_path: Path) -> str:
    [block] = [block for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
               if block.startswith("# functions.md: release.py\n")]
    path = tmp_path / "release.py"
    path.write_text(block)
    return f"{path}:release"


def test_the_pages_example_deploys_when_answered_yes(piwf: Piwf, release_file: str) -> None:
    run = piwf.start(release_file, {"release": {"service": "api"}})
    decision = piwf.request(run, "decision", "approve")
    piwf.answer(decision, "yes")
    view = piwf.wait(run)
    assert view.output == {"deployed": True, "url": "https://staging.example.com/api",
                           "log": "tests of api pass"}, piwf.describe(run)
    assert [node.node_id for node in view.nodes] == ["run_tests", "approve", "deploy", "return"]


def test_the_pages_example_takes_its_default_at_the_deadline_and_stops_when_told(piwf: Piwf,
                                                                               release_file: str) -> None:
    late = piwf.start(release_file, {"release": {"service": "web", "env": "prod"}})
    piwf.wait_parked(late, "waiting")
    piwf.skip(3601)
    assert piwf.wait(late).output["url"] == "https://prod.example.com/web"
    stopped = piwf.start(release_file, {"release": {"service": "db"}})
    piwf.answer(stopped, "no", input={"why": "a freeze"})
    assert piwf.wait(stopped).output == {"deployed": False, "why": "a freeze"}


def test_the_pages_example_draws_its_steps(release_file: str) -> None:
    path = release_file.rsplit(":", 1)[0]
    graph = build_graph(resolve(release_file, str(Path(path).parent)).workflow)
    assert graph.function and [node.node_id for node in graph.nodes] == ["run_tests", "deploy"]
