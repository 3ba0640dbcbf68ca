"""`piwf resource list | get | apply -f FILE | reconcile | delete | events`: resources of resource managers.

`apply -f FILE` reads a JSON or TOML file with `manager`, `key`, `spec` and optionally `initial_status`
(and `project_path`; default `--project`, else the current directory), finds the manager file
`<project>/.piwf/resource-managers/<manager>.py`, and sends its sha256 with the request: the host
refuses the apply (`conflict`) if the file changed in between. Exit status: 2 for a file that
cannot be read or parsed (bad usage), 1 when the manager file does not exist (not found).
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from piwf_actors.cli import render
from piwf_actors.cli.context import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from piwf_actors.cli.values import project_dir
from piwf_actors.workflows.resource_manager import file_digest, manager_path


def add_commands(add: Any, sub: Any) -> None:
    resource = add(sub, "resource", "resources of resource managers (reconcile loops)", None).add_subparsers(
        dest="resource_command", required=True, metavar="ACTION")
    p = add(resource, "list", "resources, their generation and last reconcile", cmd_list)
    p.add_argument("--manager", help="only this manager's resources")
    p = add(resource, "get", "one resource: spec, status, finalizers, effects, owned runs", cmd_get)
    _ref(p)
    p = add(resource, "apply", "create a resource or change its spec, from a JSON or TOML file", cmd_apply)
    p.add_argument("-f", "--file", required=True, metavar="FILE",
                   help="JSON or TOML with manager, key, spec and optionally initial_status")
    p.add_argument("--project", type=project_dir, help="the project holding .piwf/resource-managers/ (default: "
                   "the file's project_path, else the current directory)")
    _ref(add(resource, "reconcile", "reconcile a resource now", cmd_control))
    _ref(add(resource, "delete", "delete a resource once its manager cleared its finalizers", cmd_control))
    p = add(resource, "events", "what happened to a resource", cmd_events)
    _ref(p)
    p.add_argument("--after", type=int, default=0, help="only events after this sequence number")


def _ref(parser: Any) -> None:
    parser.add_argument("manager", metavar="MANAGER")
    parser.add_argument("key", metavar="KEY")


def read_resource_file(path: str) -> dict[str, Any]:
    """The apply document: TOML when the file ends in .toml, else JSON."""
    with open(path, "rb") as handle:
        data = tomllib.load(handle) if path.endswith(".toml") else json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("manager"), str) or not isinstance(data.get("key"), str) \
            or "spec" not in data:
        raise ValueError("the file must hold a table/object with manager, key and spec (and optionally "
                         "initial_status, project_path)")
    unknown = sorted(set(data) - {"manager", "key", "spec", "initial_status", "project_path"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    return data


def cmd_apply(ctx: Any, _parser: Any) -> int:
    try:
        document = read_resource_file(ctx.args.file)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        print(f"piwf: {ctx.args.file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    project = os.path.abspath(ctx.args.project or document.get("project_path") or os.getcwd())
    path = manager_path(project, document["manager"])
    try:
        digest = file_digest(path)
    except OSError as exc:  # not found, like an unknown run id: 1, not the usage status 2
        print(f"piwf: no resource manager {document['manager']!r}: cannot read {path} ({exc.strerror})",
              file=sys.stderr)
        return EXIT_REFUSED
    payload = {"manager": document["manager"], "key": document["key"], "spec": document["spec"],
               "project_path": project, "digest": digest}
    if document.get("initial_status") is not None:
        payload["initial_status"] = document["initial_status"]
    receipt = ctx.call("resource.apply", payload)
    changed = "applied" if receipt.get("changed") else "unchanged"
    ctx.show(receipt, lambda r: Text(f"{r['manager']}/{r['key']}: {changed}, generation {r['generation']}, "
                                     f"resource_version {r['resource_version']}"))
    return EXIT_OK


def cmd_list(ctx: Any, _parser: Any) -> int:
    payload = {"manager": ctx.args.manager} if ctx.args.manager else {}
    ctx.show(ctx.call("resource.list", payload), lambda r: resources_table(r["resources"]))
    return EXIT_OK


def cmd_get(ctx: Any, _parser: Any) -> int:
    ctx.show(ctx.call("resource.get", {"manager": ctx.args.manager, "key": ctx.args.key}), resource_view)
    return EXIT_OK


def cmd_control(ctx: Any, _parser: Any) -> int:
    operation = f"resource.{ctx.args.resource_command}"
    receipt = ctx.call(operation, {"manager": ctx.args.manager, "key": ctx.args.key})
    what = "deleting (once its finalizers are cleared)" if receipt.get("deleting") else "queued for a reconcile"
    ctx.show(receipt, lambda r: Text(f"{r['manager']}/{r['key']}: {what}"))
    return EXIT_OK


def cmd_events(ctx: Any, _parser: Any) -> int:
    receipt = ctx.call("resource.events", {"manager": ctx.args.manager, "key": ctx.args.key,
                                           "after": ctx.args.after})
    ctx.show(receipt, lambda r: events_table(r["events"]))
    return EXIT_OK


def events_table(events: list[dict[str, Any]]) -> Table:
    table = Table()
    table.add_column("seq", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("payload")  # gives way first; --json has it all
    for event in events:
        table.add_row(render.text(event.get("seq")), render.text(render.when(event.get("created_at"), precise=True)),
                      render.text(event.get("kind")), render.one_line(render.compact(event.get("payload"), 400)))
    return table


def _state(resource: dict[str, Any]) -> Text:
    if resource.get("deleting"):
        return Text("deleting", style="yellow")
    if resource.get("reconciling"):
        return Text("reconciling", style="cyan")
    if resource.get("last_result") == "error":
        return Text(f"error ×{resource.get('consecutive_errors')}", style="red")
    if resource.get("queued"):
        return Text("queued")
    return Text(str(resource.get("last_result") or "new"), style="green")


def resources_table(resources: list[dict[str, Any]]) -> Table:
    table = Table()
    for column in ("manager", "key", "state", "generation", "observed", "version", "reconciled", "finalizers"):
        table.add_column(column, no_wrap=column != "key")
    for item in resources:
        table.add_row(render.text(item["manager"]), render.text(item["key"]), _state(item),
                      render.text(item["generation"]), render.text(item["observed_generation"]),
                      render.text(item["resource_version"]), render.text(render.relative(item.get("reconciled_at"))),
                      render.text(", ".join(item.get("finalizers") or [])))
    return table


def resource_view(view: dict[str, Any]) -> Group:
    summary = render.kv_table(f"{view['manager']}/{view['key']}")
    summary.add_row("state", _state(view))
    for key in ("uid", "generation", "observed_generation", "resource_version", "project_path"):
        summary.add_row(key, render.text(view.get(key)))
    summary.add_row("finalizers", render.text(", ".join(view.get("finalizers") or []) or "-"))
    summary.add_row("last error", render.error_text(view.get("last_error")) if view.get("last_error") else Text("-"))
    summary.add_row("spec", render.one_line(render.compact(view.get("spec"), 400)))
    summary.add_row("status", render.one_line(render.compact(view.get("status"), 400)))
    parts: list[Any] = [summary]
    if view.get("effects"):
        effects = Table(title="effects", title_justify="left")
        for column in ("effect", "key", "status", "attempts", "result / error"):
            effects.add_column(column, no_wrap=column in ("effect", "status"))
        for effect in view["effects"]:
            style = "yellow" if effect["status"] == "ambiguous" else ""
            effects.add_row(render.text(effect["effect_id"]), render.text(effect["effect_key"]),
                            render.text(effect["status"], style), render.text(effect["attempts"]),
                            render.one_line(render.compact(effect.get("result") or effect.get("error"), 200)))
        parts.append(effects)
    if view.get("runs"):
        runs = Table(title="runs", title_justify="left")
        for column in ("run", "ensure key", "workflow", "status"):
            runs.add_column(column, no_wrap=True)
        for run in view["runs"]:
            runs.add_row(*(render.text(run.get(key)) for key in ("run_id", "ensure_key", "workflow", "status")))
        parts.append(runs)
    return Group(*parts)
