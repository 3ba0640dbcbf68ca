"""`piwf`: the client command of a piwf host (protocol v1 over `<state_dir>/host.sock`).

Exit status: 0 ok; 1 the host refused the operation (rejected, conflict,
notFound, unavailable, claimLost), a run waited for failed or was
cancelled, or `state verify` found violations; 2 bad usage; 3 no host is
running (or it went away). `--json` prints the host's receipt (or the
refused response) as JSON on stdout instead of tables.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

from piwf_actors.cli import channels, inbox, live, render
from piwf_actors.cli.live import Refused
from piwf_actors.cli.values import cutoff, json_value, key_value
from piwf_actors.client import Client, HostNotRunning
from piwf_actors.errors import PiwfError
from piwf_actors.store.paths import default_state_dir

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_NO_HOST = 0, 1, 2, 3
SLOW_TIMEOUT_S = 3600.0  # backup/verify/prune on a large database; a socket timeout would resend the request


@dataclass
class Ctx:
    args: argparse.Namespace
    out: Console
    err: Console
    _client: Client | None = None

    @property
    def json(self) -> bool:
        return bool(self.args.json)

    def client(self, timeout: float = 30.0) -> Client:
        if self._client is None:
            self._client = Client(self.args.state_dir, timeout=timeout)
        return self._client

    def call(self, operation: str, payload: dict[str, Any] | None = None, **envelope: Any) -> Any:
        """Send one request; the receipt when accepted/adopted, else `Refused`."""
        answer = self.client().request(operation, payload, **envelope)
        if not answer.ok:
            raise Refused(answer)
        return answer.receipt

    def emit_json(self, value: Any) -> None:
        self.out.out(render.to_json(value), highlight=False)

    def show(self, value: Any, renderer: Any) -> None:
        """JSON of `value` with --json, else `renderer(value)` as a Rich renderable."""
        if self.json:
            self.emit_json(value)
        else:
            self.out.print(renderer(value))


# --- argument parsing ---------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """--json and --state-dir; a subcommand's copy uses SUPPRESS so it never resets a value given before it."""
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="print the host's answer as JSON")
    parser.add_argument("--state-dir", default=argparse.SUPPRESS if suppress else None,
                        help=f"the host's state directory (default: $PIWF_STATE_DIR, else $XDG_STATE_HOME/piwf, "
                        f"else ~/.local/state/piwf; here {default_state_dir()})")


def build_parser() -> argparse.ArgumentParser:
    # Separate parsers, not shared parent actions: set_defaults on one would change them all.
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, suppress=True)
    parser = argparse.ArgumentParser(prog="piwf", description="Talk to a running piwf host: start and follow "
                                     "runs, control them, inspect the host and its state.")
    _add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(parent: Any, name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
        p = parent.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = add(sub, "start", "start a run of a workflow", cmd_start)
    p.add_argument("workflow", help="a discovered workflow name, module:attr, or path/to/file.py[:attr]")
    p.add_argument("pairs", nargs="*", default=[], type=key_value, metavar="KEY=VALUE",
                   help="input fields (a value that parses as JSON is used as such, else as a string)")
    p.add_argument("--input", type=json_value, help="the run's input as JSON")
    p.add_argument("--project", help="project directory for workflow discovery (default: the current one)")
    p.add_argument("--session", help="session id the run belongs to")
    p.add_argument("--wait", action="store_true", help="follow the run until it ends; exit 1 unless it is done")
    p = add(sub, "list", "list runs, newest first", cmd_list)
    p.add_argument("--status", choices=render.STATUS_STYLES, help="only runs in this status")
    p.add_argument("--limit", type=int, default=50, help="at most this many runs (default 50)")
    p = add(sub, "show", "show one run and its nodes", cmd_show)
    p.add_argument("run_id", metavar="RUN")
    p = add(sub, "events", "show a run's events", cmd_events)
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--after", type=int, default=0, help="only events after this sequence number")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new events until the run ends")
    for name, what in (("cancel", "cancel a run"), ("pause", "pause a run at its next node boundary"),
                       ("resume", "resume a paused run (or one parked without progress)"),
                       ("restart", "start a new run of the same workflow snapshot and input")):
        p = add(sub, name, what, cmd_control)
        p.add_argument("run_id", metavar="RUN")
    effect = add(sub, "effect", "settle side effects", None).add_subparsers(dest="effect_command", required=True,
                                                                           metavar="ACTION")
    p = add(effect, "resolve", "confirm or retry an ambiguous effect", cmd_effect_resolve)
    p.add_argument("effect_id", metavar="EFFECT")
    p.add_argument("action", choices=("confirm", "retry"))
    p.add_argument("--output", type=json_value, help="the effect's output (JSON) when confirming")
    p = add(sub, "watch", "live view of the runs, or of one run (Ctrl-C to leave)", cmd_watch)
    p.add_argument("run_id", metavar="RUN", nargs="?")
    add(sub, "status", "host status: lease, workers, runs, writer", cmd_status)
    state = add(sub, "state", "the state database", None).add_subparsers(dest="state_command", required=True,
                                                                       metavar="ACTION")
    add(state, "status", "sizes and row counts", cmd_state_status)
    add(state, "verify", "integrity check and invariants (exit 1 on violations)", cmd_state_verify)
    p = add(state, "backup", "online copy of the database, verified", cmd_state_backup)
    p.add_argument("destination", metavar="DEST", help="new file to write (must not exist)")
    p = add(state, "prune", "delete terminal runs finished before a date (dry run unless --apply)", cmd_state_prune)
    p.add_argument("--before", required=True, type=cutoff, metavar="DATE",
                   help="ISO date/datetime, or an age such as 30d, 12h, 2w")
    p.add_argument("--apply", action="store_true", help="really delete (default: only report)")
    inbox.add_commands(add, sub)
    channels.add_commands(add, sub)
    host = add(sub, "host", "the host process", None).add_subparsers(dest="host_command", required=True,
                                                                    metavar="ACTION")
    add(host, "stop", "stop the host cleanly", cmd_host_stop)
    return parser


