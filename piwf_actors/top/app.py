"""`piwf-top`: a live console of a running piwf host (`python -m piwf_actors.top.app`).

The loop gathers a `Snapshot` every `--interval` seconds (model.py), draws it
with the pure `render` (render.py) in a `rich.live.Live`, and between
refreshes reads the keyboard without blocking (the terminal is in cbreak mode
and is restored on exit, whatever the exit).

Keys: `q` quits; `j`/`k` or ↑/↓ select a pending decision; `h`/`l` or ←/→
highlight one of its choices; `enter` answers with the highlighted choice and
`1`…`9` with choice N. A choice with a text input (✎) opens a one-line prompt
at the bottom: type, `enter` sends, `esc` cancels, backspace edits (the
cbreak terminal delivers keys one by one, so the line is edited here rather
than with `input()`, which would fight with Live for the screen). An answer is
`decision.answer` with the request's revision as `expected_revision`, so an
answer to a request that changed meanwhile is refused (`conflict`), never
applied to the wrong version; the outcome is shown in the status line.

Exit status: 0 on `q` or Ctrl-C; 3 when no host is running at start. A host
that goes away later is shown as a banner and retried every refresh.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import select
import sys
import termios
import time
import tty
import uuid
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.live import Live

from piwf_actors.client import Client, HostNotRunning
from piwf_actors.errors import PiwfError
from piwf_actors.store.paths import default_state_dir
from piwf_actors.top.model import Gatherer, Prompt, Snapshot, decision_choices
from piwf_actors.top.render import render

EXIT_OK, EXIT_NO_HOST = 0, 3
ESCAPES = {"\x1b[A": "up", "\x1b[B": "down", "\x1b[C": "right", "\x1b[D": "left",
           "\x1bOA": "up", "\x1bOB": "down", "\x1bOC": "right", "\x1bOD": "left"}


# --- keyboard -------------------------------------------------------------------------------


def parse_keys(chunk: str) -> list[str]:
    """Split what the terminal sent into key names: 'up', 'enter', 'escape', 'backspace' or the character."""
    keys: list[str] = []
    i = 0
    while i < len(chunk):
        sequence = next((s for s in ESCAPES if chunk.startswith(s, i)), None)
        if sequence:
            keys.append(ESCAPES[sequence])
            i += len(sequence)
            continue
        char = chunk[i]
        keys.append({"\r": "enter", "\n": "enter", "\x1b": "escape", "\x7f": "backspace",
                     "\x08": "backspace"}.get(char, char))
        i += 1
    return keys


@contextlib.contextmanager
def cbreak(fd: int | None) -> Iterator[int | None]:
    """Put terminal `fd` in cbreak mode (keys arrive one by one, no echo, Ctrl-C still signals); restore it after."""
    if fd is None or not os.isatty(fd):
        yield None
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def read_keys(fd: int | None, timeout: float) -> list[str]:
    """Keys typed within `timeout` seconds (returns at the first batch; 'eof' on hang-up); without a terminal, waits."""
    if fd is None:
        time.sleep(max(timeout, 0.0))
        return []
    ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
    if not ready:
        return []
    data = os.read(fd, 256)
    if not data:  # the terminal hung up: nobody can type `q` any more
        return ["eof"]
    return parse_keys(data.decode("utf-8", errors="replace"))


# --- console state ------------------------------------------------------------------------------


@dataclasses.dataclass
class Answer:
    request: dict[str, Any]
    choice: str
    input: dict[str, str] | None = None


class Ui:
    """What the person did: selection, highlighted choice, prompt and status line. Keys in, actions out."""

    def __init__(self) -> None:
        self.selected_request_id: str | None = None
        self.choice_index = 0
        self.status = ""
        self.prompt: Prompt | None = None

    def view(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with this console's state; keeps the selection on a request that is still pending."""
        ids = [r.get("request_id") for r in snapshot.decisions]
        if self.selected_request_id not in ids:
            self.selected_request_id = ids[0] if ids else None
            self.choice_index = 0
        return dataclasses.replace(snapshot, selected_request_id=self.selected_request_id,
                                   choice_index=self.choice_index, status=self.status, prompt=self.prompt)

    def _selected(self, snapshot: Snapshot) -> dict[str, Any] | None:
        return next((r for r in snapshot.decisions if r.get("request_id") == self.selected_request_id), None)

    def handle(self, key: str, snapshot: Snapshot) -> str | Answer | None:
        """Apply one key; returns 'quit', an `Answer` to send, or None."""
        if self.prompt is not None:
            return self._prompt_key(key, snapshot)
        if key == "q":
            return "quit"
        ids = [r.get("request_id") for r in snapshot.decisions]
        if key in ("j", "down", "k", "up") and ids:
            index = ids.index(self.selected_request_id) if self.selected_request_id in ids else 0
            index = (index + (1 if key in ("j", "down") else -1)) % len(ids)
            self.selected_request_id, self.choice_index = ids[index], 0
            return None
        request = self._selected(snapshot)
        if request is None:
            if key == "enter" or key.isdigit():
                self.status = "no pending decision to answer"
            return None
        choices = decision_choices(request)
        if key in ("h", "left", "l", "right") and choices:
            self.choice_index = (self.choice_index + (1 if key in ("l", "right") else -1)) % len(choices)
        elif key == "enter" or (len(key) == 1 and key in "123456789"):
            index = self.choice_index if key == "enter" else int(key) - 1
            if index >= len(choices):
                self.status = f"no choice {key}: this decision has {len(choices)}"
                return None
            self.choice_index = index
            name, spec = choices[index]
            text_input = spec.get("input")
            if isinstance(text_input, dict):
                self.prompt = Prompt(str(request.get("request_id")), name, str(text_input.get("name") or "input"),
                                     str(text_input.get("prompt") or ""))
                return None
            return Answer(request, name)
        return None

    def _prompt_key(self, key: str, snapshot: Snapshot) -> Answer | None:
        assert self.prompt is not None
        if key == "escape":
            self.prompt, self.status = None, "answer cancelled"
        elif key == "backspace":
            self.prompt = dataclasses.replace(self.prompt, buffer=self.prompt.buffer[:-1])
        elif key == "enter":
            prompt, self.prompt = self.prompt, None
            request = next((r for r in snapshot.decisions if r.get("request_id") == prompt.request_id), None)
            if request is None:
                self.status = "that decision is no longer pending"
                return None
            return Answer(request, prompt.choice, {prompt.input_name: prompt.buffer})
        elif len(key) == 1 and key.isprintable():
            self.prompt = dataclasses.replace(self.prompt, buffer=self.prompt.buffer + key)
        return None


