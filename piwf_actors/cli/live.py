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
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from piwf_actors.cli import render
from piwf_actors.cli.context import Refused
from piwf_actors.client import Client, HostNotRunning


class HostWentAway(HostNotRunning):
    """The host closed the watch connection (it stopped)."""


def watch_events(client: Client, topic: str, run_id: str | None = None) -> Iterator[tuple[str, Any]]:
    """Yield (topic, payload) of each event of a watch on a fresh connection; HostWentAway when the
    host closes it."""
    watcher = Client(socket_path=client.socket_path, client_id=client.client_id, timeout=client.timeout)
    try:
        for event in watcher.watch(topic, run_id=run_id):
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


def live_watch(client: Client, console: Console, run_id: str | None) -> dict[str, Any] | None:
    """A live Rich view of the runs until Ctrl-C or the host stops, or of one run until it ends
    (returns its last view)."""
    topic = "run" if run_id else "runs"
    waiting = Text(f"waiting for the host ({topic}) …", style="dim")
    with Live(waiting, console=console, auto_refresh=False, redirect_stderr=False,
              vertical_overflow="visible" if not console.is_terminal else "ellipsis") as live:
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