# --- commands -------------------------------------------------------------------------------


def _workflow_spec(spec: str) -> str:
    """A file spec relative to *this* directory is made absolute (the host has another cwd)."""
    target, colon, attr = spec.rpartition(":")
    if not colon:
        target, attr = spec, ""
    if (target.endswith(".py") or "/" in target) and not os.path.isabs(target) and os.path.exists(target):
        return os.path.abspath(target) + (f":{attr}" if colon else "")
    return spec


def _show_final(ctx: Ctx, view: dict[str, Any] | None, run_id: str) -> int:
    ctx.show(view, render.run_view)
    if view is None:
        ctx.err.print(Text(f"piwf: run {run_id} no longer exists"))
        return EXIT_REFUSED
    return EXIT_OK if view.get("status") == "done" else EXIT_REFUSED


def cmd_start(ctx: Ctx, parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    value: Any = args.input
    if args.pairs:
        if value is not None and not isinstance(value, dict):
            parser.error("KEY=VALUE pairs need --input to be a JSON object (or no --input)")
        value = {**(value or {}), **dict(args.pairs)}
    payload: dict[str, Any] = {"workflow": _workflow_spec(args.workflow), "input": {} if value is None else value,
                               "project_path": os.path.abspath(args.project or os.getcwd())}
    if args.session:
        payload["session_id"] = args.session
    receipt = ctx.call("run.start", payload)
    run_id = receipt["run_id"]
    if not args.wait:
        if ctx.json:
            ctx.emit_json(receipt)
        else:
            ctx.out.print(Text.assemble("started ", (run_id, "bold"), f" ({receipt.get('status')})"))
        return EXIT_OK
    if not ctx.json:
        ctx.err.print(Text(f"started {run_id}, waiting for it to end (Ctrl-C stops waiting, not the run) …"))
    try:
        view = live.wait_for_run(ctx.client(), run_id)
    except KeyboardInterrupt:
        print(f"piwf: stopped waiting; run {run_id} goes on (piwf show {run_id})", file=sys.stderr)
        return 130
    return _show_final(ctx, view, run_id)


def cmd_list(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    payload: dict[str, Any] = {"limit": max(1, ctx.args.limit)}
    if ctx.args.status:
        payload["status"] = ctx.args.status
    receipt = ctx.call("run.list", payload)
    ctx.show(receipt, lambda r: render.runs_table(r.get("runs") or []))
    return EXIT_OK


def cmd_show(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    view = ctx.call("run.get", run_id=ctx.args.run_id)
    # Values over 64 KiB arrive as content markers; show them in full.
    ctx.show(ctx.client().resolve_content(view), render.run_view)
    return EXIT_OK


def cmd_events(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    if args.follow:
        def emit(event: dict[str, Any]) -> None:
            if ctx.json:
                ctx.out.out(render.to_json(event, indent=None), highlight=False)
            else:
                ctx.out.print(render.event_line(event))

        ctx.call("run.get", run_id=args.run_id)  # a clear notFound before any watch
        with contextlib.suppress(KeyboardInterrupt):  # leaving a follow is not an error
            live.follow_events(ctx.client(), args.run_id, max(0, args.after), emit)
        return EXIT_OK
    events: list[dict[str, Any]] = []
    after = max(0, args.after)
    while True:
        receipt = ctx.call("run.events", {"after": after}, run_id=args.run_id)
        events.extend(receipt.get("events") or [])
        after = receipt.get("next_after") or after
        if not receipt.get("more"):
            break
    if ctx.json:
        ctx.emit_json({"events": events, "next_after": after})
    else:
        ctx.out.print(render.events_table(events))
    return EXIT_OK


def cmd_control(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    command, run_id = ctx.args.command, ctx.args.run_id
    if command == "restart":
        current = ctx.client().request("run.get", run_id=run_id)
        if not current.ok:
            raise Refused(current)
        receipt = ctx.call("run.restart", run_id=run_id, expected_revision=current.revision)
    else:
        receipt = ctx.call(f"run.{command}", run_id=run_id)
    if ctx.json:
        ctx.emit_json(receipt)
    elif command == "restart":
        ctx.out.print(Text.assemble("restarted ", (run_id, "bold"), " as ", (str(receipt.get("run_id")), "bold"),
                                    f" ({receipt.get('status')})"))
    else:
        ctx.out.print(Text.assemble(f"{command}: ", (str(receipt.get("run_id", run_id)), "bold"), " is now ",
                                    render.status_text(receipt.get("status"))))
    return EXIT_OK


def cmd_effect_resolve(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    payload: dict[str, Any] = {"effect_id": ctx.args.effect_id, "action": ctx.args.action}
    if ctx.args.output is not None:
        payload["output"] = ctx.args.output
    receipt = ctx.call("effect.resolve", payload)
    if ctx.json:
        ctx.emit_json(receipt)
    else:
        ctx.out.print(Text(f"effect {ctx.args.effect_id}: {ctx.args.action} accepted {render.compact(receipt)}"))
    return EXIT_OK


def cmd_watch(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    run_id = ctx.args.run_id
    if run_id:
        ctx.call("run.get", run_id=run_id)  # a clear notFound before any watch
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how one leaves a watch
        if ctx.json:
            for view in live.watch_views(ctx.client(), "run" if run_id else "runs", run_id):
                ctx.out.out(render.to_json(view, indent=None), highlight=False)
        else:
            live.live_watch(ctx.client(), ctx.out, run_id)
    return EXIT_OK


def cmd_status(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    ctx.show(ctx.call("host.status"), render.host_status)
    return EXIT_OK


def cmd_state_status(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    view = ctx.call("state.status")
    ctx.show(view, render.state_status)
    return EXIT_OK


def cmd_state_verify(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    ctx.client(timeout=SLOW_TIMEOUT_S)
    view = live.with_progress(ctx.err, "verifying", lambda: ctx.call("state.verify"), _spinner(ctx))
    ctx.show(view, render.verify_result)
    return EXIT_OK if view.get("ok") else EXIT_REFUSED


def cmd_state_backup(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    destination = os.path.abspath(ctx.args.destination)
    ctx.client(timeout=SLOW_TIMEOUT_S)
    view = live.with_progress(ctx.err, f"backing up to {destination}",
                              lambda: ctx.call("state.backup", {"destination": destination}), _spinner(ctx))
    ctx.show(view, render.backup_result)
    return EXIT_OK


def cmd_state_prune(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    payload = {"before": float(ctx.args.before), "apply": bool(ctx.args.apply)}
    ctx.client(timeout=SLOW_TIMEOUT_S)
    label = "pruning" if ctx.args.apply else "planning the prune"
    view = live.with_progress(ctx.err, label, lambda: ctx.call("state.prune", payload), _spinner(ctx))
    ctx.show(view, render.prune_result)
    return EXIT_OK


def cmd_host_stop(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    receipt = ctx.call("host.stop")
    ctx.show(receipt, lambda _r: Text("host stopping"))
    return EXIT_OK


def _spinner(ctx: Ctx) -> bool:
    return not ctx.json and ctx.err.is_terminal


# --- entry point ----------------------------------------------------------------------------


def _consoles() -> tuple[Console, Console]:
    out, err = Console(), Console(stderr=True)
    for console in (out, err):
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console.width = 160  # piped output: do not squeeze tables into 80 columns
    return out, err


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        # KEY=VALUE pairs may follow options (`piwf start wf --wait a=1`); argparse alone stops at the option.
        if args.command != "start" or any(item.startswith("-") for item in extras):
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        try:
            args.pairs = [*args.pairs, *(key_value(item) for item in extras)]
        except argparse.ArgumentTypeError as exc:
            parser.error(str(exc))
    out, err = _consoles()
    ctx = Ctx(args, out, err)
    try:
        return int(args.handler(ctx, parser))
    except Refused as refused:
        answer = refused.answer
        if ctx.json:
            ctx.emit_json({"outcome": answer.outcome, "error": answer.error, "revision": answer.revision,
                           "receipt": answer.receipt})
        print(f"piwf: {answer.outcome}: {answer.error}", file=sys.stderr)
        return EXIT_REFUSED
    except HostNotRunning as exc:
        print(f"piwf: {exc.one_line()}", file=sys.stderr)
        return EXIT_NO_HOST
    except KeyboardInterrupt:
        print("piwf: interrupted", file=sys.stderr)
        return 130
    except (PiwfError, TimeoutError) as exc:
        print(f"piwf: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        if ctx._client is not None:
            ctx._client.close()


if __name__ == "__main__":
    sys.exit(main())
