"""discover / resolve / load_snapshot against real files in tmp_path."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from piwf_actors.errors import WorkflowLoadFailed, WorkflowNotFound
from piwf_actors.workflows import Workflow, WorkflowRef, discover, load_snapshot, resolve
from piwf_actors.workflows.discovery import workflow_dirs

FIXTURES = Path(__file__).parent / "fixtures"

USER_FLOWS = '''
from piwf_actors.workflows import compute, define_workflow

release = define_workflow(name="release", start_at="x", nodes={"x": compute(run=lambda ctx: "user")}, edges=[])
userflow = define_workflow(name="userflow", start_at="x", nodes={"x": compute(run=lambda ctx: 1)}, edges=[])
_hidden = define_workflow(name="hidden", start_at="x", nodes={"x": compute(run=lambda ctx: 1)}, edges=[])
'''


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with the fixture workflows and a user config dir with USER_FLOWS."""
    flows = tmp_path / "proj" / ".piwf" / "workflows"
    flows.mkdir(parents=True)
    for name in ("basic_flows.py", "fixture_helpers.py", "imports_child.py"):
        shutil.copy(FIXTURES / name, flows / name)
    user = tmp_path / "config" / "piwf" / "workflows"
    user.mkdir(parents=True)
    (user / "mine.py").write_text(USER_FLOWS)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "proj"


def test_discover_project_and_user(project: Path, tmp_path: Path) -> None:
    found = discover(str(project))
    flows = project / ".piwf" / "workflows"
    assert found["release"] == WorkflowRef("release", str(flows / "basic_flows.py"), "release")
    assert found["counter"].path == str(flows / "basic_flows.py")
    # imports_child.py also holds `release` (imported), but the defining file wins.
    assert found["wrapper"] == WorkflowRef("wrapper", str(flows / "imports_child.py"), "wrapper")
    user_file = tmp_path / "config" / "piwf" / "workflows" / "mine.py"
    assert found["userflow"] == WorkflowRef("userflow", str(user_file), "userflow")
    assert "hidden" not in found
    assert set(found) == {"release", "counter", "wrapper", "userflow"}


def test_project_wins_and_user_only_without_project(project: Path) -> None:
    assert resolve("release", str(project)).workflow.nodes["test"].kind == "shell"
    user_release = resolve("release", None)
    assert user_release.workflow.nodes["x"].kind == "compute"
    assert set(discover(None)) == {"release", "userflow"}


def test_default_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert workflow_dirs(None) == [tmp_path / ".config" / "piwf" / "workflows"]
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # ignored, per the XDG spec
    assert workflow_dirs(None) == [tmp_path / ".config" / "piwf" / "workflows"]
    (tmp_path / ".config" / "piwf" / "workflows").mkdir(parents=True)
    (tmp_path / ".config" / "piwf" / "workflows" / "mine.py").write_text(USER_FLOWS)
    assert set(discover(None)) == {"release", "userflow"}


def test_broken_file_is_skipped_and_reported(project: Path) -> None:
    (project / ".piwf" / "workflows" / "broken.py").write_text("raise RuntimeError('boom')\n")
    (project / ".piwf" / "workflows" / "exits.py").write_text("import sys\nsys.exit(3)\n")
    assert "release" in discover(str(project))
    with pytest.raises(WorkflowNotFound, match="2 workflow file\\(s\\) failed to load, first: cannot load .*broken.py: RuntimeError: boom"):
        resolve("nope", str(project))


def test_resolve_by_name_returns_the_executed_source(project: Path) -> None:
    resolved = resolve("release", str(project))
    path = project / ".piwf" / "workflows" / "basic_flows.py"
    assert resolved.path == str(path) and resolved.attr == "release"
    assert resolved.source == path.read_bytes()
    assert resolved.workflow.source_path == str(path) and resolved.workflow.attr == "release"


