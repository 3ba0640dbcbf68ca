"""`piwf workflows [--project DIR]`: the workflows `piwf start NAME` finds, and the files that fail to load.

Discovery runs here, in the command's process (no host is needed): it loads
every file of `<project>/.piwf/workflows/` and `$XDG_CONFIG_HOME/piwf/workflows/`
as the host would. What those files print while loading goes to stderr, so
`--json` output stays parseable.
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

from piwf_actors.cli.context import EXIT_OK, Ctx


def add_command(add: Any, sub: Any) -> None:
    p = add(sub, "workflows", "the workflows `start` finds by name, and the files that fail to load", cmd_workflows,
            "The workflows `piwf start NAME` finds for a project (name, file, attribute), and the workflow files "
            "that fail to load with why. Discovery runs in this command: no host is needed.")
    p.add_argument("--project", help="project directory (default: the current one)")


def listing(project: str) -> dict[str, Any]:
    """{project, dirs, workflows: [{name, file, attribute}], failures: [{file, error}]}."""
    from piwf_actors.workflows.discovery import discover_all

    logging.disable(logging.WARNING)  # the failures are part of the answer, not warnings on stderr
    try:
        with contextlib.redirect_stdout(sys.stderr):
            found = discover_all(project)
    finally:
        logging.disable(logging.NOTSET)
    return {"project": project, "dirs": [str(d) for d in found.dirs],
            "workflows": [{"name": ref.name, "file": ref.path, "attribute": ref.attr}
                          for ref in sorted(found.workflows.values(), key=lambda ref: ref.name)],
            "failures": [{"file": failure.path, "error": failure.error} for failure in found.failures]}


def render_listing(view: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    workflows = view["workflows"]
    if workflows:
        table = Table(title="workflows", title_justify="left")
        table.add_column("name", no_wrap=True)
        table.add_column("file", overflow="fold")
        table.add_column("attribute", no_wrap=True)
        for item in workflows:
            table.add_row(Text(item["name"]), Text(item["file"]), Text(item["attribute"]))
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
    return EXIT_OK