def send_answer(client: Client, answer: Answer) -> str:
    """Send `decision.answer` fenced by the request's revision; a one-line outcome for the status line."""
    request_id = str(answer.request.get("request_id"))
    response: dict[str, Any] = {"choice": answer.choice}
    if answer.input is not None:
        response["input"] = answer.input
    result = client.request("decision.answer", {"request_id": request_id, "submission_id": f"top-{uuid.uuid4().hex}",
                                                "response": response},
                            expected_revision=answer.request.get("revision"))
    who = f"{answer.request.get('node_id')} of {answer.request.get('run_id')}"
    if result.ok:
        return f"answered {answer.choice} to {who}: {result.outcome}"
    return f"{answer.choice} to {who} refused: {result.outcome}: {result.error}"


# --- the loop -------------------------------------------------------------------------------------


def _gather(gatherer: Gatherer, last: Snapshot | None) -> Snapshot:
    """A fresh snapshot, or the last one marked with why the host could not be read."""
    try:
        return gatherer.gather()
    except (HostNotRunning, PiwfError, TimeoutError, OSError) as exc:
        message = exc.one_line() if isinstance(exc, PiwfError) else str(exc)
        return dataclasses.replace(last or Snapshot(taken_at=time.time()), taken_at=time.time(), error=message)


def run(client: Client, console: Console, interval: float, fd: int | None) -> int:
    """Refresh every `interval` seconds until `q`; returns the exit status."""
    gatherer, ui = Gatherer(client), Ui()
    snapshot: Snapshot | None = None
    next_refresh = 0.0
    with Live(console=console, screen=console.is_terminal, auto_refresh=False, redirect_stderr=False,
              transient=not console.is_terminal) as live:
        while True:
            if time.monotonic() >= next_refresh or snapshot is None:
                snapshot = _gather(gatherer, snapshot)
                next_refresh = time.monotonic() + interval
            live.update(render(ui.view(snapshot), console.width), refresh=True)
            for key in read_keys(fd, next_refresh - time.monotonic()):
                action = "quit" if key == "eof" else ui.handle(key, snapshot)
                if action == "quit":
                    return EXIT_OK
                if isinstance(action, Answer):
                    try:
                        ui.status = send_answer(client, action)
                    except (HostNotRunning, PiwfError, TimeoutError, OSError) as exc:
                        ui.status = f"{action.choice} not sent: {exc}"
                    next_refresh = 0.0  # show the answered decision leave at once


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="piwf-top", description="Live console of a running piwf host: lease, "
                                     "writer, workers, runs, pending decisions (answerable here), recent events.")
    parser.add_argument("--state-dir", default=None,
                        help=f"the host's state directory (default: $PIWF_STATE_DIR, else $XDG_STATE_HOME/piwf, "
                        f"else ~/.local/state/piwf; here {default_state_dir()})")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1.0)")
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
