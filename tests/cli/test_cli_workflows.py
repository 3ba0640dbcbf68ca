"""`piwf workflows` (discovery in the command's process, no host) and what `piwf start` says about a
workflow name it cannot find: close names, and first the file that failed to load."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import piwf, short_dir

from piwf_actors import HostConfig, start_host

GOOD = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow

    print("loading good.py")  # a file's own output must not spoil `piwf workflows --json`
    release = define_workflow(name="release", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
    nightly = define_workflow(name="nightly", start_at="a", nodes={"a": compute(run=lambda ctx: 2)}, edges=[])
''')
BROKEN = "from piwf_actors.workflows import define_workflow\nimport no_such_module_for_piwf\n"


@pytest.fixture
def project() -> Iterator[Path]:
    root = short_dir("pcw-")
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "good.py").write_text(GOOD)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def host_state() -> Iterator[Path]:
    state = short_dir("pcw-s-")
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        yield state
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)


def config_home(tmp_path: Path) -> dict[str, str]:
    """An empty user workflow directory, so the machine's own workflows never show up."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_workflows_lists_the_good_and_the_broken(project: Path, tmp_path: Path) -> None:
    workflows = project / ".piwf" / "workflows"
    (workflows / "broken.py").write_text(BROKEN)
    listed = piwf(None, "workflows", "--project", str(project), "--json", extra_env=config_home(tmp_path))
    assert listed.returncode == 1, listed.stderr  # a file failed to load (what did is still listed)
    view: dict[str, Any] = json.loads(listed.stdout)
    assert view["workflows"] == [
        {"name": "nightly", "file": str(workflows / "good.py"), "attribute": "nightly"},
        {"name": "release", "file": str(workflows / "good.py"), "attribute": "release"}]
    [failure] = view["failures"]
    assert failure["file"] == str(workflows / "broken.py")
    assert "ModuleNotFoundError" in failure["error"] and "\n" not in failure["error"]
    assert "loading good.py" in listed.stderr
    # From the project directory, as a table; no host is needed.
    table = piwf(None, "workflows", cwd=project, extra_env=config_home(tmp_path))
    assert table.returncode == 1, table.stderr
    for text in ("release", "nightly", "good.py", "1 file(s) failed to load", "broken.py", "no_such_module_for_piwf"):
        assert text in table.stdout, text


def test_workflows_in_an_empty_project(tmp_path: Path) -> None:
    listed = piwf(None, "workflows", "--project", str(tmp_path), extra_env=config_home(tmp_path))
    assert listed.returncode == 0 and "no workflow found in" in listed.stdout


def test_an_unknown_name_suggests_close_names(project: Path, host_state: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the in-process host's user directory
    typo = piwf(host_state, "start", "relase", "--project", str(project), extra_env=config_home(tmp_path))
    assert typo.returncode == 1
    assert typo.stderr.startswith("piwf: rejected: workflow 'relase' not found: ")
    assert "did you mean 'release'?" in typo.stderr
    unrelated = piwf(host_state, "start", "zzz", "--project", str(project))
    assert unrelated.returncode == 1 and "discovered: nightly, release" in unrelated.stderr
    attribute = piwf(host_state, "start", f"{project}/.piwf/workflows/good.py:relase")
    assert attribute.returncode == 1 and "did you mean 'release'?" in attribute.stderr


def test_an_unknown_name_leads_with_the_file_that_failed_to_load(project: Path, host_state: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    (project / ".piwf" / "workflows" / "deploy.py").write_text(BROKEN)
    result = piwf(host_state, "start", "deploy", "--project", str(project))
    assert result.returncode == 1
    detail = result.stderr.split("workflow 'deploy' not found: ", 1)[1]
    assert detail.startswith("1 workflow file(s) failed to load, first: cannot load ")
    assert "deploy.py: ModuleNotFoundError: No module named 'no_such_module_for_piwf'" in detail
