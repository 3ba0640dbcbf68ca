"""The README's first workflow (the `tidy` function) and the same workflow as a graph run through the
test kit as the README says they behave: a person's `yes` deletes the old files and only those, nobody
answering within the day keeps them, a folder with nothing old asks nothing. Both blocks are read from
README.md at test time (the quickstart test runs the function through the `piwf` command too)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from piwf_actors.testing.kit import Piwf

REPO = Path(__file__).resolve().parents[2]
FORMS = {"function": (".piwf/workflows/tidy.py", "tidy"), "graph": (".piwf/workflows/tidy_graph.py", "tidy_graph")}


def readme_block(saved_as: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    [block] = [block for block in blocks if block.startswith(f"# {saved_as}\n")]
    return block


@pytest.fixture(params=sorted(FORMS))
def tidy(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    saved_as, attribute = FORMS[request.param]
    path = tmp_path / Path(saved_as).name
    path.write_text(readme_block(saved_as))
    return f"{path}:{attribute}"


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """The quickstart's folder: two files last changed 40 days ago, one new."""
    folder = tmp_path / "logs"
    folder.mkdir()
    forty_days_ago = time.time() - 40 * 86400
    for name in ("a.log", "b.log", "new.log"):
        (folder / name).write_text(name)
    for name in ("a.log", "b.log"):
        os.utime(folder / name, (forty_days_ago, forty_days_ago))
    return folder


def test_yes_deletes_the_old_files_and_only_those(piwf: Piwf, tidy: str, logs: Path) -> None:
    run = piwf.start(tidy, {"folder": str(logs)})
    decision = piwf.request(run, "decision", "confirm")
    assert decision.contract["title"] == "Delete 2 old files?"
    piwf.answer(decision, "yes")
    view = piwf.wait(run)
    assert (view.status, view.output) == ("done", "deleted 2 files"), piwf.describe(run)
    assert sorted(path.name for path in logs.iterdir()) == ["new.log"]


def test_nobody_answering_within_the_day_keeps_them(piwf: Piwf, tidy: str, logs: Path) -> None:
    run = piwf.start(tidy, {"folder": str(logs)})
    piwf.request(run, "decision", "confirm")
    piwf.skip(24 * 3600 + 1)  # the test kit's clock: the day passes at once
    assert piwf.wait(run).output == "kept", piwf.describe(run)
    assert sorted(path.name for path in logs.iterdir()) == ["a.log", "b.log", "new.log"]


def test_a_folder_with_nothing_old_asks_nothing(piwf: Piwf, tidy: str, logs: Path) -> None:
    run = piwf.start(tidy, {"folder": str(logs), "days": 60})
    view = piwf.wait(run)
    assert (view.status, view.output) == ("done", "nothing to tidy"), piwf.describe(run)
    assert not piwf.host.pending_interactions()
