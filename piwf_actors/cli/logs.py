"""`piwf logs RUN [NODE] [-f]`: a node's full output, or a running shell node's output as it is printed.

A shell node's output is `{stdout, stderr, exit_code, duration_ms}`: both
streams are printed, labelled; another node's output is printed as JSON.
Values over 64 KiB arrive as content markers and are fetched in chunks
(`content.read`). Without NODE, the node that ran last is shown.

`-f` follows the run's `node_output` events (a `run` watch asking for the
output so far): like `tail -f`, it starts with what a running node printed
before it was called, then writes data as it arrives, a node's stdout to
stdout and its stderr to stderr. With NODE
it stops when that node finishes (exit 0 when it succeeded, else 1); without
it, when the run ends (exit 0 when done, 1 when failed or cancelled). A node
that finished before its output reached the watch is printed from its
stored result.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.text import Text

from piwf_actors.cli import render
from piwf_actors.cli.context import EXIT_NO_HOST, EXIT_OK, EXIT_REFUSED, Ctx
from piwf_actors.cli.live import ended, exit_status, watch_events
from piwf_actors.cli.progress import NODE_FINISHED


def add_command(add: Any, sub: Any) -> None:
    p = add(sub, "logs", "a node's output; -f follows it live", cmd_logs,
            "A node's full output: a shell node's stdout and stderr, labelled; another node's output as JSON. "
            "Without NODE, the node that ran last. -f prints a running shell node's output as it comes, stdout to "
            "stdout and stderr to stderr, until the node (without NODE: the run) ends; exit 1 when it failed. "
            "Reads the state database read-only when no host runs.")
    p.add_argument("run_id", metavar="RUN",
                   help="a run id, a unique start of one, or its end as tables show it (…3d010ynt2tmw)")
    p.add_argument("node", metavar="NODE", nargs="?", help="the node (default: the node that ran last)")
    p.add_argument("--follow", "-f", action="store_true",
                   help="print output as it is produced until the node (or, without NODE, the run) ends; "
                   "exit 1 when it failed")


def last_node(view: dict[str, Any]) -> dict[str, Any] | None:
    """The node whose latest attempt started last (attempt ids are time-ordered)."""
    nodes = view.get("nodes") or []
    return max(nodes, key=lambda node: str(node.get("attempt_id") or "")) if nodes else None


def _find_node(ctx: Ctx, view: dict[str, Any], name: str | None) -> dict[str, Any] | None:
    nodes = view.get("nodes") or []
    names = ", ".join(str(node.get("node_id")) for node in nodes) or "none yet"
    if name is None:
        node = last_node(view)
        if node is None:
            ctx.note(f"piwf: run {view.get('run_id')} has not run a node yet")
        elif len(nodes) > 1 and not ctx.json:
            ctx.note(f"node {node.get('node_id')} (the last that ran; the run's nodes: {names})")
        return node
    node = next((node for node in nodes if node.get("node_id") == name), None)
    if node is None:
        ctx.note(f"piwf: node {name!r} of run {view.get('run_id')} has not run (nodes that ran: {names})")
    return node


def _write(data: str, stream: Any) -> None:
    stream.write(data)
    stream.flush()


def print_node(ctx: Ctx, run_id: str, node: dict[str, Any]) -> None:
    """The node's whole stored output (content markers fetched) and its error."""
    output = ctx.client().resolve_content(node.get("output"))
    error = node.get("error")
    if ctx.json:
        ctx.emit_json({"run_id": run_id, "node_id": node.get("node_id"), "status": node.get("status"),
                       "attempt_id": node.get("attempt_id"), "attempts": node.get("attempts"),
                       "output": output, "error": error})
        return
    label = f"node {node.get('node_id')} ({node.get('status')}"
    if render.is_shell_output(output):
        label += f", exit code {output.get('exit_code')}, {output.get('duration_ms')} ms)"
        ctx.out.print(Text(label, style="bold"), soft_wrap=True)
        for stream in ("stdout", "stderr"):
            data = str(output.get(stream) or "")
            ctx.out.print(Text(f"── {stream} ──" + ("" if data else " (empty)"), style="dim"), soft_wrap=True)
            if data:
                _write(data if data.endswith("\n") else data + "\n", sys.stdout)
    else:
        ctx.out.print(Text(label + ")", style="bold"), soft_wrap=True)
        if output is not None:
            _write(render.to_json(output) + "\n", sys.stdout)
    if isinstance(error, dict) and error.get("message"):
        ctx.out.print(Text(f"error: {error.get('code') or 'failed'}: {error['message']}", style="red"),
                      soft_wrap=True)
        if error.get("traceback"):
            _write(str(error["traceback"]).rstrip("\n") + "\n", sys.stdout)


