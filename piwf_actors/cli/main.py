"""`piwf`: the client command of a piwf host (protocol v1 over `<state_dir>/host.sock`).

Exit status: 0 ok; 1 the host refused the operation (rejected, conflict,
notFound, unavailable, claimLost), no id matches a given prefix (or the
named resource manager has no file), a run waited for (`start --wait`, `watch
RUN`, `logs -f`) failed or was cancelled, `state verify` found violations,
`workflows` found a file that fails to load, or `host stop` gave up waiting
for the host to stop; 2 bad usage, or an id prefix
that matches several ids (they are listed); 3 no host is running (or it went
away). `list`, `show`, `events`, `logs` and `graph RUN` read the state
database read-only when no host runs. `--json`, before or after the command, prints
JSON on stdout instead of tables (the host's receipt, or the refused
response).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from piwf_actors import __version__
from piwf_actors.cli import (
    channels,
    events,
    graph,
    http_tokens,
    inbox,
    live,
    logs,
    messages,
    render,
    render_state,
    resources,
    runs,
    schedules,
    state_migrate,
    workflows,
)
from piwf_actors.cli.context import EXIT_NO_HOST, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Ctx, Refused
from piwf_actors.cli.ids import Ambiguous, NoMatch
from piwf_actors.cli.values import cutoff, json_value, key_value
from piwf_actors.client import HostNotRunning
from piwf_actors.errors import PiwfError
from piwf_actors.paths import default_state_dir
from piwf_actors.store.engines.registry import url_examples

SLOW_TIMEOUT_S = 3600.0  # backup/verify/prune on a large database; a socket timeout would resend the request

# --- argument parsing ---------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """--json and --state-dir; a subcommand's copy uses SUPPRESS so it never resets a value given before it."""
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="print JSON (full ids, the host's answers) instead of tables")
    parser.add_argument("--state-dir", default=argparse.SUPPRESS if suppress else None,
                        help=f"the host's state directory (default: $PIWF_STATE_DIR, else $XDG_STATE_HOME/piwf, "
                        f"else ~/.local/state/piwf; here {default_state_dir()})")
    parser.add_argument("--database", default=argparse.SUPPRESS if suppress else None, metavar="URL",
                        help="the state database read when no host runs (list, show, events, logs) and copied "
                        f"by state migrate: a path or {url_examples()} (default: "
                        "$PIWF_DATABASE_URL, else <state-dir>/state.db)")


def build_parser() -> argparse.ArgumentParser:
    # Separate parsers, not shared parent actions: set_defaults on one would change them all.
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, suppress=True)
    parser = argparse.ArgumentParser(
        prog="piwf", description="Talk to a piwf host: start and follow runs, read their output, answer "
        "decisions, control runs, inspect the host and its state. Ids may be given as unique prefixes, or by "
        "their ends as tables show them.",
        epilog="exit status: 0 ok; 1 refused, not found, or a waited-for run failed; 2 usage or an ambiguous id "
        "prefix; 3 no host is running")
    _add_common(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"piwf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(parent: Any, name: str, help_text: str, handler: Any, description: str | None = None
            ) -> argparse.ArgumentParser:
        p = parent.add_parser(name, parents=[common], help=help_text, description=description or help_text)
        p.set_defaults(handler=handler)
        return p

    workflows.add_command(add, sub)
    graph.add_command(add, sub)
    runs.add_commands(add, sub)
    messages.add_commands(add, sub)
    events.add_commands(add, sub)
    logs.add_command(add, sub)
    effect = add(sub, "effect", "settle side effects", None).add_subparsers(dest="effect_command", required=True,
                                                                           metavar="ACTION")
    p = add(effect, "resolve", "confirm or retry an ambiguous effect", cmd_effect_resolve)
    p.add_argument("effect_id", metavar="EFFECT",
                   help="an effect id, a unique start of one, or its end as tables show it")
    p.add_argument("action", choices=("confirm", "retry"))
    p.add_argument("--output", type=json_value, help="the effect's output (JSON; @FILE: from a file) when confirming")
    add(sub, "status", "host status: role, lease, workers, runs, writer", cmd_status)
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
    state_migrate.add_command(add, state)
    inbox.add_commands(add, sub)
    channels.add_commands(add, sub)
    schedules.add_commands(add, sub)
    resources.add_commands(add, sub)
    http_tokens.add_commands(add, sub)
    host = add(sub, "host", "the host process", None).add_subparsers(dest="host_command", required=True,
                                                                    metavar="ACTION")
    add(host, "status", "host status: role (active or standby), lease, workers, runs, writer", cmd_status)
    p = add(host, "stop", "stop the host cleanly; waits until it has stopped (its lock is free)", cmd_host_stop)
    p.add_argument("--no-wait", dest="wait", action="store_false",
                   help="return once the host has been asked to stop, not once it has stopped")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="wait at most this long for the host to stop; exit 1 if it has not (default 30)")
    return parser


