"""The `piwf` commands that follow the host over time: start --wait, events --follow, watch
(rich.live) and the progress display of slow state operations.

A watch runs on a connection of its own (the host closes a connection that
stops reading, and a reconnecting request would lose the subscription);
requests made meanwhile go through the command's main client. A `run` watch
carries two topics: `run` (the run view, whenever it changed) and
`node_output` (a running shell node's output as it is printed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from piwf_actors.cli import render
from piwf_actors.cli.context import Refused
from piwf_actors.cli.progress import NodeProgress
from piwf_actors.client import Client, HostNotRunning


class HostWentAway(HostNotRunning):
    """The host closed the watch connection (it stopped)."""


def watch_events(client: Client, topic: str, run_id: str | None = None, *,
                 output_so_far: bool = False) -> Iterator[tuple[str, Any]]:
    """Yield (topic, payload) of each event of a watch on a fresh connection; HostWentAway when the
    host closes it. `output_so_far`: a run watch starts with what its running node printed already."""
    watcher = Client(socket_path=client.socket_path, client_id=client.client_id, timeout=client.timeout)
    try:
        for event in watcher.watch(topic, run_id=run_id, output_so_far=output_so_far):
            if event.get("topic") == "overflow":
                raise HostWentAway(client.socket_path, "the host dropped this watch (overflow)")
            yield str(event.get("topic")), event.get("payload")
    finally:
        watcher.close()
    raise HostWentAway(client.socket_path, "the host closed the connection")


def watch_views(client: Client, topic: str, run_id: str | None = None) -> Iterator[Any]:
    """The views of a watch (its own topic's payloads; a run's live output is left out)."""
    for event_topic, payload in watch_events(client, topic, run_id):
        if event_topic == topic:
            yield payload


def ended(view: dict[str, Any] | None) -> bool:
    return view is None or view.get("status") in render.TERMINAL


def exit_status(view: dict[str, Any] | None) -> int:
    """How a command that waited for a run exits: 0 when it is done, 1 when it failed, was cancelled
    or vanished (pruned)."""
    return 0 if view is not None and view.get("status") == "done" else 1


def wait_for_run(client: Client, run_id: str,
                 on_view: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
    """Follow `run_id` until it is done, failed or cancelled; returns its last view (None: it vanished).
    `on_view` sees every view before that (progress lines, park hints)."""
    for view in watch_views(client, "run", run_id):
        if view is not None and on_view is not None:
            on_view(view)
        if ended(view):
            return view
    return None  # not reached: watch_views raises when the stream ends


def follow_events(client: Client, run_id: str, after: int, emit: Callable[[dict[str, Any]], None]) -> int:
    """Print the run's events after `after` as they are committed until the run ends; returns the last seq."""

    def drain() -> None:
        nonlocal after
        while True:
            answer = client.request("run.events", {"after": after}, run_id=run_id)
            if not answer.ok:
                raise Refused(answer)
            for event in answer.receipt.get("events") or []:
                emit(event)
                after = max(after, int(event.get("seq") or 0))
            if not answer.receipt.get("more"):
                return

    for view in watch_views(client, "run", run_id):
        drain()
        if ended(view):
            drain()
            break
    return after


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


def _run_state(run: dict[str, Any]) -> str:
    """`status` plus why, when there is a why: `parked (waiting)`, `failed (node_failed)`."""
    why = run.get("park_reason") if run.get("status") == "parked" else run.get("error_code")
    return f"{run.get('status')}" + (f" ({why})" if why else "")


class WatchLines:
    """Successive watch views → plain lines, one per change (what `piwf watch` prints to a pipe or a file).

    A `runs` view is the newest runs: a line for each run whose status (or park reason, error) differs
    from the last one printed for it. A `run` view is one run: a line when its status changes and one per
    node start and end (`progress.NodeProgress`, as `start --wait` prints them). Lines carry the time
    and full ids; nothing is redrawn.
    """

    def __init__(self) -> None:
        self._states: dict[str, str] = {}  # the last `runs` view's runs: run id → the state printed
        self._run_state: str | None = None  # a `run` view's last state printed
        self._nodes = NodeProgress()

    def runs(self, view: dict[str, Any] | None) -> list[str]:
        if view is None:
            return []
        lines = []
        shown: dict[str, str] = {}
        for run in reversed(view.get("runs") or []):  # oldest first, as they happened
            run_id, state = str(run.get("run_id")), _run_state(run)
            shown[run_id] = state
            if self._states.get(run_id) != state:
                lines.append(f"{_stamp()} {run_id} {run.get('workflow')} {state}")
        # Only the runs of this view are remembered: a view holds the newest runs, so one that has left
        # it does not come back, and a watch left running for weeks keeps as many entries as a view has.
        self._states = shown
        return lines

    def run(self, view: dict[str, Any] | None) -> list[str]:
        if view is None:
            return [f"{_stamp()} the run is gone (pruned)"]
        lines = [f"{_stamp()} {line.plain}" for line in self._nodes.update(view)]
        state = _run_state(view)
        if self._run_state != state:
            self._run_state = state
            line = f"{_stamp()} {view.get('run_id')} {view.get('workflow')} {state}"
            # The run's end comes after its last node; any other change before the nodes it led to.
            lines = [*lines, line] if ended(view) else [line, *lines]
        return lines


def plain_watch(client: Client, console: Console, run_id: str | None) -> dict[str, Any] | None:
    """`live_watch` for an output that is not a terminal: plain lines, flushed one by one."""
    topic = "run" if run_id else "runs"
    lines = WatchLines()
    for view in watch_views(client, topic, run_id):
        for line in lines.run(view) if run_id else lines.runs(view):
            console.out(line, highlight=False)
            console.file.flush()
        if run_id and ended(view):
            return view
    return None


def live_watch(client: Client, console: Console, run_id: str | None) -> dict[str, Any] | None:
    """A live Rich view of the runs until Ctrl-C or the host stops, or of one run until it ends
    (returns its last view). Not on a terminal, plain lines instead (`plain_watch`): a live display
    there would print nothing until it ends."""
    if not console.is_terminal:
        return plain_watch(client, console, run_id)
    topic = "run" if run_id else "runs"
    waiting = Text(f"waiting for the host ({topic}) …", style="dim")
    with Live(waiting, console=console, auto_refresh=False, redirect_stderr=False,
              vertical_overflow="ellipsis") as live:
        for view in watch_views(client, topic, run_id):
            if run_id:
                live.update(render.run_view(view), refresh=True)
                if ended(view):
                    return view
            else:
                view = view or {}
                live.update(render.runs_table(view.get("runs") or [], view.get("counts"),
                                              title="piwf runs (Ctrl-C to leave)"), refresh=True)
    return None


def with_progress(console: Console, label: str, work: Callable[[], Any], enabled: bool) -> Any:
    """Run `work` on a thread while a spinner shows elapsed time; returns its result (or raises its error)."""
    if not enabled:
        return work()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, name="piwf-request", daemon=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        progress.add_task(label, total=None)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
    if "error" in box:
        raise box["error"]
    return box.get("value")