def cmd_logs(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    ctx.client(offline_ok=True)
    run_id = ctx.resolve("run", args.run_id)
    view = ctx.call("run.get", run_id=run_id)
    if args.follow and not ended(view):
        if ctx.offline:
            ctx.note(f"piwf: run {run_id} is {view.get('status')} and moves on only while a host runs: "
                     "nothing to follow (start one with `piwf-host`)")
            return EXIT_NO_HOST
        return follow(ctx, view, args.node)
    node = _find_node(ctx, view, args.node)
    if node is None:
        return EXIT_REFUSED
    print_node(ctx, run_id, node)
    if args.follow:  # the run had ended already
        return (0 if node.get("status") == "succeeded" else 1) if args.node else exit_status(view)
    return EXIT_OK


def follow(ctx: Ctx, view: dict[str, Any], target: str | None) -> int:
    """Print live output until the target node finishes or the run ends (see the module docstring)."""
    run_id = str(view["run_id"])
    initial = {node.get("node_id"): (node.get("attempt_id"), node.get("status")) for node in view.get("nodes") or []}
    if target is not None and target in initial and initial[target][1] in NODE_FINISHED:
        node = next(node for node in view["nodes"] if node.get("node_id") == target)
        print_node(ctx, run_id, node)
        return 0 if node.get("status") == "succeeded" else 1
    for node in view.get("nodes") or []:
        if node.get("status") == "running" and target in (None, node.get("node_id")) and not ctx.json:
            ctx.note(f"node {node.get('node_id')} is running already: what it printed so far, then as it comes")
    # Attempts that had ended when the run was read: their output is in their stored result (the host's
    # output so far may still hold the last one's), not news.
    finished = {attempt for attempt, status in initial.values() if status in NODE_FINISHED}
    live_attempts: set[Any] = set()
    reported: set[Any] = set()
    speaking: Any = None
    for topic, payload in watch_events(ctx.host(), "run", run_id, output_so_far=True):
        if topic == "node_output":
            if payload is None or (target is not None and payload.get("node_id") != target):
                continue
            if payload.get("attempt_id") in finished:
                continue
            live_attempts.add(payload.get("attempt_id"))
            if ctx.json:
                ctx.out.out(render.to_json(payload, indent=None), highlight=False)
                continue
            if target is None and payload.get("node_id") != speaking:
                speaking = payload.get("node_id")
                ctx.note(Text(f"── node {speaking} ──", style="dim"))
            _write(str(payload.get("data") or ""), sys.stderr if payload.get("stream") == "stderr" else sys.stdout)
            continue
        if topic != "run":
            continue
        if payload is None:
            ctx.note(f"piwf: run {run_id} no longer exists")
            return EXIT_REFUSED
        for node in payload.get("nodes") or []:
            node_id, attempt, status = node.get("node_id"), node.get("attempt_id"), node.get("status")
            if (target is not None and node_id != target) or status not in NODE_FINISHED:
                continue
            if attempt in reported or initial.get(node_id) == (attempt, status):
                continue
            reported.add(attempt)
            if attempt not in live_attempts and (target is not None or render.is_shell_output(node.get("output"))):
                print_node(ctx, run_id, node)  # it finished before its output reached this watch
            if target is not None:
                return 0 if status == "succeeded" else 1
        if ended(payload):
            if target is not None:
                ctx.note(f"piwf: run {run_id} ended ({payload.get('status')}) without running node {target!r}")
            return exit_status(payload)
    return EXIT_REFUSED  # not reached: the watch raises when the host goes away
