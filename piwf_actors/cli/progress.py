"""What `piwf start --wait` (and `piwf watch RUN` off a terminal) prints while it waits: a line per node
start and end, and, when the run parks, why and the exact command that moves it on. Pure functions of
the run views (and the pending request), so they are tested without a host.

A wait is named in the words of `piwf show` and piwf-top (workflows/graph_run.py): `sleeping until …`,
`waiting for a message on 'go' (…)`, `waiting for children: 2 of 3 open`, `waiting for an answer
(decision, deadline in …)`; only a person's or an agent's request points at `piwf answer` / `piwf inbox`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text

from piwf_actors.workflows.graph_run import request_words, wait_words

#: Node statuses after which the attempt is over.
NODE_FINISHED = ("succeeded", "failed", "timed_out")


class NodeProgress:
    """Successive views of one run → one line when a node (attempt) starts and one when it ends.

    Views are coalesced by the host, so a node may first be seen already finished: then only its end
    is printed. A node run again (a retry, a loop) starts a new line pair under its new attempt id.
    """

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._seen: dict[str, tuple[Any, Any]] = {}
        self._now = now  # the clock a wake-up or a deadline is written against (`in 59m58s`)

    def update(self, view: dict[str, Any]) -> list[Text]:
        lines: list[Text] = []
        for node in view.get("nodes") or []:
            node_id, attempt, status = node.get("node_id"), node.get("attempt_id"), node.get("status")
            before = self._seen.get(str(node_id))
            if before == (attempt, status):
                continue
            self._seen[str(node_id)] = (attempt, status)
            fresh = before is None or before[0] != attempt
            if node.get("copied_from"):
                if fresh:
                    lines.append(_line(node_id, "copied", "dim", "from the parent run, not run again"))
                continue
            attempts = node.get("attempts") or 1
            if fresh and status not in NODE_FINISHED:
                lines.append(_line(node_id, "started", "blue", f"attempt {attempts}" if attempts > 1 else ""))
            if status in NODE_FINISHED:
                error = node.get("error") or {}
                detail = str(error.get("message") or "") if isinstance(error, dict) else str(error)
                lines.append(_line(node_id, str(status), "green" if status == "succeeded" else "red", detail))
            elif status == "waiting" and (fresh or before is None or before[1] != "waiting"):
                lines.append(_line(node_id, waiting_words(view, str(node_id), self._now()), "yellow", ""))
        return lines


def waiting_words(view: dict[str, Any], node_id: str, now: float) -> str:
    """What `node_id` waits for, in the words of `piwf show`: its open wait (a sleep, a message, its
    children) or its open request (an answer); `waiting` when the view lists neither (yet)."""
    for wait in view.get("waits") or []:
        if isinstance(wait, dict) and wait.get("node_id") == node_id:
            return wait_words(wait, now, zoned=True)
    for request in view.get("waiting") or []:
        if isinstance(request, dict) and request.get("node_id") == node_id:
            return request_words(request, now)
    return "waiting"


def _line(node_id: Any, what: str, style: str, detail: str) -> Text:
    line = Text("node ", style="dim")
    line.append(str(node_id), style="bold")
    line.append(f" {what}", style=style)
    if detail:
        line.append(f": {detail}" if what in ("failed", "timed_out") else f" ({detail})", style="dim")
    return line


def park_key(view: dict[str, Any]) -> tuple[Any, Any] | None:
    """What a park hint is about (printed once per key); None when the run is not parked."""
    if view.get("status") != "parked":
        return None
    return view.get("park_reason"), view.get("park_detail")


def parked_on_wait(view: dict[str, Any]) -> dict[str, Any] | None:
    """The open wait (sleep, message, children) a run parked `waiting` is parked on; None when it waits
    for a request (an answer) instead."""
    detail = view.get("park_detail")
    return next((wait for wait in view.get("waits") or []
                 if isinstance(wait, dict) and detail and wait.get("wait_id") == detail), None)


def park_hint(view: dict[str, Any], request: dict[str, Any] | None, command: Callable[..., str],
              short: Callable[[str, str], str], now: float | None = None) -> list[str]:
    """Lines saying why the run is parked and the command that moves it on.

    `request` is the pending interactive request the run waits for (from `interaction.list`), if found;
    `command(*words)` renders a `piwf …` command line; `short(kind, id)` a unique prefix of an id; `now`
    the time a wake-up is written against (default: the clock).
    """
    run_id, reason, detail = str(view.get("run_id")), view.get("park_reason"), view.get("park_detail")
    run = short("run", run_id)
    if reason == "waiting":
        wait = parked_on_wait(view)
        if wait is not None:
            return [_wait_hint(run_id, run, wait, command, time.time() if now is None else now)]
        if request is None:
            return [f"run {run_id} waits for an answer to {detail}; see {command('inbox')}"]
        return _request_hint(run_id, request, command, short("request", str(request["request_id"])))
    if reason == "paused":
        return [f"run {run_id} is paused; resume it with: {command('resume', run)}"]
    if reason == "no_progress":
        return [f"run {run_id} is parked: its worker died before committing anything; retry it with: "
                f"{command('resume', run)}"]
    if reason == "ambiguous_effect":
        effect = short("effect", str(detail)) if detail else "EFFECT"
        return [f"run {run_id} is parked: the outcome of side effect {detail} is unknown; settle it with: "
                f"{command('effect', 'resolve', effect, 'confirm')} (it happened) or "
                f"{command('effect', 'resolve', effect, 'retry')} (run the node again)"]
    return [f"run {run_id} is parked ({reason}{f': {detail}' if detail else ''})"]


def _wait_hint(run_id: str, run: str, wait: dict[str, Any], command: Callable[..., str], now: float) -> str:
    """A sleep goes on by itself; a message wait takes a `piwf send`; a fan-out waits for its children."""
    where = f"run {run_id} is {wait_words(wait, now, zoned=True)} at node {wait.get('node_id')}"
    kind = wait.get("kind")
    if kind == "sleep":
        return f"{where}; it goes on by itself then"
    if kind == "message":
        return f"{where}; send one with: {command('send', run, str(wait.get('topic')), '--value', 'JSON')}"
    if kind == "event":
        return f"{where}; emit one with: {command('emit', str(wait.get('topic')), '--value', 'JSON')}"
    if kind == "children":
        return f"{where}; see them with: {command('list', '--parent', run)}"
    return where


def _request_hint(run_id: str, request: dict[str, Any], command: Callable[..., str], rid: str) -> list[str]:
    contract = request.get("contract") or {}
    node, kind = request.get("node_id"), request.get("kind")
    if kind == "decision":
        title = " — ".join(str(part) for part in (contract.get("title"), contract.get("summary")) if part)
        lines = [f"run {run_id} waits for a decision at node {node}: {title}",
                 f"  request {request['request_id']}; answer with one of:"]
        commands = []
        for key, choice in (contract.get("choices") or {}).items():
            words = ["answer", rid, str(key)]
            text_input = (choice or {}).get("input")
            if text_input:
                words += ["--input", f"{text_input.get('name')}=TEXT"]
            commands.append((command(*words), str((choice or {}).get("label") or key)))
        width = max((len(line) for line, _ in commands), default=0)
        lines += [f"    {line.ljust(width)}  # {label}" for line, label in commands]
        return lines
    if kind == "checkpoint":
        return [f"run {run_id} waits at checkpoint {node}: {contract.get('prompt', '')}",
                f"  request {request['request_id']}; answer with (JSON is the answer as JSON):",
                f"    {command('answer', rid, '--value', 'JSON')}"]
    session = request.get("session_id")
    words = ["submit", rid, *(["--session", str(session)] if session else []), "--value", "JSON"]
    return [f"run {run_id} waits for an agent's output at node {node}: {contract.get('prompt', '')}",
            f"  request {request['request_id']}; submit it with (JSON is the output as JSON):",
            f"    {command(*words)}"]
