"""`Piwf`: a real host in this process, on a clock a test moves.

It starts a host with `piwf_actors.embedding.start_host` on a temporary
state directory (real worker processes, a real SQLite file, the real
socket) whose timer clock (`piwf_actors.clock.TimerClock`) the test owns:
`skip(seconds)` and `advance_to(time)` make sleeps, message-wait timeouts,
decision, checkpoint and agent deadlines, retry back-offs and schedules come
due at once, while the host's lease and its run claims keep host time.

The methods are short names for what a test does with a run: start it,
wait for it (to its end, to a park, to an event), answer what it asks,
send it a message, settle an effect, read what it did. A wait that runs
out raises `WaitTimeout` saying what the run is doing. Each method is an
edge call (`HostHandle`'s rules): call it from the test's thread.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from piwf_actors.clock import TimerClock
from piwf_actors.config import HostConfig
from piwf_actors.embedding import HostHandle, start_host
from piwf_actors.results import (
    AnswerReceipt,
    EffectReceipt,
    EffectView,
    MessageReceipt,
    PendingRequest,
    RunEvent,
    RunView,
)
from piwf_actors.store import queries
from piwf_actors.testing.describe import describe_run, workflow_spec
from piwf_actors.workflows.model import Workflow

#: Run statuses after which nothing changes.
FINISHED = ("done", "failed", "cancelled")
#: How often a wait looks again (a read of the state database).
POLL_S = 0.01

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A `Piwf` wait ran out; the message says what the run is doing. An AssertionError, so pytest
    shows it as a failed expectation."""


@dataclass(frozen=True, slots=True)
class Submission:
    """An agent step's submission once the run's worker decided on it: `accepted`, or `rejected` with
    the validation `error`."""

    submission_id: str
    request_id: str
    outcome: str
    error: str | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome == "accepted"


RequestRef = str | PendingRequest  # a run id (its open request is found) or the request itself


