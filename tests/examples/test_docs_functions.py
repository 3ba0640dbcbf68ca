"""docs/functions.md's examples run as the page shows them: each Python block is written to a file and
started on a real host (the test kit) — the `ship` workflow answered, left to its deadline, and drawn;
the `shell` example on a folder that exists and one that does not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from piwf_actors.testing.kit import Piwf
from piwf_actors.workflows.discovery import resolve
from piwf_actors.workflows.graph import build_graph

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "functions.md"


def page_file(tmp_path: Path, name: str) -> Path:
    """The page's block that starts `# functions.md: NAME`, written to tmp_path/NAME."""
    [block] = [block for block in re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
               if block.startswith(f"# functions.md: {name}\n")]
    path = tmp_path / name
    path.write_text(block)
    return path


@pytest.fixture
def release_file(tmp_path: Path) -> str:
    return f"{page_file(tmp_path, 'release.py')}:ship"


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


def test_the_pages_shell_example_lists_a_folder_and_reads_the_stderr_of_a_failed_command(
        piwf: Piwf, tmp_path: Path) -> None:
    build = f"{page_file(tmp_path, 'build.py')}:build"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    listed = piwf.wait(piwf.start(build, {"folder": str(folder)}))
    assert listed.output == {"ok": True, "files": ["a.txt"]}, piwf.describe(listed.run_id)
    missing = piwf.wait(piwf.start(build, {"folder": str(tmp_path / "nowhere")}))
    assert missing.status == "done" and missing.output["ok"] is False, piwf.describe(missing.run_id)
    assert "No such file or directory" in missing.output["why"] and missing.output["exit_code"] == 2
    assert [node.node_id for node in missing.nodes] == ["list", "return"]
