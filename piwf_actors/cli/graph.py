"""`piwf graph WORKFLOW|RUN [--format text|mermaid|dot] [--project DIR]`: a picture of a workflow, or of a run on it.

WORKFLOW or RUN: an argument that starts with `run_` is a run id (or a unique prefix of one, as
everywhere in `piwf`) unless no run matches it (or no host and no state database is there) and a
workflow has that name; `module:attr` and `path/to/file.py[:attr]` are workflows; an argument that
no workflow name can be — an id's end as tables and piwf-top show it (`…2mvr1rtt`, `...2mvr1rtt`) —
is a run alone, so drawing it loads none of the project's files; any other argument is a discovered
workflow's name when one has it, else a run id written as other commands take one (a prefix
without `run_`, or a bare end).

Where the definition comes from, and who runs its code: a workflow is loaded here, in this
command's process, as `piwf workflows` does (no host needed) — it is the user's own file, named
here. A run is drawn on the graph the host stored as data when the run started (`run.graph`,
workflows/graph_data.py), so a run whose file changed since still shows its own nodes, and drawing
it runs no code at all: not its file, not what the file imports, here or on the host. A run stored
before hosts kept graphs is drawn from what `run.get` says alone (the nodes it reached), and says
so on stderr. What a workflow file prints while loading goes to stderr, so the picture on stdout
stays clean.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any

from rich.text import Text

from piwf_actors.cli.context import EXIT_OK, Ctx
from piwf_actors.cli.ids import ELLIPSES, NoMatch
from piwf_actors.cli.runs import workflow_spec  # a file spec relative to this directory
from piwf_actors.cli.values import project_dir
from piwf_actors.client import HostNotRunning
from piwf_actors.errors import PiwfError, WorkflowError, WorkflowNotFound
from piwf_actors.workflows.discovery import resolve
from piwf_actors.workflows.graph import Graph, build_graph, function_run_graph, graph_from_view
from piwf_actors.workflows.graph_data import GraphDataError, graph_of
from piwf_actors.workflows.graph_render import RENDERERS, tree, tree_lines
from piwf_actors.workflows.graph_run import RunOverlay, overlay
from piwf_actors.workflows.model import Workflow

FORMATS = tuple(RENDERERS)
STATUS_STYLES = {"succeeded": "green", "failed": "red", "timed_out": "red", "running": "cyan", "waiting": "yellow",
                 "interrupted": "yellow"}


def add_command(add: Any, sub: Any) -> None:
    p = add(sub, "graph", "draw a workflow, or a run on its workflow (text, mermaid, dot)", cmd_graph,
            "Draw a workflow: its nodes by kind, switches with their cases, includes with their exits, the child "
            "workflows of fan-outs. Given a run: the same with where the run is and what each node did (status, "
            "attempts, output or answer, children by status, open waits), on the graph the host stored when the run "
            "started. A workflow is loaded in this command's process (no host needed); a run's code is never run.")
    p.add_argument("target", metavar="WORKFLOW|RUN", help="a discovered workflow name, module:attr, or "
                   "path/to/file.py[:attr]; or a run id: a unique prefix (with or without run_) or …end")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (a tree), mermaid (a flowchart GitHub renders) or dot (Graphviz); default text")
    p.add_argument("--project", type=project_dir,
                   help="project directory for workflow discovery (default: the current one)")


def _is_spec(target: str) -> bool:
    """`module:attr` or a file path: a workflow, never a run id."""
    return ":" in target or "/" in target or target.endswith(".py")


@contextlib.contextmanager
def _loading() -> Any:
    """While workflow code runs here: its prints go to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def load_workflow(spec: str, project: str) -> Workflow:
    with _loading():
        return resolve(workflow_spec(spec), project).workflow


def _run_picture(ctx: Ctx, run_id: str) -> tuple[Graph, RunOverlay]:
    client = ctx.client(offline_ok=True)
    view = client.resolve_content(ctx.call("run.get", run_id=run_id))
    run = overlay(view, time.time())
    try:
        document = client.run_graph(run_id)
        if document is not None:
            graph = graph_of(document)
            # A function workflow's run: the steps it took (its code, not a graph, decided them).
            return (function_run_graph(graph, view) if graph.function else graph), run
        why = "it started before its host stored run graphs"
    except (PiwfError, GraphDataError, ValueError) as exc:  # ValueError: stored bytes that are not JSON
        why = f"its stored graph cannot be read: {' '.join(str(exc).split())[:300]}"
    ctx.note(f"piwf: run {run_id} has no graph to draw ({why}); showing the nodes it reached")
    return graph_from_view(view), run


def _styled(graph: Graph, run: RunOverlay | None) -> Text:
    """The text tree for a terminal: statuses coloured, where the run is in bold."""
    out = Text()
    for guide, item in tree_lines(tree(graph, run)):
        out.append(guide, style="dim")
        style = STATUS_STYLES.get(item.status or "", "dim" if item.role in ("route", "child") else "")
        if item.current and item.role == "node":
            style = f"bold reverse {style}".strip()
        elif item.role in ("title", "group"):
            style = "bold"
        out.append(item.text, style=style)
        out.append("\n")
    return out


def _run_id(ctx: Ctx, target: str) -> str:
    """The run `target` names (a prefix with or without `run_`, or `…end`: cli/ids.py); NoMatch or
    HostNotRunning when none does or nothing can say."""
    ctx.client(offline_ok=True)  # a stopped host's database answers too (read-only)
    return ctx.resolve("run", target)


def _target(ctx: Ctx, target: str, project: str) -> tuple[Graph, RunOverlay | None]:
    """A `run_…` argument is a run unless none matches and a workflow has that name; a spec
    (`module:attr`, a file) is a workflow; an id's end as a table shows it (`…2mvr1rtt`) is a
    run without looking for a workflow (which would import the project's files); anything else is a
    workflow when one resolves, else a run (`01m8…` without its kind), as other commands take run ids."""
    if _is_spec(target):
        return build_graph(load_workflow(target, project)), None
    if target.startswith(ELLIPSES):
        return _run_picture(ctx, _run_id(ctx, target))
    if target.startswith("run_"):
        try:
            run_id = _run_id(ctx, target)
        except (NoMatch, HostNotRunning) as missing:  # no such run: perhaps a workflow named run_…
            try:
                return build_graph(load_workflow(target, project)), None
            except WorkflowError:
                raise missing from None
        return _run_picture(ctx, run_id)
    try:
        return build_graph(load_workflow(target, project)), None
    except WorkflowNotFound as not_found:  # a workflow that is there and fails to load says so
        try:
            run_id = _run_id(ctx, target)
        except (NoMatch, HostNotRunning):
            raise not_found from None
    return _run_picture(ctx, run_id)


def cmd_graph(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    project = os.path.abspath(ctx.args.project or os.getcwd())
    graph, run = _target(ctx, ctx.args.target, project)
    if ctx.json:
        ctx.emit_json({"graph": graph.to_dict(), "run": None if run is None else run.to_dict(),
                       "format": ctx.args.format, "picture": RENDERERS[ctx.args.format](graph, run)})
    elif ctx.args.format == "text" and ctx.out.is_terminal:
        ctx.out.print(_styled(graph, run), soft_wrap=True, highlight=False, end="")
    else:
        sys.stdout.write(RENDERERS[ctx.args.format](graph, run))
        sys.stdout.flush()
    return EXIT_OK
