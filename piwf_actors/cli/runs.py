"""The run commands of `piwf`: start, list, show, events, cancel/pause/resume, restart, watch.

`list`, `show` and `events` also work while no host runs: they then read the
state database read-only (`Ctx.client(offline_ok=True)`). Every RUN argument
may be a unique prefix of a run id (`cli/ids.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from rich.text import Text

from piwf_actors.cli import live, render
from piwf_actors.cli.context import EXIT_OK, EXIT_REFUSED, Ctx, Refused
from piwf_actors.cli.progress import NodeProgress, park_hint, park_key, parked_on_wait
from piwf_actors.cli.values import cutoff, json_value, key_value, project_dir, start_input
from piwf_actors.workflows.shapes import EXPECTED_INPUT

RUN_HELP = "a run id, a unique start of one, or its end as tables show it (…3d010ynt2tmw)"


def add_commands(add: Any, sub: Any) -> None:
    p = add(sub, "start", "start a run of a workflow", cmd_start,
            "Start a run of a workflow. With --wait, follow it node by node until it ends; when it waits for a "
            "decision or a checkpoint, print the command that answers it. Exit 1 unless the run is done.")
    p.add_argument("workflow", help="a discovered workflow name (see `piwf workflows`), module:attr, or "
                   "path/to/file.py[:attr]")
    p.add_argument("pairs", nargs="*", default=[], type=key_value, metavar="KEY=VALUE",
                   help="input fields (a value that parses as JSON is used as such, else as a string)")
    p.add_argument("--input", type=json_value,
                   help="the run's input as JSON (@FILE: from a file; -: from standard input)")
    p.add_argument("--project", type=project_dir, help="project directory for workflow discovery and the run's "
                   "nodes (default: the current one)")
    p.add_argument("--session", help="session id the run belongs to")
    p.add_argument("--priority", type=int, metavar="N",
                   help="among queued runs a higher priority starts first (default 0; at most 1000000 either way)")
    p.add_argument("--wait", action="store_true",
                   help="follow the run node by node until it ends, saying how to answer it when it waits; "
                   "exit 1 unless it is done")
    p = add(sub, "list", "list runs, newest first", cmd_list,
            "List runs, newest first, with their duration and error code. Reads the state database read-only when "
            "no host runs.")
    p.add_argument("--status", choices=render.STATUS_STYLES, help="only runs in this status")
    p.add_argument("--workflow", metavar="NAME", help="only runs of this workflow")
    p.add_argument("--since", type=cutoff, metavar="DATE",
                   help="only runs created since: an ISO date/datetime, or an age such as 2h, 30m, 7d")
    p.add_argument("--parent", metavar="RUN", help="only the child runs of this run (a fan-out's, a "
                   "run_workflow's)")
    p.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
    p = add(sub, "show", "one run with its nodes and effects", cmd_show,
            "One run: its nodes and effects; when it failed, the error with the traceback of the workflow code that "
            "raised, and each failed shell node's exit code and the last lines of its stderr. Reads the state "
            "database read-only when no host runs.")
    p.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    p = add(sub, "events", "a run's events", cmd_events,
            "A run's events, oldest first; --follow keeps printing until the run ends. Reads the state database "
            "read-only when no host runs.")
    p.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    p.add_argument("--after", type=int, default=0, help="only events after this sequence number")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until the run ends")
    for name, what in (("cancel", "cancel a run"), ("pause", "pause a run at its next node boundary"),
                       ("resume", "resume a paused run (or one parked without progress)")):
        p = add(sub, name, what, cmd_control)
        p.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    p = add(sub, "restart", "a new run of a finished run, with its input", cmd_restart,
            "Start a new run of a finished run with the same input: the current code of its workflow file (says "
            "whether it changed since the run started), or with --same-code the code stored with the run; from "
            "the start, or --from NODE (the outputs of the nodes before NODE are copied, not produced again).")
    p.add_argument("run_id", metavar="RUN", help=RUN_HELP)
    p.add_argument("--from", dest="from_node", metavar="NODE",
                   help="start at this node; the outputs of the nodes before it are copied, they do not run again")
    p.add_argument("--same-code", action="store_true",
                   help="run the code stored with the run, not the workflow file as it is now")
    p = add(sub, "watch", "live view of the runs, or of one run", cmd_watch,
            "A live view of the runs (Ctrl-C leaves), or of one run until it ends (exit 1 unless it is done).")
    p.add_argument("run_id", metavar="RUN", nargs="?", help=RUN_HELP)


def workflow_spec(spec: str) -> str:
    """A file spec relative to *this* directory is made absolute (the host has another cwd)."""
    target, colon, attr = spec.rpartition(":")
    if not colon:
        target, attr = spec, ""
    if (target.endswith(".py") or "/" in target) and not os.path.isabs(target) and os.path.exists(target):
        return os.path.abspath(target) + (f":{attr}" if colon else "")
    return spec


def cmd_start(ctx: Ctx, parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    try:
        value = start_input(args.input, args.pairs)
    except ValueError as err:
        parser.error(str(err))
    payload: dict[str, Any] = {"workflow": workflow_spec(args.workflow), "input": {} if value is None else value,
                               "project_path": os.path.abspath(args.project or os.getcwd())}
    if args.session:
        payload["session_id"] = args.session
    if args.priority is not None:
        payload["priority"] = args.priority
    try:
        receipt = ctx.call("run.start", payload)
    except Refused as refused:
        return _input_refused(ctx, refused)
    run_id = receipt["run_id"]
    if not args.wait:
        if ctx.json:
            ctx.emit_json(receipt)
        elif receipt.get("joined"):  # a debounced start collapsed into the run held for its key
            ctx.out.print(Text.assemble("joined ", (run_id, "bold"),
                                        f" (debounced: {receipt.get('debounce_starts')} starts so far)"))
        else:
            ctx.out.print(Text.assemble("started ", (run_id, "bold"), f" ({receipt.get('status')})"))
        return EXIT_OK
    ctx.note(f"started {run_id}; following it (Ctrl-C stops waiting, not the run) …")
    try:
        view = live.wait_for_run(ctx.host(), run_id, _progress(ctx))
    except KeyboardInterrupt:
        print(f"piwf: stopped waiting; run {run_id} goes on ({ctx.command('show', run_id)})", file=sys.stderr)
        return 130
    ctx.show(view, render.run_view)
    if view is None:
        ctx.note(f"piwf: run {run_id} no longer exists")
    return live.exit_status(view)


def _input_refused(ctx: Ctx, refused: Refused) -> int:
    """A refused input: its problems, then on a line of its own the input the workflow expects. Any
    other refusal (and --json) goes on to the usual handling."""
    answer = refused.answer
    problems, mark, shape = str(answer.error or "").rpartition(EXPECTED_INPUT)
    if ctx.json or not mark:
        raise refused
    print(f"piwf: {answer.outcome}: {problems}", file=sys.stderr)
    print(f"expected input: {shape}", file=sys.stderr)
    return EXIT_REFUSED


def _progress(ctx: Ctx) -> Any:
    """The `on_view` of `start --wait`: node lines, and a hint whenever the run parks (once per park)."""
    nodes = NodeProgress()
    hinted: set[Any] = set()

    def on_view(view: dict[str, Any]) -> None:
        for line in nodes.update(view):
            ctx.note(line)
        key = park_key(view)
        if key is None:
            hinted.clear()  # moving again: a later park is news, even for the same reason
            return
        if key in hinted:
            return
        hinted.add(key)
        request = None
        if view.get("park_reason") == "waiting" and parked_on_wait(view) is None:  # a request, not a wait
            pending = ctx.call("interaction.list", {}).get("requests") or []
            request = next((r for r in pending if r.get("request_id") == view.get("park_detail")), None)
        for hint in park_hint(view, request, ctx.command, ctx.short_id):
            ctx.note(hint)
        ctx.note("(still waiting for the run to end …)")

    return on_view


def cmd_list(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    payload: dict[str, Any] = {"limit": max(1, args.limit)}
    for key in ("status", "workflow"):
        if getattr(args, key):
            payload[key] = getattr(args, key)
    if args.since is not None:
        payload["since"] = float(args.since)
    ctx.client(offline_ok=True)
    if args.parent:
        payload["parent"] = ctx.resolve("run", args.parent)
    receipt = ctx.call("run.list", payload)
    ctx.show(receipt, lambda r: render.runs_table(r.get("runs") or []))
    return EXIT_OK


def cmd_show(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    client = ctx.client(offline_ok=True)
    view = ctx.call("run.get", run_id=ctx.resolve("run", ctx.args.run_id))
    # Values over 64 KiB arrive as content markers; show them in full.
    ctx.show(client.resolve_content(view), render.run_view)
    return EXIT_OK


def cmd_events(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    ctx.client(offline_ok=True)
    run_id = ctx.resolve("run", args.run_id)
    if args.follow and not ctx.offline:
        def emit(event: dict[str, Any]) -> None:
            if ctx.json:
                ctx.out.out(render.to_json(event, indent=None), highlight=False)
            else:
                ctx.out.print(render.event_line(event))

        ctx.call("run.get", run_id=run_id)  # a clear notFound before any watch
        with contextlib.suppress(KeyboardInterrupt):  # leaving a follow is not an error
            live.follow_events(ctx.host(), run_id, max(0, args.after), emit)
        return EXIT_OK
    events: list[dict[str, Any]] = []
    after = max(0, args.after)
    while True:
        receipt = ctx.call("run.events", {"after": after}, run_id=run_id)
        events.extend(receipt.get("events") or [])
        after = receipt.get("next_after") or after
        if not receipt.get("more"):
            break
    if ctx.json:
        ctx.emit_json({"events": events, "next_after": after})
    else:
        ctx.out.print(render.events_table(events))
    if args.follow:
        ctx.note("piwf: no host is running, so no new event can come; not following")
    return EXIT_OK


def cmd_control(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    command = ctx.args.command
    run_id = ctx.resolve("run", ctx.args.run_id)
    receipt = ctx.call(f"run.{command}", run_id=run_id)
    if ctx.json:
        ctx.emit_json(receipt)
    else:
        ctx.out.print(Text.assemble(f"{command}: ", (str(receipt.get("run_id", run_id)), "bold"), " is now ",
                                    render.status_text(receipt.get("status"))))
    return EXIT_OK


def cmd_restart(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    run_id = ctx.resolve("run", args.run_id)
    current = ctx.client().request("run.get", run_id=run_id)
    if not current.ok:
        raise Refused(current)
    payload: dict[str, Any] = {}
    if args.from_node:
        payload["from_node"] = args.from_node
    if args.same_code:
        payload["same_code"] = True
    answer = ctx.client().request("run.restart", payload, run_id=run_id, expected_revision=current.revision)
    if not answer.ok:
        raise Refused(answer)
    receipt = answer.receipt
    if ctx.json:
        ctx.emit_json(receipt)
        return EXIT_OK
    ctx.out.print(Text.assemble("restarted ", (run_id, "bold"), " as ", (str(receipt.get("run_id")), "bold"),
                                f" ({receipt.get('status')})"))
    if answer.outcome == "adopted":
        ctx.out.print(Text("this revision of the run was restarted before: that restart is shown, no new run was "
                           "made", style="yellow"))
    changed = receipt.get("digest_changed")
    if changed is not None:
        ctx.out.print(Text("the workflow's code changed since the run started: the new run runs the current code"
                           if changed else "same code as the run it restarts", style="yellow" if changed else "dim"))
    if receipt.get("from_node"):
        ctx.out.print(Text(f"starts at node {receipt['from_node']}; the nodes before it were copied, not run again",
                           style="dim"))
    return EXIT_OK


def cmd_watch(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    run_id = ctx.resolve("run", ctx.args.run_id) if ctx.args.run_id else None
    if run_id:
        ctx.call("run.get", run_id=run_id)  # a clear notFound before any watch
    last: dict[str, Any] | None = None
    try:
        if ctx.json:
            for view in live.watch_views(ctx.host(), "run" if run_id else "runs", run_id):
                ctx.out.out(render.to_json(view, indent=None), highlight=False)
                last = view
                if run_id and live.ended(view):
                    break
        else:
            last = live.live_watch(ctx.host(), ctx.out, run_id)
    except KeyboardInterrupt:  # Ctrl-C is how one leaves a watch
        return EXIT_OK
    return live.exit_status(last) if run_id else EXIT_OK
