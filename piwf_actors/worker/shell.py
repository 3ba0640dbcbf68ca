"""Run a shell node's command: own process group, capped output, hard timeout.

`run_shell` is called by the worker in the thread that executes the node and
blocks until the command is finished. The command runs with
`start_new_session=True`, so it and everything it starts share a process
group that `terminate_tree` can signal as a whole.

Output: stdout and stderr are read with a selector while the command runs
(a chatty child never blocks on a full pipe), and at most 1 MiB of each is
kept; the rest is counted and dropped, and the text gets the marker
`"\\n…[truncated N bytes]"`. Bytes are decoded as UTF-8 with
`errors="replace"`.

Like `subprocess.run`, the command is finished when its process has exited
and both pipes are closed: a background process still holding stdout keeps
the node running until it exits or the timeout kills the whole group.
"""

from __future__ import annotations

import logging
import os
import selectors
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from piwf_actors.worker.termination import process_start_identity, terminate_tree
from piwf_actors.workflows.context import NodeContext, evaluate
from piwf_actors.workflows.kinds.shell import ShellSpec

logger = logging.getLogger(__name__)

OUTPUT_CAP = 1_048_576
_CHUNK = 65_536
_POLL_S = 0.05
_DRAIN_AFTER_KILL_S = 1.0
_REAP_S = 5.0


@dataclass(frozen=True, slots=True)
class ShellResult:
    """`output` is `{stdout, stderr, exit_code, duration_ms}`; `exit_code` is
    negative when a signal ended the command and None when it never started.
    `error` is a one-line reason when `outcome == "failed"`."""

    outcome: Literal["ok", "failed"]
    output: dict[str, Any]
    error: str | None = None
    timed_out: bool = False
    cancelled: bool = False


@dataclass
class _Capture:
    """Keeps the first `cap` bytes of a stream and counts the rest."""

    stream: str = "stdout"
    cap: int = OUTPUT_CAP
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.dropped += max(0, len(data) - max(room, 0))

    def text(self) -> str:
        data, dropped = bytes(self.kept), self.dropped
        if dropped:
            # Cutting at the cap may split a character; drop its partial bytes
            # instead of showing a replacement character.
            partial = _incomplete_utf8_tail(data)
            data, dropped = data[: len(data) - partial], dropped + partial
        text = data.decode("utf-8", errors="replace")
        return text + f"\n…[truncated {dropped} bytes]" if dropped else text


