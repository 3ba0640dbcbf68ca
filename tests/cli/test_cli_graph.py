"""`piwf graph` as a real command: a workflow drawn without a host, and runs of a real host drawn on the
definition stored with them — where the run is, what each node did, children and waits.

The workflows live in a temp project's `.piwf/workflows/` (docs/workflows.md's release example and a few flows
written here) and are started by name from there; every wait polls the host with a deadline.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import REPO, ok_json, piwf, run_view, short_dir, wait_until
from testsupport import execute, hosts_on_postgres, rows

from piwf_actors import HostHandle
from piwf_actors.client import Client
from piwf_actors.workflows.graph_data import graph_of
from piwf_actors.workflows.graph_render import render_mermaid

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import (
        compute, define_workflow, edge, include_workflow, map_workflow, switch, wait_message,
    )

    listener = define_workflow(name="listener", start_at="w", nodes={"w": wait_message("go", timeout_s=600)},
                               edges=[])

    check = define_workflow(name="check", start_at="score", nodes={
        "score": compute(run=lambda ctx: {"ok": True}),
        "good": compute(run=lambda ctx: {"good": 1}),
        "bad": compute(run=lambda ctx: {"bad": 1}),
    }, edges=[switch("score", on="$.ok", cases={"true": "good"}, default="bad")])

    # An include with two exits, then a fan-out of three children that each wait for a message.
    fleet = define_workflow(name="fleet", start_at="review", nodes={
        "review": include_workflow(check),
        "waves": map_workflow(listener, items=lambda ctx: [1, 2, 3], max_parallel=2),
        "skipped": compute(run=lambda ctx: {"skipped": True}),
    }, edges=[edge("review.good", "waves"), edge("review.bad", "skipped")])

    # A workflow whose name looks like a run id.
    run_checks = define_workflow(name="run_checks", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
''')


@pytest.fixture(scope="module")
def project() -> Iterator[Path]:
    path = short_dir("pgr-")
    workflows = path / ".piwf" / "workflows"
    workflows.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "workflows" / "release.py", workflows / "release.py")
    (workflows / "flows.py").write_text(FLOWS)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host(hosts: Callable[..., HostHandle], state_dir: Path) -> HostHandle:
    return hosts(state_dir, max_workers=3)


def graph(state: Path | None, project: Path, *args: str, code: int = 0) -> str:
    result = piwf(state, "graph", *args, cwd=project, extra_env={"XDG_CONFIG_HOME": str(project / "no-config")})
    assert result.returncode == code, (args, result.stdout, result.stderr)
    return result.stdout if code == 0 else result.stderr


def start(state: Path, project: Path, workflow: str, *args: str) -> str:
    return str(ok_json(piwf(state, "start", workflow, *args, "--json", cwd=project))["run_id"])


def parked(state: Path, run_id: str, ready: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        view = run_view(state, run_id)
        return view if view["status"] == "parked" and ready(view) else None

    return wait_until(check, 30, f"run {run_id} to park")


def test_a_workflow_is_drawn_without_a_host(project: Path) -> None:
    text = graph(None, project, "fleet")
    assert text.splitlines() == [
        "workflow fleet  start review/score",
        "├── include review: check  (exits review.good, review.bad)",
        "│   ├── review/score  compute",
        "│   │   ├── $.ok = true → review/good",
        "│   │   └── else → review/bad",
        "│   ├── review/good  compute",
        "│   │   └── → waves  (exit review.good)",
        "│   └── review/bad  compute",
        "│       └── → skipped  (exit review.bad)",
        "├── waves  map_workflow: listener per item · max_parallel 2",
        "│   ├── ⇉ per item: listener",
        "│   └── → end",
        "└── skipped  compute",
        "    └── → end",
    ]
    mermaid = graph(None, project, "fleet", "--format", "mermaid")
    assert 'subgraph g1["include review: check  (exits review.good, review.bad)"]' in mermaid
    assert 'n2 -->|"review.good"| n4' in mermaid and 'n1 -->|"true"| n2' in mermaid
    assert 'c1("workflow listener")' in mermaid and 'n4 -.->|"per item"| c1' in mermaid
    dot = graph(None, project, ".piwf/workflows/flows.py:fleet", "--format", "dot")  # a file spec
    assert dot.startswith('digraph "fleet" {') and "subgraph cluster_g1 {" in dot
    assert 'n2 -> n4 [label="review.good"];' in dot
    empty = short_dir("pgr-e-")  # no host there, and no state database
    try:
        assert graph(empty, project, "run_checks").splitlines() == ["workflow run_checks  start a", "└── a  compute",
                                                                    "    └── → end"]
        assert "no piwf host is listening" in graph(empty, project, "run_01nothing", code=3)
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    document = json.loads(graph(None, project, "release", "--json"))
    assert [node["node_id"] for node in document["graph"]["nodes"]] == ["test", "approve", "ship", "stopped", "fix"]
    assert document["run"] is None and document["picture"].startswith("workflow release")


def test_a_run_parked_on_a_decision_shows_where_it_is(host: HostHandle, state_dir: Path, project: Path) -> None:
    run_id = start(state_dir, project, "release", "version=2.1")
    parked(state_dir, run_id, lambda view: bool(view["waiting"]))
    lines = graph(state_dir, project, run_id[:20]).splitlines()  # a prefix, as everywhere
    assert lines[0] == f"run {run_id}  release  parked (waiting)"
    assert lines[1] == "├── test  shell: sh -c 'echo 12 passed'   ✓ succeeded  exit 0"
    approve = next(line for line in lines if "approve  human_decision" in line)
    assert approve.endswith("◀ here"), approve
    wait = lines[lines.index(approve) + 1]
    assert re.fullmatch(r"│   ├── ⏳ waiting for an answer \(decision, deadline in (59m\d\ds|1h00m)\)", wait), wait
    assert "├── ship  compute   · not reached" in lines

    document = json.loads(graph(state_dir, project, run_id, "--json"))
    assert document["run"]["current"] == "approve"
    assert document["run"]["nodes"]["test"]["status"] == "succeeded"
    mermaid = graph(state_dir, project, run_id, "--format", "mermaid")
    assert "    style n2 stroke-width:4px" in mermaid and "    class n1 succeeded" in mermaid
    assert "    class n2 waiting" in mermaid

    # The file changes under the run: the picture stays the run's own (its stored snapshot).
    release = project / ".piwf" / "workflows" / "release.py"
    original = release.read_text()
    try:
        release.write_text(original.replace('"stopped"', '"halted"'))
        changed = graph(state_dir, project, run_id)
        assert "stopped  compute" in changed and "halted" not in changed
        assert "halted  compute" in graph(None, project, "release")  # the workflow itself is the file's
    finally:
        release.write_text(original)


def test_a_fan_out_shows_its_children_by_status_and_their_waits(
        host: HostHandle, state_dir: Path, project: Path) -> None:
    run_id = start(state_dir, project, "fleet")
    parked(state_dir, run_id, lambda view: sum(
        child["status"] == "parked" for child in (view.get("children") or {}).get("runs", [])) == 2)
    lines = graph(state_dir, project, run_id).splitlines()
    assert any(line.startswith("│   ├── review/score  compute   ✓ succeeded  {\"ok\":true}") for line in lines), lines
    assert "│   └── review/bad  compute   · not reached" in lines
    waves = next(line for line in lines if line.startswith("├── waves  map_workflow"))
    assert waves.endswith("◀ here"), waves
    below = lines[lines.index(waves) + 1:]
    assert below[0] == "│   ├── ⏳ waiting for children: 3 of 3 open"
    assert below[1] == "│   ├── children: queued 1 · parked 2"
    children = [line for line in below if "  listener  " in line]
    assert len(children) == 3 and all(re.search(r"#[0-2] run_\w+  listener  (parked|queued)$", c) for c in children)

    child = next(c for c in run_view(state_dir, run_id)["children"]["runs"] if c["status"] == "parked")
    child_lines = graph(state_dir, project, child["run_id"]).splitlines()
    assert child_lines[1].startswith("├── w  wait_message: topic go · timeout 10m00s") or \
        child_lines[1].startswith("└── w  wait_message: topic go · timeout 10m00s"), child_lines
    assert re.search(r"⏳ waiting for a message on 'go' \(timeout in \d+m\d\ds\)", "\n".join(child_lines)), child_lines


GATED = textwrap.dedent('''
    from _steps import PROMPT  # a sibling module: not part of the run's stored snapshot
    from piwf_actors.workflows import checkpoint, define_workflow

    gated = define_workflow(name="gated", start_at="ask", nodes={"ask": checkpoint(prompt=PROMPT)}, edges=[])
''')


def test_a_run_is_drawn_as_it_started_whatever_its_imports_do_since(host: HostHandle, state_dir: Path) -> None:
    """The picture is the graph the host stored when the run started: a module the file imports that
    changes, or goes, changes nothing (nothing is loaded to draw). A run stored without a graph (before
    hosts kept one) is drawn from run.get alone, and says so in one line; a restart of its same code
    gets a graph."""
    project = short_dir("pgr-g-")
    try:
        (project / ".piwf" / "workflows").mkdir(parents=True)
        (project / ".piwf" / "workflows" / "gated.py").write_text(GATED)
        steps = project / ".piwf" / "workflows" / "_steps.py"
        steps.write_text('PROMPT = "first?"\n')
        run_id = start(state_dir, project, "gated")
        parked(state_dir, run_id, lambda view: bool(view["waiting"]))
        assert "ask  checkpoint: first?   ⏳ waiting   ◀ here" in graph(state_dir, project, run_id)

        steps.write_text('PROMPT = "second?"\n')
        changed = piwf(state_dir, "graph", run_id, cwd=project)
        assert changed.returncode == 0 and "ask  checkpoint: first?   ⏳ waiting   ◀ here" in changed.stdout
        assert changed.stderr == ""
        steps.unlink()
        gone = piwf(state_dir, "graph", run_id, cwd=project)
        assert (gone.returncode, gone.stderr) == (0, "") and "ask  checkpoint: first?" in gone.stdout

        # As a run stored before schema v16: no graph.
        execute(state_dir, "UPDATE run SET graph_sha256 = NULL WHERE run_id = ?", (run_id,))
        older = piwf(state_dir, "graph", run_id, cwd=project)
        assert older.returncode == 0, older.stderr
        assert older.stderr == (f"piwf: run {run_id} has no graph to draw (it started before its host stored run "
                                "graphs); showing the nodes it reached\n")
        assert older.stdout.splitlines() == [f"run {run_id}  gated  parked (waiting)",
                                             "└── ask   ⏳ waiting   ◀ here",
                                             "    └── ⏳ waiting for an answer (checkpoint, no deadline)"]
        steps.write_text('PROMPT = "first?"\n')  # the same code again (a changed import fails a same-code run)
        with Client(state_dir) as client:
            assert client.request("run.cancel", run_id=run_id).ok
            view = wait_until(lambda: (v := client.get(run_id))["status"] == "cancelled" and v, 30, "the cancel")
            restarted = client.request("run.restart", {"same_code": True}, run_id=run_id,
                                       expected_revision=view["revision"]).receipt["run_id"]
        parked(state_dir, restarted, lambda view: bool(view["waiting"]))
        assert "ask  checkpoint: first?   ⏳ waiting   ◀ here" in graph(state_dir, project, restarted)
        assert rows(state_dir, "SELECT graph_sha256 FROM run WHERE run_id = ?", (restarted,))[0]["graph_sha256"]
    finally:
        shutil.rmtree(project, ignore_errors=True)


def test_run_arguments_errors_and_a_stopped_host(host: HostHandle, state_dir: Path, project: Path) -> None:
    assert graph(state_dir, project, "run_nope", code=1).startswith("piwf: no run matches 'run_nope' (run ids look like")
    assert "run_checks  start a" in graph(state_dir, project, "run_checks")  # no such run: the workflow
    assert "workflow 'nope' not found" in graph(state_dir, project, "nope", code=1)
    run_id = start(state_dir, project, "release", "version=1")
    parked(state_dir, run_id, lambda view: bool(view["waiting"]))
    # A run id as other commands take one: a prefix without run_, the end piwf-top shows, a long bare end.
    for written in (run_id[4:20], "…" + run_id[-19:], "..." + run_id[-6:], run_id[-12:]):
        assert graph(state_dir, project, written).splitlines()[0] == f"run {run_id}  release  parked (waiting)"
    assert "workflow 'nope' not found" in graph(state_dir, project, "nope", code=1)  # still, with a run there
    dot = graph(state_dir, project, run_id, "--format", "dot")
    assert re.search(r'n2 \[shape=hexagon, label="approve\\n.*", fillcolor="#fef9c3", color="#ca8a04", '
                     r'style="filled", penwidth=3\];', dot), dot

    # A snapshot over 64 KiB does not travel inline: run.source names it, content.read reads it.
    bulky = project / "bulky.py"
    bulky.write_text("# " + "x" * 70_000 + "\nfrom piwf_actors.workflows import compute, define_workflow\n"
                     'bulky = define_workflow(name="bulky", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, '
                     "edges=[])\n")
    big = start(state_dir, project, str(bulky))
    with Client(state_dir) as client:
        receipt = client.request("run.source", run_id=big).receipt
    assert "source" not in receipt and receipt["source_bytes"] == len(bulky.read_bytes())
    assert receipt["source_sha256"] == hashlib.sha256(bulky.read_bytes()).hexdigest()
    assert receipt["workflow_path"] == str(bulky) and receipt["workflow_attr"] == "bulky"
    assert graph(state_dir, project, big).splitlines()[1].startswith("└── a  compute")

    # A stopped host's database answers too (read-only), snapshot included: the state directory's
    # SQLite file, which a host on PostgreSQL does not have.
    if hosts_on_postgres():
        return
    host.stop("drawn offline next")
    offline = piwf(state_dir, "graph", run_id, cwd=project)
    assert offline.returncode == 0, offline.stderr
    assert offline.stderr.startswith("piwf: no host is running; reading ")
    assert "approve  human_decision: operator · ship | stop | fix" in offline.stdout and "◀ here" in offline.stdout


def test_the_readme_picture_is_what_piwf_graph_prints() -> None:
    readme = (REPO / "docs" / "cli.md").read_text()
    section = readme[readme.index("## The `piwf` command\n"):readme.index("\n## piwf-top")]
    blocks = re.findall(r"```mermaid\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    command = re.search(r"`piwf graph (\S+)\s+--format mermaid`", section)
    assert command and command.group(1) == "examples/workflows/release.py:release"
    printed = piwf(None, "graph", command.group(1), "--format", "mermaid", cwd=REPO)
    assert printed.returncode == 0, printed.stderr
    assert blocks[0] == printed.stdout


def test_the_readme_picture_is_the_graph_a_release_run_stores(host: HostHandle, state_dir: Path,
                                                              project: Path) -> None:
    """What the host stored for a run of `release` draws docs/cli.md's picture, byte for byte."""
    readme = (REPO / "docs" / "cli.md").read_text()
    section = readme[readme.index("## The `piwf` command\n"):readme.index("\n## piwf-top")]
    [block] = re.findall(r"```mermaid\n(.*?)```", section, flags=re.S)
    run_id = start(state_dir, project, "release", "version=3")
    with Client(state_dir) as client:
        document = client.run_graph(run_id)
    assert document is not None
    assert render_mermaid(graph_of(document)) == block
