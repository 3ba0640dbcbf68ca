"""Drawing a run executes nothing: `piwf graph RUN` (on a live host and offline, on a stopped host's
SQLite file) and piwf-top's run tree draw from the graph the host stored when the run started, never by
importing the run's workflow snapshot.

The workflow file here writes a marker file when it is imported by a process whose environment names one
(`$GRAPH_MARKER`, plus `imported.marker` in its current directory): only the drawing commands get that
variable, so a marker that appears means a drawing ran the file. The pictures are compared whole with
what the workflow object draws in this process (`build_graph` on the definition, with the run on it).
"""

from __future__ import annotations

import re
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import piwf, run_view, short_dir, wait_until
from rich.console import Console
from testsupport import sqlite_only

from piwf_actors.client import Client
from piwf_actors.top.model import Gatherer
from piwf_actors.top.tree import run_tree
from piwf_actors.workflows.discovery import resolve
from piwf_actors.workflows.graph import build_graph
from piwf_actors.workflows.graph_render import RENDERERS
from piwf_actors.workflows.graph_run import overlay

FLOW = textwrap.dedent('''
    import os
    import pathlib

    from piwf_actors.workflows import checkpoint, compute, define_workflow, edge, map_workflow, switch

    # Import-time code: what a drawing must never run.
    if os.environ.get("GRAPH_MARKER"):
        pathlib.Path(os.environ["GRAPH_MARKER"]).write_text(f"imported by {os.getpid()}")
        pathlib.Path("imported.marker").write_text(f"imported by {os.getpid()}")

    leaf = define_workflow(name="leaf", start_at="x", nodes={"x": compute(run=lambda ctx: {"x": ctx.input})},
                           edges=[])

    marked = define_workflow(name="marked", start_at="ask", nodes={
        "ask": checkpoint(prompt="go on?"),
        "fan": map_workflow(leaf, items=lambda ctx: [1, 2]),
        "after": compute(run=lambda ctx: {"done": True}),
        "other": compute(run=lambda ctx: {"other": True}),
    }, edges=[switch("ask", on="$.go", cases={"true": "fan"}, default="other"), edge("fan", "after")])
''')


@pytest.fixture
def project() -> Iterator[Path]:
    path = short_dir("pgm-")
    (path / ".piwf" / "workflows").mkdir(parents=True)
    (path / ".piwf" / "workflows" / "marked.py").write_text(FLOW)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def elsewhere() -> Iterator[Path]:
    path = short_dir("pgm-else-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _expected(project: Path, view: dict[str, Any], form: str) -> str:
    """What the workflow object draws with the run on it (loaded here, where no marker is asked for)."""
    workflow = resolve("marked", str(project)).workflow
    return RENDERERS[form](build_graph(workflow), overlay(view, time.time()))


def _markers(elsewhere: Path) -> list[Path]:
    return [path for path in (elsewhere / "marker", elsewhere / "imported.marker") if path.exists()]


def _draw(state: Path, run_id: str, elsewhere: Path, form: str) -> tuple[str, str]:
    result = piwf(state, "graph", run_id, "--format", form, cwd=elsewhere,
                  extra_env={"GRAPH_MARKER": str(elsewhere / "marker")})
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


def test_piwf_graph_of_a_run_never_imports_its_snapshot(hosts: Any, state_dir: Path, project: Path,
                                                       elsewhere: Path) -> None:
    host = hosts(state_dir, max_workers=2)
    run_id = host.start_run("marked", project_path=str(project)).run_id
    view = wait_until(lambda: (v := run_view(state_dir, run_id))["waiting"] and v, 30, "the run to wait")
    for form in RENDERERS:
        stdout, _ = _draw(state_dir, run_id, elsewhere, form)
        assert not _markers(elsewhere), f"piwf graph --format {form} ran the workflow file"
        assert stdout == _expected(project, view, form), form


@sqlite_only("the offline drawing reads a stopped host's SQLite file; the test above draws the same runs from a live host on either engine")
def test_piwf_graph_of_a_stopped_hosts_run_never_imports_its_snapshot(hosts: Any, state_dir: Path, project: Path,
                                                                     elsewhere: Path) -> None:
    """A stopped host's SQLite file (read-only): the same pictures, still nothing imported."""
    host = hosts(state_dir, max_workers=2)
    run_id = host.start_run("marked", project_path=str(project)).run_id
    view = wait_until(lambda: (v := run_view(state_dir, run_id))["waiting"] and v, 30, "the run to wait")
    host.stop("drawn offline next")
    for form in RENDERERS:
        stdout, stderr = _draw(state_dir, run_id, elsewhere, form)
        assert stderr.startswith("piwf: no host is running; reading "), stderr
        assert not _markers(elsewhere), f"offline piwf graph --format {form} ran the workflow file"
        assert stdout == _expected(project, view, form), form


def test_piwf_top_draws_the_stored_graph_with_every_node(hosts: Any, state_dir: Path, project: Path,
                                                        elsewhere: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = hosts(state_dir, max_workers=2)
    run_id = host.start_run("marked", project_path=str(project)).run_id
    wait_until(lambda: run_view(state_dir, run_id)["waiting"], 30, "the run to wait")
    monkeypatch.setenv("GRAPH_MARKER", str(elsewhere / "marker"))
    monkeypatch.chdir(elsewhere)
    with Client(state_dir) as client:
        snapshot = Gatherer(client).gather(run_id)
    lines, here = run_tree(snapshot.detail, snapshot.taken_at, snapshot.detail_graph)
    console = Console(record=True, width=200, color_system=None)
    for line in lines:
        console.print(line, soft_wrap=True)
    text = console.export_text().splitlines()
    assert not _markers(elsewhere)
    # Every node of the definition in its order, with its kind — those not reached too.
    nodes = [m.group(1) for row in text if (m := re.match(r"[├└]── (\w+)  ", row))]
    assert nodes == ["ask", "fan", "after", "other"], text
    assert text[0] == "├── ask  checkpoint   ⏳ waiting   ◀ here", text
    assert "├── fan  map_workflow   · not reached" in text and "│   └── ⇉ per item: leaf" in text, text
    assert "└── other  compute   · not reached" in text, text
    assert here == 0


def test_piwf_graph_of_a_run_named_as_tables_show_it_runs_no_code_of_the_project_it_is_drawn_in(
        hosts: Any, state_dir: Path, project: Path) -> None:
    """`piwf list` shows ids by their end (`…c3e9hbn6w0ab`), which no workflow name can be: pasted into
    `piwf graph` in the project's own directory it names the run alone, and drawing it loads none of
    the project's workflow files (it used to look for a workflow of that name first, importing them)."""
    host = hosts(state_dir, max_workers=2)
    run_id = host.start_run("marked", project_path=str(project)).run_id
    view = wait_until(lambda: (v := run_view(state_dir, run_id))["waiting"] and v, 30, "the run to wait")
    marker = project / "marker"
    for shown in ("…" + run_id[-12:], "..." + run_id[-12:]):
        result = piwf(state_dir, "graph", shown, "--format", "mermaid", cwd=project,
                      extra_env={"GRAPH_MARKER": str(marker)})
        assert result.returncode == 0, result.stderr
        assert not marker.exists() and not (project / "imported.marker").exists(), \
            f"piwf graph {shown} in the project's directory ran its workflow files"
        assert result.stdout == _expected(project, view, "mermaid"), shown
