"""The seam between the durable calls a workflow function makes and the engine that runs it.

A durable call (`@step` function, `sleep`, `decide`, `run_child`…) does not talk to the host itself:
it builds a node spec and hands it to the launch's `Replay`, which the worker's function engine
(worker/function_engine.py) sets for the thread that runs the function. The replay gives the call its
id (its name, then `name#2`, `name#3`… within one execution), returns the recorded result when the
history has one, and otherwise runs the node as a graph node of the same kind would run.

A `ContextVar` holds it, so a call outside a run raises one clear RuntimeError and two functions run
in two threads (a test) never see each other's replay.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from piwf_actors.workflows.model import NodeSpec

#: What an explicit step name may be: a node id without `#` (which the occurrence suffix uses).
STEP_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}")
#: The id of the node that records the function's return (the run's output) or its failure.
RETURN_ID = "return"


class StepFailed(Exception):
    """A step (or a wait) that failed after its retries: `code` is its stable error code (`node_error`,
    `timeout`, `message_timeout`, `output_invalid`…), `message` the one-line error, `step` its id,
    `output` what the failed attempt recorded as its output, if anything (a `shell` call's
    {stdout, stderr, exit_code, duration_ms}; None for a step whose function raised) — the same on
    replay."""

    def __init__(self, code: str, message: str, step: str, output: Any = None) -> None:
        super().__init__(f"step {step!r} failed ({code}): {message}")
        self.code = code
        self.message = message
        self.step = step
        self.output = output


class Suspended(BaseException):
    """Raised through the user's function when its launch ends at a wait (the run parks), at a stop
    (pause, cancel) or on a replay that does not match: a BaseException, so `except Exception` in the
    function does not catch it; its `finally` blocks run. The engine catches it at the top."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What `current_run()` tells a workflow function: for logging and for keys, not for deciding
    (the run id and the input are the same on every replay; `launch` is not)."""

    run_id: str
    input: Any
    workflow: str
    launch: str


class Replay(Protocol):
    """What the function engine offers the durable calls (all run in the thread of the function)."""

    info: RunInfo

    def call(self, name: str, spec: NodeSpec, *, answered_by: bool = False) -> Any:
        """The node `spec`'s output as JSON — recorded, or produced now; StepFailed when it failed."""

    def send_message(self, run_id: str, topic: str, payload: Any) -> dict[str, Any]:
        """Put a message in a run's mailbox, once (keyed by its place in the execution)."""


_CURRENT: contextvars.ContextVar[Replay | None] = contextvars.ContextVar("piwf_durable_replay", default=None)


def current_replay(what: str) -> Replay:
    """The replay of the run this thread executes; RuntimeError naming `what` outside one."""
    replay = _CURRENT.get()
    if replay is None:
        raise RuntimeError(f"{what} called outside a durable workflow run: durable calls work only inside a "
                           "@workflow function the host runs (call the step's function itself with .fn)")
    return replay


@contextmanager
def replaying(replay: Replay) -> Iterator[None]:
    """Make `replay` the current one for the calls made inside the block (the engine's)."""
    token = _CURRENT.set(replay)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def checked_name(name: Any, what: str, error: type[Exception] = ValueError) -> str:
    """An explicit step or wait name, checked: one line of `error` otherwise."""
    if not isinstance(name, str) or not STEP_NAME.fullmatch(name):
        raise error(f"{what} name {name!r} is invalid: it must match [A-Za-z0-9_][A-Za-z0-9_-]* "
                         "(no '#': ids of repeated calls end in #2, #3…)")
    if name == RETURN_ID:
        raise error(f"{what} name 'return' is reserved for the function's return")
    return name


def current_run() -> RunInfo:
    """The run this function executes: `run_id`, `input` (the raw JSON), `workflow`, `launch`."""
    return current_replay("current_run()").info
