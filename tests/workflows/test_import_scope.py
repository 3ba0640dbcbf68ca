"""Imports while workflow files load with no process-wide lock (workflows/import_scope.py): loads that
need two sibling names in opposite orders both finish, a load nested in another never waits for the
one that encloses it, and a data directory beside a workflow never hides an installed package.

Every block in a workflow file waits on a release file the test creates; nothing waits on a sleep."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import gated_source, wait_for

from piwf_actors.errors import WorkflowLoadFailed
from piwf_actors.workflows import resolve
from piwf_actors.workflows.import_scope import _NAMES
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.user_code import UserCode, UserCodeLimits


def gated_sibling(name: str) -> str:
    """A sibling module that says it started importing, then waits for the test's `go` file."""
    return gated_source(name, "go") + f"VALUE = {name!r} + '@' + _os.path.basename(_here)\n"


#: A workflow file importing its two siblings in the order given.
TWO_SIBLINGS = '''
import {first}, {second}
from piwf_actors.workflows import compute, define_workflow

flow = define_workflow(name="flow", start_at="a", nodes={{"a": compute(run=lambda ctx: 1)}}, edges=[])
SEEN = (alpha.VALUE, beta.VALUE)
'''


@pytest.fixture
def two_projects(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Two directories with siblings of the same names (`alpha`, `beta`); teardown releases them all."""
    first, second = tmp_path / "one", tmp_path / "two"
    for directory in (first, second):
        directory.mkdir()
        for name in ("alpha", "beta"):
            (directory / f"{name}.py").write_text(gated_sibling(name))
    yield first, second
    for directory in (first, second):
        (directory / "go").touch()


def test_loads_that_take_two_shared_names_in_opposite_orders_both_finish(two_projects: tuple[Path, Path]) -> None:
    """One load holds `alpha` (its own) and wants `beta`, while another holds its own `beta` and wants
    `alpha`: neither may wait for the other until its limit runs out."""
    first, second = two_projects
    (first / "flow.py").write_text(textwrap.dedent(TWO_SIBLINGS.format(first="alpha", second="beta")))
    (second / "flow.py").write_text(textwrap.dedent(TWO_SIBLINGS.format(first="beta", second="alpha")))
    # Long enough that no load here runs out of time on a loaded machine, so a wait until the limit
    # (the defect) and a failure (the limit) both show as a load that did not finish.
    resolver = WorkflowResolver(user_code=UserCode(UserCodeLimits(load_timeout_s=120)))
    results: dict[str, Any] = {}

    def load(directory: Path) -> None:
        try:
            results[directory.name] = resolver.resolve(f"{directory / 'flow.py'}:flow", None)
        except Exception as exc:  # noqa: BLE001 - recorded, asserted below
            results[directory.name] = exc

    threads = [threading.Thread(target=load, args=(first,), daemon=True)]
    threads[0].start()
    wait_for((first / "alpha.started").exists, 10, "the first load to hold its alpha")
    threads.append(threading.Thread(target=load, args=(second,), daemon=True))
    threads[1].start()
    wait_for((second / "beta.started").exists, 10, "the second load to hold its beta")
    for directory in (first, second):
        (directory / "go").touch()
    deadline = time.monotonic() + 40
    for thread in threads:
        thread.join(max(0.1, deadline - time.monotonic()))
    assert set(results) == {"one", "two"}, f"loads still waiting for each other: {results}"
    for name in ("one", "two"):
        loaded = results[name]
        assert not isinstance(loaded, Exception), f"{name}: {loaded}"
    for name in ("alpha", "beta"):  # nothing left held or imported once both loads are over
        assert name not in _NAMES.held and name not in sys.modules, name


NESTED_INNER = '''
import helpers
from piwf_actors.workflows import compute, define_workflow

inner = define_workflow(name="inner", start_at="a", nodes={"a": compute(run=lambda ctx: helpers.VALUE)}, edges=[])
'''

NESTED_OUTER = '''
import os
import helpers
from piwf_actors.workflows import compute, define_workflow, resolve

HERE = os.path.dirname(os.path.abspath(__file__))
INNER = resolve(os.path.join(HERE, "..", "inner", "inner.py") + ":inner", None)
outer = define_workflow(name="outer", start_at="a", nodes={"a": compute(run=lambda ctx: helpers.VALUE)}, edges=[])
'''


def test_a_load_inside_a_load_that_needs_another_module_of_a_held_name_is_refused_at_once(tmp_path: Path) -> None:
    """The outer load holds its `helpers` while the file it loads wants another `helpers`: waiting for the
    outer load, on its own thread, would never end (a worker and the CLI have no time limit)."""
    for name in ("outer", "inner"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "helpers.py").write_text(f"VALUE = {name!r}\n")
    (tmp_path / "inner" / "inner.py").write_text(textwrap.dedent(NESTED_INNER))
    (tmp_path / "outer" / "outer.py").write_text(textwrap.dedent(NESTED_OUTER))
    outcome: list[Any] = []

    def load() -> None:
        try:
            outcome.append(resolve(f"{tmp_path / 'outer' / 'outer.py'}:outer", None))
        except WorkflowLoadFailed as exc:
            outcome.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(30)
    assert outcome, "the nested load is still waiting for the load around it"
    [error] = outcome
    assert isinstance(error, WorkflowLoadFailed), error
    message = error.one_line()
    assert "helpers" in message and str(tmp_path / "outer" / "helpers.py") in message, message
    assert "helpers" not in _NAMES.held and "helpers" not in sys.modules


def test_a_load_inside_a_load_shares_a_module_of_the_same_file(tmp_path: Path) -> None:
    """Nested loads in one directory import one `helpers`: that is no conflict."""
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "helpers.py").write_text("VALUE = 'shared'\n")
    (tmp_path / "inner" / "inner.py").write_text(textwrap.dedent(NESTED_INNER))
    (tmp_path / "inner" / "outer.py").write_text(textwrap.dedent(NESTED_OUTER))
    loaded = resolve(f"{tmp_path / 'inner' / 'outer.py'}:outer", None)
    assert loaded.workflow.nodes["a"].run(None) == "shared"


LIBRARY_USER = '''
import piwf_test_library
from piwf_actors.workflows import compute, define_workflow

uses = define_workflow(name="uses", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
VALUE = piwf_test_library.VALUE
'''


def test_a_data_directory_named_like_an_installed_package_does_not_hide_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory without `__init__.py` is a namespace portion; a regular package anywhere on the path
    wins over it, as it does when the project is on `sys.path` (a project's `yaml/` of data files must
    not turn `import yaml` into an empty namespace)."""
    site = tmp_path / "site"
    (site / "piwf_test_library").mkdir(parents=True)
    (site / "piwf_test_library" / "__init__.py").write_text("VALUE = 'the library'\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "piwf_test_library", raising=False)
    project = tmp_path / "project"
    (project / "piwf_test_library").mkdir(parents=True)
    (project / "piwf_test_library" / "notes.txt").write_text("data, not code\n")
    workflows = project / ".piwf" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "uses.py").write_text(textwrap.dedent(LIBRARY_USER))
    try:
        loaded = resolve("uses", str(project))
        assert loaded.workflow.name == "uses"
        assert sys.modules["piwf_test_library"].__file__ == str(site / "piwf_test_library" / "__init__.py")
    finally:
        sys.modules.pop("piwf_test_library", None)
