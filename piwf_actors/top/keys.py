"""The keyboard of `piwf-top`: the terminal in cbreak mode and what it sends, split into key names.

`parse_keys` is pure (tested without a terminal); `cbreak` and `read_keys`
touch the terminal and run in the app's (main) thread. In cbreak mode keys
arrive one by one without echo and Ctrl-C still raises SIGINT (the app
leaves with status 0); a `\\x03` byte that arrives anyway is `ctrl-c`.

Key names: a printable character stands for itself (`j`, `R`, `/`, `1`);
special keys are `up down left right pgup pgdn home end tab shift-tab enter
escape backspace ctrl-c`, and `eof` when the terminal hung up. An escape
sequence the console does not know (F1, Alt+x, …) is `unknown` as a whole,
so its bytes are never taken for ordinary keys (the `1` inside `ESC [ 1 5 ~`
must not pick a decision's first choice).
"""

from __future__ import annotations

import contextlib
import os
import select
import termios
import time
import tty
from collections.abc import Iterator

# CSI (`ESC [ … final`) and SS3 (`ESC O x`) sequences the console understands.
ESCAPES = {
    "\x1b[A": "up", "\x1b[B": "down", "\x1b[C": "right", "\x1b[D": "left",
    "\x1bOA": "up", "\x1bOB": "down", "\x1bOC": "right", "\x1bOD": "left",
    "\x1b[5~": "pgup", "\x1b[6~": "pgdn", "\x1b[Z": "shift-tab",
    "\x1b[H": "home", "\x1bOH": "home", "\x1b[1~": "home", "\x1b[7~": "home",
    "\x1b[F": "end", "\x1bOF": "end", "\x1b[4~": "end", "\x1b[8~": "end",
}
CONTROLS = {"\r": "enter", "\n": "enter", "\t": "tab", "\x7f": "backspace", "\x08": "backspace", "\x03": "ctrl-c"}


def _escape_length(chunk: str, start: int) -> int:
    """Length of the escape sequence at `chunk[start]` (a `\\x1b`); 1 for a lone Esc."""
    if chunk.startswith("\x1b[", start):
        end = start + 2
        while end < len(chunk) and not ("\x40" <= chunk[end] <= "\x7e"):  # parameters, up to the final byte
            end += 1
        return min(end + 1, len(chunk)) - start
    if chunk.startswith("\x1bO", start) and start + 2 < len(chunk):
        return 3
    return 1


def parse_keys(chunk: str) -> list[str]:
    """Split what the terminal sent into key names (see the module docstring)."""
    keys: list[str] = []
    i = 0
    while i < len(chunk):
        char = chunk[i]
        if char == "\x1b":
            length = _escape_length(chunk, i)
            sequence = chunk[i:i + length]
            keys.append("escape" if length == 1 else ESCAPES.get(sequence, "unknown"))
            i += length
            continue
        keys.append(CONTROLS.get(char, char))
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
