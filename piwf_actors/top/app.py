"""`piwf-top`: a live console of a running piwf host (`python -m piwf_actors.top.app`), k9s style.

The loop gathers a `Snapshot` every `--interval` seconds (model.py), draws it
with the pure `render` (render.py, panes.py) at the terminal's width and
height in a `rich.live.Live`, and between refreshes reads the keyboard
without blocking (keys.py: the terminal is in cbreak mode and is restored on
exit, whatever the exit). Each key goes through the pure `step`
(state.py), which returns the new `UiState` and at most one thing to do:
quit, or send a `Command` the person has confirmed with `y`.

Keys (also behind `?`): j/k ↑/↓ PgUp/PgDn g/G move in the focused pane
(runs or decisions, `tab` switches); `enter` opens/closes the selected run's
detail (runs) or answers with the highlighted choice (decisions); `/`
filters the runs, `s` cycles their sort; `c` `p` `r` `R` cancel, pause,
resume, restart the selected run; `e` resolves its ambiguous effect (confirm
or retry); `h`/`l` ←/→ highlight a choice of the selected decision, `1`…`9`
answer with choice N; a choice with a text input (✎) opens a prompt line
first. Every request asks "…? y/n" on the confirmation line and is sent only
on `y`. `q` or Ctrl-C leaves.

Requests: run.cancel / run.pause / run.resume with the run id; run.restart
with `expected_revision` = the run's revision from its last run.get;
effect.resolve with the chosen action; decision.answer with the request's
revision as `expected_revision` (an answer to a request that changed
meanwhile is refused as `conflict`, never applied to the wrong version). The
outcome — accepted, or the host's one-line error — goes to the status line,
and the screen refreshes at once.

Exit status: 0 on `q` or Ctrl-C; 3 when no host is running at start. A host
that goes away later is shown as a banner and retried every refresh.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import uuid

from rich.console import Console
from rich.live import Live

from piwf_actors import __version__
from piwf_actors.client import Client, HostNotRunning
from piwf_actors.errors import PiwfError
from piwf_actors.paths import default_state_dir
from piwf_actors.top.keys import cbreak, read_keys
from piwf_actors.top.model import Gatherer, Snapshot
from piwf_actors.top.render import plan, render
from piwf_actors.top.state import QUIT, Command, UiState, normalize, step

EXIT_OK, EXIT_NO_HOST = 0, 3
READ_ERRORS = (HostNotRunning, PiwfError, TimeoutError, OSError)


def send(client: Client, command: Command) -> str:
    """Send a confirmed `command`; a one-line outcome for the status line."""
    payload = dict(command.payload)
    if command.operation == "decision.answer":
        payload["submission_id"] = f"top-{uuid.uuid4().hex}"
    try:
        result = client.request(command.operation, payload, run_id=command.run_id,
                                expected_revision=command.expected_revision)
    except READ_ERRORS as exc:
        message = exc.one_line() if isinstance(exc, PiwfError) else str(exc)
        return f"{command.what}: no answer: {message}"
    if not result.ok:
        return f"{command.what}: {result.outcome}: {result.error}"
    receipt = result.receipt if isinstance(result.receipt, dict) else {}
    if command.operation == "run.restart" and receipt.get("run_id"):
        return f"{command.what}: {result.outcome}, new run {receipt['run_id']}"
    if receipt.get("status"):
        return f"{command.what}: {result.outcome} ({receipt['status']})"
    return f"{command.what}: {result.outcome}"


# --- the loop -------------------------------------------------------------------------------------


def _gather(gatherer: Gatherer, last: Snapshot | None, selected_run_id: str | None) -> Snapshot:
    """A fresh snapshot, or the last one marked with why the host could not be read."""
    try:
        return gatherer.gather(selected_run_id)
    except READ_ERRORS as exc:
        message = exc.one_line() if isinstance(exc, PiwfError) else str(exc)
        return dataclasses.replace(last or Snapshot(taken_at=time.time()), taken_at=time.time(), error=message)


def _with_detail(gatherer: Gatherer, snapshot: Snapshot, run_id: str | None) -> Snapshot:
    """`snapshot` with the run.get view (and stored graph) of `run_id`, read now when the selection moved
    since the refresh."""
    if run_id is None or snapshot.detail_run_id == run_id or snapshot.error:
        return snapshot
    try:
        detail = gatherer.run_detail(run_id)
    except READ_ERRORS:
        detail = None  # the next refresh shows why
    return dataclasses.replace(snapshot, detail_run_id=run_id, detail=detail,
                               detail_graph=gatherer.run_graph(run_id))


def run(client: Client, console: Console, interval: float, fd: int | None) -> int:
    """Refresh every `interval` seconds until `q`; returns the exit status."""
    gatherer, state = Gatherer(client), UiState()
    snapshot: Snapshot | None = None
    next_refresh = 0.0
    with Live(console=console, screen=console.is_terminal, auto_refresh=False, redirect_stderr=False,
              transient=not console.is_terminal) as live:
        while True:
            if time.monotonic() >= next_refresh or snapshot is None:
                snapshot = _gather(gatherer, snapshot, state.selected_run_id)
                next_refresh = time.monotonic() + interval
            state = normalize(state, snapshot)
            snapshot = _with_detail(gatherer, snapshot, state.selected_run_id)
            width, height = console.width, console.height if console.is_terminal else None
            live.update(render(snapshot, width, height, state), refresh=True)
            page = max(1, plan(snapshot, state, width, height).runs - 3)
            for key in read_keys(fd, next_refresh - time.monotonic()):
                state, outcome = step(state, key, snapshot, page)
                if outcome == QUIT:
                    return EXIT_OK
                if isinstance(outcome, Command):
                    state = dataclasses.replace(state, status=send(client, outcome))
                    next_refresh = 0.0  # show what the request changed at once


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="piwf-top", description="Live console of a running piwf host: lease, "
                                     "writer, workers, channels, runs (filter, sort, detail, cancel/pause/resume/"
                                     "restart, resolve ambiguous effects), pending decisions (answerable here), "
                                     "recent events. Press ? in it for every key.")
    parser.add_argument("--state-dir", default=None,
                        help=f"the host's state directory (default: $PIWF_STATE_DIR, else $XDG_STATE_HOME/piwf, "
                        f"else ~/.local/state/piwf; here {default_state_dir()})")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1.0)")
    parser.add_argument("--version", action="version", version=f"piwf-top {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.interval > 0:
        build_parser().error("--interval must be positive")
    client = Client(args.state_dir, client_id=f"piwf-top-{uuid.uuid4().hex[:8]}", timeout=10.0)
    try:
        client.connect()
    except HostNotRunning as exc:
        print(f"piwf-top: {exc.one_line()}", file=sys.stderr)
        return EXIT_NO_HOST
    try:
        fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        with cbreak(fd) as keyboard:
            return run(client, Console(), args.interval, keyboard)
    except KeyboardInterrupt:  # Ctrl-C is a normal way to leave
        return EXIT_OK
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
