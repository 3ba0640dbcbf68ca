"""The `piwf` commands that follow the host over time: --wait, events --follow,
watch (rich.live) and the progress display of slow state operations.

A watch runs on a connection of its own (the host closes a connection that
stops reading, and a reconnecting request would lose the subscription);
requests made meanwhile go through the command's main client.
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
from piwf_actors.client import Client, HostNotRunning


class Refused(Exception):
    """An operation the host answered with a refusal (exit status 1)."""

    def __init__(self, answer: Any) -> None:
        super().__init__(f"{answer.outcome}: {answer.error}")
        self.answer = answer


class HostWentAway(HostNotRunning):
    """The host closed the watch connection (it stopped)."""


def watch_views(client: Client, topic: str, run_id: str | None = None) -> Iterator[Any]:
    """Yield each watch event's payload on a fresh connection; HostWentAway when the host closes it."""
    watcher = Client(socket_path=client.socket_path, client_id=client.client_id, timeout=client.timeout)
    try:
        for event in watcher.watch(topic, run_id=run_id):
            if event.get("topic") == "overflow":
                raise HostWentAway(client.socket_path, "the host dropped this watch (overflow)")
            yield event.get("payload")
    finally:
        watcher.close()
    raise HostWentAway(client.socket_path, "the host closed the connection")


def wait_for_run(client: Client, run_id: str) -> dict[str, Any] | None:
    """Follow `run_id` until it is done, failed or cancelled; returns its last view (None: it vanished)."""
    for view in watch_views(client, "run", run_id):
        if view is None or view.get("status") in render.TERMINAL:
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
        if view is None or view.get("status") in render.TERMINAL:
            drain()
            break
    return after


def live_watch(client: Client, console: Console, run_id: str | None) -> None:
    """A live Rich view of the runs (or of one run) until Ctrl-C or the host stops."""
    topic = "run" if run_id else "runs"
    waiting = Text(f"waiting for the host ({topic}) …", style="dim")
    with Live(waiting, console=console, auto_refresh=False, redirect_stderr=False,
              vertical_overflow="visible" if not console.is_terminal else "ellipsis") as live:
        for view in watch_views(client, topic, run_id):
            if run_id:
                renderable = render.run_view(view)
            else:
                view = view or {}
                renderable = render.runs_table(view.get("runs") or [], view.get("counts"),
                                               title="piwf runs (Ctrl-C to leave)")
            live.update(renderable, refresh=True)


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