def test_resolve_file_specs(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    relative = ".piwf/workflows/basic_flows.py"
    assert resolve(f"{relative}:counter", str(project)).workflow.name == "counter"
    monkeypatch.chdir(project)
    assert resolve(f"{relative}:release", None).workflow.name == "release"
    single = project / "single.py"
    single.write_text(USER_FLOWS.replace("release = ", "_release = ").replace("userflow = ", "_u = ")
                      .replace("_hidden", "only"))
    assert resolve("single.py", str(project)).workflow.name == "hidden"
    with pytest.raises(WorkflowNotFound, match="defines 2 workflows"):
        resolve(relative, str(project))
    with pytest.raises(WorkflowNotFound, match="has no workflow attribute 'nope'"):
        resolve(f"{relative}:nope", str(project))
    with pytest.raises(WorkflowNotFound, match="no file"):
        resolve("missing.py:flow", str(project))
    (project / "bad.py").write_text("def broken(:\n")
    with pytest.raises(WorkflowLoadFailed, match="cannot load .*bad.py: SyntaxError"):
        resolve("bad.py:flow", str(project))


def test_resolve_module_attr_with_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "common.py").write_text("TIMEOUT = 12\n")
    (package / "flows.py").write_text(
        "from .common import TIMEOUT\n"
        "from piwf_actors.workflows import compute, define_workflow\n"
        "flow = define_workflow(name='pkgflow', start_at='a',"
        " nodes={'a': compute(run=lambda ctx: 1, timeout_s=TIMEOUT)}, edges=[])\n"
    )
    resolved = resolve("mypkg.flows:flow", str(tmp_path))
    assert resolved.path == str(package / "flows.py")
    assert resolved.workflow.nodes["a"].timeout_s == 12.0
    again = load_snapshot(resolved.source, resolved.path, "flow", resolved.workflow.digest, str(tmp_path))
    assert again.digest == resolved.workflow.digest
    with pytest.raises(WorkflowNotFound, match="not an importable Python source module|cannot import"):
        resolve("no_such_module_xyz:flow", str(tmp_path))
    with pytest.raises(WorkflowNotFound, match="expected module:attr"):
        resolve("mypkg.flows:", str(tmp_path))
    assert "mypkg.flows" not in sys.modules and "mypkg.common" not in sys.modules
    assert str(tmp_path) not in sys.path


def test_unknown_name(project: Path) -> None:
    with pytest.raises(WorkflowNotFound, match="workflow 'ghost' not found"):
        resolve("ghost", str(project))


def test_snapshot_loads_are_fresh_modules() -> None:
    path = FIXTURES / "basic_flows.py"
    source = path.read_bytes()
    digest = resolve(f"{path}:counter", None).workflow.digest
    modules_before = set(sys.modules)
    first = load_snapshot(source, str(path), "counter", digest, None)
    second = load_snapshot(source, str(path), "counter", digest, None)
    assert isinstance(first, Workflow) and first.attr == "counter" and first.source_path == str(path)
    bump_first, bump_second = first.nodes["count"].run, second.nodes["count"].run
    assert bump_first(None) == {"loads": 2}
    assert bump_first(None) == {"loads": 3}
    assert bump_second(None) == {"loads": 2}  # its own LOADS, untouched by the first module
    assert bump_first.__globals__ is not bump_second.__globals__
    # Neither the workflow module nor its sibling stays cached, and sys.path is restored.
    assert set(sys.modules) - modules_before == set()
    assert str(FIXTURES) not in sys.path


def test_snapshot_uses_the_bytes_not_the_file(project: Path) -> None:
    resolved = resolve("release", str(project))
    Path(resolved.path).write_text("raise SystemExit('edited')\n")
    loaded = load_snapshot(resolved.source, resolved.path, "release", resolved.workflow.digest, str(project))
    assert loaded.digest == resolved.workflow.digest and loaded.name == "release"


def test_snapshot_refusals(project: Path) -> None:
    resolved = resolve("release", str(project))
    path, source, digest = resolved.path, resolved.source, resolved.workflow.digest
    with pytest.raises(WorkflowLoadFailed, match="has digest .* expected 000000000000") as caught:
        load_snapshot(source, path, "release", "0" * 64, str(project))
    assert "\n" not in str(caught.value)
    with pytest.raises(WorkflowLoadFailed, match="attribute is missing"):
        load_snapshot(source, path, "nope", digest, str(project))
    with pytest.raises(WorkflowLoadFailed, match="attribute is a int, not a Workflow"):
        load_snapshot(source, path, "LOADS", digest, str(project))
    with pytest.raises(WorkflowLoadFailed, match="cannot load .*: ZeroDivisionError: division by zero"):
        load_snapshot(b"x = 1 / 0\n", path, "release", digest, str(project))
    with pytest.raises(WorkflowLoadFailed, match="SyntaxError"):
        load_snapshot(b"def (\n", path, "release", digest, str(project))


def test_snapshot_detects_changed_structure_from_a_sibling(project: Path) -> None:
    flows = project / ".piwf" / "workflows"
    (flows / "limits.py").write_text("TIMEOUT = 5\n")
    (flows / "timed.py").write_text(
        "from limits import TIMEOUT\n"
        "from piwf_actors.workflows import shell, define_workflow\n"
        "timed = define_workflow(name='timed', start_at='s', nodes={'s': shell('true', timeout_s=TIMEOUT)}, edges=[])\n"
    )
    resolved = resolve("timed", str(project))
    (flows / "limits.py").write_text("TIMEOUT = 6\n")
    with pytest.raises(WorkflowLoadFailed, match="digest"):
        load_snapshot(resolved.source, resolved.path, "timed", resolved.workflow.digest, str(project))