# --- commands -------------------------------------------------------------------------------


def cmd_effect_resolve(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    ctx.args.effect_id = ctx.resolve("effect", ctx.args.effect_id)
    payload: dict[str, Any] = {"effect_id": ctx.args.effect_id, "action": ctx.args.action}
    if ctx.args.output is not None:
        payload["output"] = ctx.args.output
    receipt = ctx.call("effect.resolve", payload)
    if ctx.json:
        ctx.emit_json(receipt)
    else:
        ctx.out.print(Text(f"effect {ctx.args.effect_id}: {ctx.args.action} accepted {render.compact(receipt)}"))
    return EXIT_OK


def cmd_status(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    ctx.show(ctx.call("host.status"), render_state.host_status)
    return EXIT_OK


def cmd_state_status(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    view = ctx.call("state.status")
    ctx.show(view, render_state.state_status)
    return EXIT_OK


def cmd_state_verify(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    ctx.client(timeout=SLOW_TIMEOUT_S)
    view = live.with_progress(ctx.err, "verifying", lambda: ctx.call("state.verify"), _spinner(ctx))
    ctx.show(view, render_state.verify_result)
    return EXIT_OK if view.get("ok") else EXIT_REFUSED


def cmd_state_backup(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    destination = os.path.abspath(ctx.args.destination)
    ctx.client(timeout=SLOW_TIMEOUT_S)
    view = live.with_progress(ctx.err, f"backing up to {destination}",
                              lambda: ctx.call("state.backup", {"destination": destination}), _spinner(ctx))
    ctx.show(view, render_state.backup_result)
    return EXIT_OK


def cmd_state_prune(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    payload = {"before": float(ctx.args.before), "apply": bool(ctx.args.apply)}
    ctx.client(timeout=SLOW_TIMEOUT_S)
    label = "pruning" if ctx.args.apply else "planning the prune"
    view = live.with_progress(ctx.err, label, lambda: ctx.call("state.prune", payload), _spinner(ctx))
    ctx.show(view, render_state.prune_result)
    return EXIT_OK


def cmd_host_stop(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    from piwf_actors.cli.host import wait_until_gone
    from piwf_actors.paths import StatePaths

    receipt = ctx.call("host.stop")
    if not ctx.args.wait:
        ctx.show(receipt, lambda _r: Text("host stopping"))
        return EXIT_OK
    ctx.close()  # the host closes this connection as it stops
    ctx.note("piwf: host stopping; waiting until it has stopped …")
    stopped = wait_until_gone(StatePaths.resolve(ctx.args.state_dir), max(0.0, ctx.args.timeout))
    if ctx.json:
        ctx.emit_json({**receipt, "stopped": stopped})
    elif stopped:
        ctx.out.print(Text("host stopped"))
    if not stopped:
        print(f"piwf: the host did not stop within {ctx.args.timeout:g} s (it is still stopping)", file=sys.stderr)
        return EXIT_REFUSED
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
    except NoMatch as exc:
        if ctx.json:
            ctx.emit_json({"outcome": "notFound", "error": str(exc)})
        print(f"piwf: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except Ambiguous as exc:
        if ctx.json:
            ctx.emit_json({"outcome": "ambiguous", "error": str(exc), "matches": exc.matches, "more": exc.more})
        print(f"piwf: {exc}:", *exc.lines(), sep="\n", file=sys.stderr)
        return EXIT_USAGE
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
        ctx.close()


if __name__ == "__main__":
    sys.exit(main())
