"""`piwf workflows [--project DIR]`: the workflows `piwf start NAME` finds, and the files that fail to load.

Discovery runs here, in the command's process (no host is needed): it loads
every file of `<project>/.piwf/workflows/` and `$XDG_CONFIG_HOME/piwf/workflows/`
as the host would. What those files print while loading goes to stderr, so
`--json` output stays parseable. Exit status 1 when a file fails to load (what did load is still
listed, and one line on stderr names the first failure), so a script or CI step notices.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from piwf_actors.cli.context import EXIT_OK, EXIT_REFUSED, Ctx
from piwf_actors.cli.values import project_dir


def add_command(add: Any, sub: Any) -> None:
    p = add(sub, "workflows", "the workflows `start` finds by name, and the files that fail to load", cmd_workflows,
            "The workflows `piwf start NAME` finds for a project (name, file, attribute, the input shape of those "
            "that declare one), and the workflow files "
            "that fail to load with why. Discovery runs in this command: no host is needed.")
    p.add_argument("--project", type=project_dir, help="project directory (default: the current one)")


def listing(project: str) -> dict[str, Any]:
    """{project, dirs, workflows: [{name, file, attribute, input_shape?}], failures: [{file, error}]};
    `input_shape` (the shape of `define_workflow(input=…)`) only for a workflow that declares one."""
    from piwf_actors.workflows import thaw
    from piwf_actors.workflows.discovery import discover_all

    logging.disable(logging.WARNING)  # the failures are part of the answer, not warnings on stderr
    try:
        with contextlib.redirect_stdout(sys.stderr):
            found = discover_all(project)
    finally:
        logging.disable(logging.NOTSET)
    return {"project": project, "dirs": [str(d) for d in found.dirs],
            "workflows": [{"name": ref.name, "file": ref.path, "attribute": ref.attr,
                           **({} if ref.input_shape is None else {"input_shape": thaw(ref.input_shape)})}
                          for ref in sorted(found.workflows.values(), key=lambda ref: ref.name)],
            "failures": [{"file": failure.path, "error": failure.error} for failure in found.failures]}


def render_listing(view: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    workflows = view["workflows"]
    if workflows:
        from piwf_actors.workflows.shapes import compact  # loaded already: `listing` ran discovery

        typed = any("input_shape" in item for item in workflows)  # the column only when some workflow has one
        table = Table(title="workflows", title_justify="left")
        table.add_column("name", no_wrap=True)
        table.add_column("file", overflow="fold")
        table.add_column("attribute", no_wrap=True)
        if typed:
            table.add_column("input", overflow="fold")
        for item in workflows:
            shape = [Text(compact(item["input_shape"]) if "input_shape" in item else "")] if typed else []
            table.add_row(Text(item["name"]), Text(item["file"]), Text(item["attribute"]), *shape)
        parts.append(table)
    else:
        parts.append(Text("no workflow found in " + " or ".join(view["dirs"]), style="yellow"))
    failures = view["failures"]
    if failures:
        table = Table(title=f"{len(failures)} file(s) failed to load", title_justify="left", title_style="red")
        table.add_column("file", overflow="fold")
        table.add_column("error", overflow="fold", style="red")
        for item in failures:
            table.add_row(Text(item["file"]), Text(item["error"]))
        parts.append(table)
    return Group(*parts)


def cmd_workflows(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    view = listing(os.path.abspath(ctx.args.project or os.getcwd()))
    ctx.show(view, render_listing)
    failures = view["failures"]
    if not failures:
        return EXIT_OK
    more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
    ctx.note(f"piwf: {len(failures)} workflow file(s) failed to load: {failures[0]['file']}: "
             f"{failures[0]['error']}{more}")
    return EXIT_REFUSED