class Piwf:
    """A host for one test (see the module docstring). `Piwf(**config)` starts it; `close()` (or the
    `with` block's end, or the pytest fixture's teardown) stops it and removes its state directory.

    `project` is where runs started by name look for `.piwf/workflows/` (and where their nodes run,
    default: the current directory); its schedules fire on this host's clock. `timeout` is how long a
    wait waits by default, in real seconds. Other keywords are `HostConfig` fields (`max_workers`,
    `claim_lease_s`, …).
    """

    def __init__(self, *, project: str | Path | None = None, state_dir: str | Path | None = None,
                 timeout: float = 30.0, **config: Any) -> None:
        self._own_dir = state_dir is None
        # Short, under /tmp: the socket's path must stay within AF_UNIX's ~107 bytes.
        self.state_dir = Path(tempfile.mkdtemp(prefix="piwf-", dir="/tmp") if state_dir is None else state_dir)
        self.project = None if project is None else str(Path(project).resolve())
        self.timeout = timeout
        self.clock = TimerClock(self.state_dir / "timer-offset")
        channels = self.state_dir / "config"  # no chat channel of the machine's is used
        channels.mkdir(exist_ok=True)
        config.setdefault("max_workers", 2)
        config.setdefault("retention_days", 0.0)
        config.setdefault("config_dir", channels)
        if self.project is not None:
            config.setdefault("projects", (self.project,))
        try:
            self.host: HostHandle = start_host(HostConfig(state_dir=self.state_dir, timer_clock=self.clock, **config))
        except BaseException:
            self._remove_dir()
            raise

    # --- the clock -------------------------------------------------------------------------------

    def now(self) -> float:
        """Timer time (seconds since the epoch): the clock the host's workflow timers run on."""
        return self.clock.now()

    def skip(self, seconds: float) -> float:
        """Move timer time `seconds` forward: every timer due by then comes due now. Returns the new
        timer time. (Real time does not move: a shell command's `timeout_s` still counts as it runs.)
        A schedule's fire the skip leaves more than its misfire grace (60 s) behind counts as missed,
        as after a host's downtime: its `catch_up` decides; `advance_to` each fire time to see each."""
        return self.clock.skip(seconds)

    def advance_to(self, when: Any) -> float:
        """Move timer time forward to `when` (epoch seconds or an aware datetime; never back)."""
        return self.clock.advance_to(when)

    # --- runs ------------------------------------------------------------------------------------

    def start(self, workflow: Workflow | str, input: Any = None, *, project: str | Path | None = None,
              session_id: str | None = None, run_id: str | None = None, priority: int | None = None) -> str:
        """Queue a run and return its id. `workflow` is a `Workflow` object (a module-level attribute of
        its file), `path/to/file.py[:attr]`, or a name found in `project` (default: this kit's)."""
        where = project if project is not None else self.project
        return self.host.start_run(workflow_spec(workflow), input,
                                   project_path=None if where is None else str(where),
                                   session_id=session_id, run_id=run_id, priority=priority).run_id

    def run(self, run_id: str) -> RunView:
        """The run's view now. Raises LookupError for an unknown run."""
        view = self.host.get_run(run_id)
        if view is None:
            raise LookupError(f"there is no run {run_id}")
        return view

    def wait(self, run_id: str, *, timeout: float | None = None) -> RunView:
        """Wait until the run is done, failed or cancelled; returns its view."""
        return self.wait_until(run_id, lambda view: view.status in FINISHED, "to finish", timeout=timeout)

    def wait_parked(self, run_id: str, reason: str | None = None, *, timeout: float | None = None) -> RunView:
        """Wait until the run parks (`reason`: waiting, paused, ambiguous_effect, no_progress; None: any);
        returns its view. A run that finishes instead fails the wait at once."""
        what = f"to park {reason}" if reason else "to park"
        return self.wait_until(run_id, lambda view: view.status == "parked" and reason in (None, view.park_reason),
                               what, timeout=timeout)

    def wait_until(self, run_id: str, condition: Callable[[RunView], Any], what: str = "to reach the condition",
                   *, timeout: float | None = None) -> RunView:
        """Wait until `condition(view)` holds; returns that view. Gives up early (WaitTimeout) when the
        run has finished without it."""

        def look() -> RunView | None:
            view = self.host.get_run(run_id)
            if view is not None and condition(view):
                return view
            if view is not None and view.finished:
                raise WaitTimeout(f"waited for run {run_id} {what}, but it ended:\n  {self.describe(run_id)}")
            return None

        return self._poll(look, timeout, lambda limit: f"run {run_id} did not get {what} within {limit} s:\n  "
                                                       f"{self.describe(run_id)}")

    def wait_for_event(self, run_id: str, kind: str, node: str | None = None, *,
                       timeout: float | None = None) -> RunEvent:
        """Wait until the run's trace has an event of `kind` (at `node`, if given); returns the first."""
        where = f" at {node!r}" if node else ""

        def look() -> RunEvent | None:
            view = self.host.get_run(run_id)  # read first: events read after it include its last ones
            found = self.events(run_id, kind, node)
            if found:
                return found[0]
            if view is not None and view.finished:
                raise WaitTimeout(f"run {run_id} ended without a {kind} event{where}:\n  {self.describe(run_id)}")
            return None

        return self._poll(look, timeout, lambda limit: f"run {run_id} has no {kind} event{where} after {limit} s:\n  "
                                                       f"{self.describe(run_id)}")

    def describe(self, run_id: str) -> str:
        """What the run is doing, in a few lines (what a failed wait says)."""
        return describe_run(self.host.get_run(run_id), run_id, self.events(run_id))

    # --- people, agents and messages -------------------------------------------------------------

    def request(self, run_id: str, kind: str | None = None, node: str | None = None, *,
                timeout: float | None = None) -> PendingRequest:
        """Wait for the run's open request (a `decision`, `checkpoint` or `agent` step; at `node`, if
        given) and return it."""
        what = f"{kind or 'request'}{f' at {node!r}' if node else ''}"

        def look() -> PendingRequest | None:
            found = [r for r in self.host.pending_interactions() if r.run_id == run_id
                     and kind in (None, r.kind) and node in (None, r.node_id)]
            if found:
                return found[0]
            view = self.host.get_run(run_id)
            if view is not None and view.finished:
                raise WaitTimeout(f"waited for a {what} of run {run_id}, but it ended:\n  {self.describe(run_id)}")
            return None

        return self._poll(look, timeout, lambda limit: f"run {run_id} asks no {what} after {limit} s:\n  "
                                                       f"{self.describe(run_id)}")

    def answer(self, target: RequestRef, choice: str, *, input: dict[str, Any] | None = None,
               node: str | None = None) -> AnswerReceipt:
        """Answer a decision with `choice` (and its text `input`); `target` is the run id (its open
        decision, waited for) or the request."""
        request = self._request_of(target, "decision", node)
        return self.host.answer_decision(request.request_id, choice, input=input)

    def answer_checkpoint(self, target: RequestRef, value: Any = None, *, node: str | None = None) -> AnswerReceipt:
        """Answer a checkpoint: `value` becomes the checkpoint node's output."""
        return self.host.answer_checkpoint(self._request_of(target, "checkpoint", node).request_id, value)

    def submit(self, target: RequestRef, value: Any, *, node: str | None = None, session_id: str | None = None,
               timeout: float | None = None) -> Submission:
        """Submit an agent step's output and wait for the worker's verdict (accepted or rejected). The
        request's own session is used unless `session_id` is given."""
        request = self._request_of(target, "agent", node)
        submission_id = self.host.submit_agent(request.request_id, value,
                                               session_id=session_id or request.session_id)

        def look() -> Submission | None:
            # The handle's own read-only connection per read (no public reader: the kit is the package's own).
            state = self.host._read(lambda reader: queries.submission_state(reader, submission_id))
            if state is None or not state["decided"]:
                return None
            error = (state.get("receipt") or {}).get("error")
            outcome = state["outcome"] if state["outcome"] != "validating" else "cancelled"
            return Submission(submission_id, request.request_id, outcome, error)

        return self._poll(look, timeout, lambda limit: f"submission {submission_id} was not decided within {limit} s:"
                                                       f"\n  {self.describe(request.run_id)}")

    def send(self, run_id: str, topic: str, payload: Any = None, *, key: str | None = None) -> MessageReceipt:
        """Put a message on the run's `topic` (a `wait_message(topic)` takes it); with `key` a resend
        is the same message."""
        return self.host.send_message(run_id, topic, payload, client_id="piwf-test" if key else None,
                                      idempotency_key=key)

    def emit(self, name: str, data: Any = None, *, key: str | None = None) -> dict[str, Any]:
        """Emit event `name` (`on_event(name)` workflows of the project start on it, matching
        `wait_event(name)` waits take it); with `key` it is recorded once per (name, key). Returns the
        receipt {event_id, name, key, seq, emitted_at, woke, adopted}."""
        return self.host.emit_event(name, data, key=key)

    def resolve(self, run_id: str, action: str, output: Any = None, *, effect_id: str | None = None) -> EffectReceipt:
        """Settle the run's ambiguous effect (or `effect_id`): `confirm` (with the node's `output`) or
        `retry`."""
        if effect_id is None:
            ambiguous = [effect for effect in self.effects(run_id) if effect.status == "ambiguous"]
            if len(ambiguous) != 1:
                raise AssertionError(f"run {run_id} has {len(ambiguous)} ambiguous effects, not one; pass "
                                     f"effect_id:\n  {self.describe(run_id)}")
            effect_id = ambiguous[0].effect_id
        return self.host.resolve_effect(effect_id, action, output)

    # --- what a run did --------------------------------------------------------------------------

    def output(self, run_id: str) -> Any:
        """The run's output (the output of the node it finished on)."""
        return self.run(run_id).output

    def outputs(self, run_id: str) -> dict[str, Any]:
        """Each node's latest output, by node id."""
        return {node.node_id: node.output for node in self.run(run_id).nodes}

    def effects(self, run_id: str) -> tuple[EffectView, ...]:
        """The side effects the run's action and shell nodes reserved, in order."""
        return self.run(run_id).effects

    def events(self, run_id: str, kind: str | None = None, node: str | None = None) -> list[RunEvent]:
        """The run's trace (of `kind` at `node`, if given), in order."""
        found: list[RunEvent] = []
        while True:
            page = self.host.run_events(run_id, after=found[-1].seq if found else 0, limit=500)
            found += page
            if len(page) < 500:
                break
        return [event for event in found if kind in (None, event.kind) and node in (None, event.node_id)]

    # --- the host --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the host (its workers too) and remove the state directory this kit made."""
        try:
            self.host.stop("test finished")
        finally:
            self._remove_dir()

    def __enter__(self) -> Piwf:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _remove_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def _poll(self, look: Callable[[], T | None], timeout: float | None, timed_out: Callable[[float], str]) -> T:
        """What every wait does: call `look()` every POLL_S until it returns something (returned) or
        raises (a wait that can no longer succeed gives up early); once `timeout` (default: the kit's)
        real seconds have passed, raise WaitTimeout(`timed_out(limit)`)."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            found = look()
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise WaitTimeout(timed_out(limit))
            time.sleep(POLL_S)

    def _request_of(self, target: RequestRef, kind: str, node: str | None) -> PendingRequest:
        if isinstance(target, PendingRequest):
            return target
        return self.request(target, kind, node)