def _incomplete_utf8_tail(data: bytes) -> int:
    """How many trailing bytes form an unfinished UTF-8 sequence (0..3)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # continuation byte: keep looking for the lead byte
        needed = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
        return back if needed > back else 0
    return 0


class _CommandError(Exception):
    """The command, cwd or env could not be evaluated into something runnable."""


def _prepare(spec: ShellSpec, ctx: NodeContext) -> tuple[Any, str | None, dict[str, str]]:
    try:
        command = evaluate(spec.command, ctx)
        cwd = evaluate(spec.cwd, ctx)
        env_changes = evaluate(spec.env, ctx)
    except Exception as exc:  # a callback bug fails the node, not the worker
        raise _CommandError(f"cannot evaluate command options: {type(exc).__name__}: {exc}") from exc
    if spec.shell:
        if isinstance(command, (list, tuple)) and all(isinstance(p, str) for p in command):
            command = shlex.join(command)
        if not isinstance(command, str) or not command.strip():
            raise _CommandError("shell=True needs a non-empty command string")
    else:
        if isinstance(command, str):
            try:
                command = shlex.split(command)
            except ValueError as exc:
                raise _CommandError(f"cannot split command: {exc}") from exc
        if not isinstance(command, (list, tuple)) or not command or not all(
            isinstance(p, str) for p in command
        ):
            raise _CommandError("command must be a non-empty list of strings")
        command = list(command)
    if cwd is not None and not isinstance(cwd, (str, os.PathLike)):
        raise _CommandError(f"cwd must be a path, got {type(cwd).__name__}")
    env = dict(os.environ)
    if ctx.traceparent is not None:  # the host traces: the command runs under its node attempt's span
        env["TRACEPARENT"] = ctx.traceparent
        env.pop("TRACESTATE", None)  # an inherited one belongs to another trace; the run's carries none
    if env_changes is not None:
        if not isinstance(env_changes, Mapping):
            raise _CommandError(f"env must be a mapping, got {type(env_changes).__name__}")
        for key, value in env_changes.items():
            if not isinstance(key, str) or not key or "=" in key or not (value is None or isinstance(value, str)):
                raise _CommandError(f"env entry {key!r} must map a variable name to a string or None")
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
    return command, os.fspath(cwd) if cwd is not None else None, env


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it: an unreaped child keeps
    its pid (and group id) reserved, so terminating its group stays safe."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _pump(selector: selectors.BaseSelector, timeout_s: float,
          on_output: Callable[[str, bytes], None] | None = None) -> None:
    events = selector.select(timeout_s)
    if not events and on_output is not None:
        on_output("", b"")  # a quiet moment: a live-output streamer sends what it still holds (logs -f)
    for key, _ in events:
        data = os.read(key.fd, _CHUNK)
        if data:
            key.data.feed(data)
            if on_output is not None:
                on_output(key.data.stream, data)
        else:
            selector.unregister(key.fd)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _failure_reason(exit_code: int | None) -> str:
    if exit_code is not None and exit_code < 0:
        try:
            return f"command killed by signal {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"command killed by signal {-exit_code}"
    return f"command exited with code {exit_code}"


def run_shell(
    spec: ShellSpec,
    ctx: NodeContext,
    *,
    on_spawn: Callable[[int, float | None], None] | None = None,
    on_output: Callable[[str, bytes], None] | None = None,
    cancel: threading.Event | None = None,
    grace_s: float = 3.0,
) -> ShellResult:
    """Run `spec`'s command to completion, timeout or cancellation.

    `on_spawn(pid, create_time)` is called right after the process starts (the
    host registers it for orphan reaping); if it raises, the command's tree is
    terminated and the exception propagates. `on_output(stream, data)` sees
    every chunk as it is read ("stdout" or "stderr"), for live following. Setting `cancel` terminates the
    tree and fails the node with error "cancelled". On timeout the tree is
    terminated (`terminate_tree`, SIGTERM, `grace_s`, SIGKILL).
    """
    started = time.monotonic()

    def result(outcome: Literal["ok", "failed"], exit_code: int | None, error: str | None = None,
               out: _Capture | None = None, err: _Capture | None = None, **flags: bool) -> ShellResult:
        output = {
            "stdout": out.text() if out else "", "stderr": err.text() if err else "",
            "exit_code": exit_code, "duration_ms": int((time.monotonic() - started) * 1000),
        }
        return ShellResult(outcome, output, _one_line(error) if error else None, **flags)

    try:
        command, cwd, env = _prepare(spec, ctx)
        process = subprocess.Popen(
            command, shell=spec.shell, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
    except _CommandError as exc:
        return result("failed", None, str(exc))
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return result("failed", None, f"cannot start command: {exc}")

    create_time = process_start_identity(process.pid)
    out, err = _Capture("stdout"), _Capture("stderr")
    selector = selectors.DefaultSelector()
    stop_reason: str | None = None
    try:
        if on_spawn is not None:
            try:
                on_spawn(process.pid, create_time)
            except BaseException:
                terminate_tree(process.pid, create_time, grace_s)
                raise
        assert process.stdout is not None and process.stderr is not None
        selector.register(process.stdout.fileno(), selectors.EVENT_READ, out)
        selector.register(process.stderr.fileno(), selectors.EVENT_READ, err)
        deadline = started + spec.timeout_s if spec.timeout_s is not None else float("inf")
        idle = cancel if cancel is not None else threading.Event()
        exited = False
        while True:
            if cancel is not None and cancel.is_set():
                stop_reason = "cancelled"
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stop_reason = "timeout"
                break
            exited = exited or _exited(process.pid)
            if exited and not selector.get_map():
                break
            if selector.get_map():
                _pump(selector, min(_POLL_S, remaining), on_output)
            else:
                idle.wait(min(_POLL_S, remaining))  # pipes closed; wait for the exit
        if stop_reason is not None:
            logger.info("shell command pid %d: %s; terminating its process tree", process.pid, stop_reason)
            terminate_tree(process.pid, create_time, grace_s)
            drain_until = time.monotonic() + _DRAIN_AFTER_KILL_S
            while selector.get_map() and time.monotonic() < drain_until:
                _pump(selector, _POLL_S, on_output)
    finally:
        selector.close()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        try:
            process.wait(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            logger.error("shell command pid %d did not exit after termination", process.pid)

    exit_code = process.returncode
    if stop_reason == "cancelled":
        return result("failed", exit_code, "cancelled", out, err, cancelled=True)
    if stop_reason == "timeout":
        return result("failed", exit_code, f"command timed out after {spec.timeout_s:g}s", out, err, timed_out=True)
    if exit_code != 0 and not spec.allow_nonzero_exit:
        return result("failed", exit_code, _failure_reason(exit_code), out, err)
    return result("ok", exit_code, None, out, err)
