"""The embedding API: `start_host(config)` and the `HostHandle` it returns.

This is what an application that embeds the host calls (the front door,
`piwf_actors`, exports both). The handle's results are the typed records of
`piwf_actors.results`; its refusals are the typed errors of
`piwf_actors.errors`. The wiring that starts the actors is `actors/host.py`;
the handle only holds what it started (`HostParts`) and reads or writes
through it. Each write is the client protocol's request for the same call:
the handle builds the `Request` a socket client would send, and the
operation's own payload check and builder (`protocol.catalog.write_command`)
make the command, so a call through the handle and the same call on the
socket are one command with one idempotency fingerprint.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pykka

from piwf_actors.actors.host import start_parts
from piwf_actors.actors.lease import GetLease, LeaseClaim
from piwf_actors.actors.run_events import RunEventsSubscription, Subscription
from piwf_actors.actors.runner_lease import GetRunnerLease, RunnerClaim
from piwf_actors.actors.scheduler import GetSchedulerStatus
from piwf_actors.actors.supervisor import HostParts
from piwf_actors.actors.writer import WriterHandle
from piwf_actors.config import HostConfig
from piwf_actors.embedding_controls import ScheduleResourceControls
from piwf_actors.embedding_events import EventControls, embedded_peer
from piwf_actors.errors import HostError, NotFound, Rejected, RunnerHostRefusal, StandbyHost
from piwf_actors.paths import StatePaths
from piwf_actors.protocol.catalog import BuildEnv, write_command
from piwf_actors.protocol.catalog.runs import NotCached, cached_env
from piwf_actors.protocol.envelope import BadRequest, Request
from piwf_actors.results import (
    AnswerReceipt,
    ControlReceipt,
    EffectReceipt,
    MessageReceipt,
    PendingRequest,
    RunEvent,
    RunReceipt,
    RunSummary,
    RunView,
)
from piwf_actors.run_wait import timeout_message
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader


def _given(**fields: Any) -> dict[str, Any]:
    """A payload of the fields given (not None), as the client library and the CLI send them."""
    return {name: value for name, value in fields.items() if value is not None}


def start_host(config: HostConfig | None = None) -> HostHandle:
    """Start a host on `config.state_dir` and return its handle.

    On a database other hosts may name (`config.database` other than the
    state directory's own) whose lease another host holds, the host starts
    as a standby (`handle.role`, `handle.wait_active()`) unless
    `config.standby` is False. Raises HostAlreadyRunning, StoreRefused,
    UnsafePath or LeaseLost and then leaves nothing running. Runs in the
    caller's thread.
    """
    config = config or HostConfig()
    paths, parts, supervisor = start_parts(config)
    return HostHandle(config, paths, parts, supervisor)


class HostHandle(ScheduleResourceControls, EventControls):
    """What `start_host` returns: the embedding API, the host's actor refs and its controls.

    Results are typed (`piwf_actors.results`: frozen dataclasses) and also read
    as the dicts the client protocol sends (`receipt["receipt"]["run_id"]`).
    Refusals are typed errors (`piwf_actors.errors`): `NotFound`, `Rejected`
    (not allowed in the run's state), `Conflict` (a stale `expected_revision`,
    an idempotency key reused for another request), `WorkflowNotFound` /
    `WorkflowLoadFailed`, `DiskFull` / `ReadOnlyDatabase`, `WriterStopped`, and
    `StandbyHost` for a mutation while the host is a standby (`role`).

    Every write is checked and built as the socket checks and builds the
    same request (`protocol.catalog`): what a socket client would be refused
    `rejected` (a malformed run id, an unknown effect action, NaN in an
    input) raises Rejected here, before the writer, and is not recorded.

    Every method here is an edge call: it may block for a read or for the
    writer's commit. Call them from the application's own threads (its main
    thread, a worker thread), not from inside an actor's handler; to follow
    runs from an actor, `subscribe` it.
    """

    #: The name subscriptions are listed under among the host's parts (`HostParts.actors`).
    _SUBSCRIPTION = "run-events"

    def __init__(self, config: HostConfig, paths: StatePaths, parts: HostParts,
                 supervisor: pykka.ActorRef[Any]) -> None:
        self.config = config
        self.paths = paths
        self._parts = parts
        self.supervisor = supervisor
        self._resolver = parts.resolver

    @property
    def claim(self) -> LeaseClaim | None:
        """The lease this host holds; None while it is a standby."""
        return self._parts.claim

    @property
    def role(self) -> str:
        """`active` (it holds the lease and runs everything), `standby` (it serves reads and waits) or
        `runner` (a runner host: it executes runs from the shared queue and serves reads)."""
        if self._parts.runner is not None:
            return "runner"
        return "active" if self._parts.active.is_set() else "standby"

    @property
    def runner(self) -> RunnerClaim | None:
        """A runner host's runner lease (token included: it stays in this process); None on a host."""
        return self._parts.runner

    def wait_active(self, timeout: float | None = None) -> bool:
        """Block until this host is active (a standby: until it took over); True if it is."""
        return self._parts.active.wait(timeout)

    @property
    def epoch(self) -> int | None:
        """The host epoch now (it grows when the host takes its lease again after a full disk);
        None while the host is a standby."""
        epoch = self.writer.host_epoch
        claim = self._parts.claim
        return epoch if epoch is not None else (claim.epoch if claim is not None else None)

    def _require_active(self) -> None:
        """Raise StandbyHost (naming the active host) unless this host is active."""
        if self._parts.active.is_set():
            return
        lease = self._read(lambda r: queries.lease_row(r, time.time()))
        if self._parts.runner is not None:
            raise RunnerHostRefusal(lease["host_id"], lease["epoch"], lease["live"])
        raise StandbyHost(lease["host_id"], lease["epoch"], lease["live"])

    @property
    def writer(self) -> WriterHandle:
        assert self._parts.writer is not None
        return self._parts.writer

    @property
    def lease(self) -> pykka.ActorRef[Any]:
        """The HostLease actor (only once the host is active)."""
        assert self._parts.lease is not None, "a standby host holds no lease"
        return self._parts.lease

    @property
    def stopped(self) -> bool:
        return self._parts.stopped.is_set()

    @property
    def stop_reason(self) -> str | None:
        return self._parts.stop_reason

    @property
    def stop_requested(self) -> bool:
        """True when the host stopped because someone asked it to (host.stop), not because of a failure."""
        return self._parts.stop_requested

    def actor(self, name: str) -> pykka.ActorRef[Any] | None:
        for actor_name, ref in self._parts.actors:
            if actor_name == name:
                return ref
        return None

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """Lease, writer and run counts (read through a fresh read-only connection), and the workflow
        code the host runs itself (`user_code`: calls running, hung past their limits, the limits)."""
        reader = StoreReader(self.paths.database)
        try:
            now = time.time()
            stats = self.writer.stats(timeout)
            lease = self._parts.lease if self._parts.runner is None else None
            scheduler = self.actor("scheduler")
            runner_lease = self._parts.lease if self._parts.runner is not None else None
            return {
                "state_dir": str(self.paths.root),
                "role": self.role,
                # The lease row (on a standby or a runner: the active host's), and this host's own view of its lease.
                "lease": {**queries.lease_row(reader, now),
                          **(lease.ask(GetLease(), block=True, timeout=timeout) if lease is not None else {})},
                "runner": runner_lease.ask(GetRunnerLease(), timeout=timeout) if runner_lease is not None else None,
                "runners": queries.runner_hosts(reader, now),
                "writer": {"queue_depth": stats.queue_depth, "commits": stats.commits, "commands": stats.commands,
                           "commits_per_s": round(stats.commits_per_s, 2),
                           "commands_per_s": round(stats.commands_per_s, 2)},
                "runs": queries.run_counts(reader),
                "scheduler": scheduler.ask(GetSchedulerStatus(), timeout=timeout) if scheduler is not None else None,
                "user_code": self._resolver.user_code.status(),  # workflow code the host runs (user_code.py)
            }
        finally:
            reader.close()

    # --- runs (the embedding API; the client protocol offers the same operations) ---

    def _read(self, fn: Callable[[StoreReader], Any]) -> Any:
        reader = StoreReader(self.paths.database)
        try:
            return fn(reader)
        finally:
            reader.close()

    def _write(self, operation: str, payload: dict[str, Any], *, run_id: str | None = None,
               expected_revision: int | None = None, client_id: str | None = None,
               idempotency_key: str | None = None, peer: dict[str, Any] | None = None) -> Any:
        """Write as the socket does: the request a client would send for this call, checked and built
        by the operation itself (`write_command`), then the writer's value. A payload the check
        refuses is Rejected (the socket answers it `rejected`). Blocks for the writer's commit.

        A build that runs workflow code (loading a file, a key function) runs it on the host's
        user-code threads, bounded in time, as the socket's does; this thread only waits."""
        self._require_active()
        # The key doubles as the request id, which is what the writer falls back to without one.
        request = Request(idempotency_key or uuid.uuid4().hex, client_id, idempotency_key, operation, payload,
                          run_id, expected_revision, peer)
        env = BuildEnv(self._resolver, self.paths.database)
        try:
            try:
                command = write_command(request, cached_env(env))
            except NotCached:
                command = self._resolver.user_code.call(lambda: write_command(request, env))
        except BadRequest as bad:
            raise Rejected(str(bad)) from None
        return self.writer.call(command.name, command.args)

    def start_run(self, workflow: str, input: Any = None, *, project_path: str | None = None,
                  session_id: str | None = None, run_id: str | None = None, client_id: str | None = None,
                  idempotency_key: str | None = None, priority: int | None = None) -> RunReceipt:
        """Queue a run of `workflow`: a discovered name, `module:attr` or `file.py[:attr]`.

        Names are resolved like the CLI does: `project_path` (default: the
        current directory) is the project, so a workflow in
        `./.piwf/workflows/` is found by name, and a relative file path is
        relative to it. The workflow file is loaded (and a concurrency key function called) on the
        host's user-code threads, bounded by `HostConfig.load_timeout_s` and `key_timeout_s`.
        With `client_id` and `idempotency_key`, a repeated call returns the
        first receipt with outcome `adopted`. A `run_id` you choose is 1-200
        letters, digits and `_.:-`. Raises WorkflowNotFound,
        WorkflowLoadFailed, Rejected (input that is not JSON, a payload the
        socket would refuse, a key that is not JSON-like; UserCodeTimeout, a
        Rejected, for a load or key function past its limit),
        UserCodeUnavailable (too much workflow code hangs), Conflict. A higher `priority` (an integer, default 0) starts
        before fresh runs of a lower one.
        """
        project = os.path.abspath(project_path if project_path is not None else os.getcwd())
        payload = {"workflow": workflow, "input": input, "project_path": project,
                   **_given(session_id=session_id, run_id=run_id, priority=priority)}
        return RunReceipt.from_wire(self._write("run.start", payload, client_id=client_id,
                                                idempotency_key=idempotency_key))

    def send_message(self, run_id: str, topic: str, payload: Any = None, *, client_id: str | None = None,
                     idempotency_key: str | None = None, strict: bool = False) -> MessageReceipt:
        """Put `payload` into run `run_id`'s mailbox on `topic`: a `wait_message(topic)` there takes it,
        once, in send order (also one sent before the run waits). With `client_id` and
        `idempotency_key` a resend is the same message (`adopted`). `receipt.extra["topics"]` lists the
        topics the run's workflow waits on, when they are known; `strict` refuses a topic not among
        them. Raises NotFound, Rejected (the run has ended, a bad topic, `strict`)."""
        request = {"run_id": run_id, "topic": topic, "payload": payload, **({"strict": True} if strict else {})}
        return MessageReceipt.from_wire(self._write("message.send", request, client_id=client_id,
                                                    idempotency_key=idempotency_key, peer=embedded_peer()))

    def list_children(self, run_id: str, limit: int = 1000) -> list[RunSummary]:
        """The child runs `run_id` started (`run_workflow`, `map_workflow`, `parallel`), newest first."""
        return [RunSummary.from_wire(row)
                for row in self._read(lambda r: queries.run_list(r, None, limit, parent=run_id))]

    def get_run(self, run_id: str) -> RunView | None:
        """The run's view (status, values, nodes, effects) read in one snapshot; None if no such run.
        Its clocks' `remaining_s` count on the host's timer clock (`HostConfig.timer_clock`)."""
        now = self.config.timer_clock.now() if self.config.timer_clock is not None else None
        view = self._read(lambda r: queries.run_view(r, run_id, now))
        return None if view is None else RunView.from_wire(view)

    def list_runs(self, status: str | None = None, limit: int = 100) -> list[RunSummary]:
        """The newest `limit` runs (with `status` only, if given), newest first."""
        return [RunSummary.from_wire(row) for row in self._read(lambda r: queries.run_list(r, status, limit))]

    def read_content(self, digest: str) -> bytes:
        """The bytes of a stored value that `get_run` showed as `{"$content": digest, …}` (its
        canonical JSON). Raises NotFound when no such value is stored."""

        def read(reader: StoreReader) -> bytes:
            data = bytearray()
            while True:
                chunk = queries.content_chunk(reader, digest, len(data))
                if chunk is None:
                    raise NotFound("content", digest)
                data += chunk["data"]
                if len(data) >= chunk["total_bytes"] or not chunk["data"]:
                    return bytes(data)

        return self._read(read)

    def run_events(self, run_id: str, after: int = 0, limit: int = 500) -> list[RunEvent]:
        """The run's trace: up to `limit` events with `seq` greater than `after`, in order."""
        return [RunEvent.from_wire(row) for row in self._read(lambda r: queries.run_events(r, run_id, after, limit))]

    def _control(self, name: str, run_id: str, expected_revision: int | None, client_id: str | None,
                 idempotency_key: str | None) -> ControlReceipt:
        return ControlReceipt.from_wire(self._write(name, {}, run_id=run_id, expected_revision=expected_revision,
                                                    client_id=client_id, idempotency_key=idempotency_key))

    def cancel_run(self, run_id: str, *, expected_revision: int | None = None, client_id: str | None = None,
                   idempotency_key: str | None = None) -> ControlReceipt:
        """Cancel a run: a queued or parked one at once (`cancelled`), an active one at its worker's
        next step (`cancelling`). Raises Rejected for a finished run, Conflict for a stale revision."""
        return self._control("run.cancel", run_id, expected_revision, client_id, idempotency_key)

    def pause_run(self, run_id: str, *, expected_revision: int | None = None, client_id: str | None = None,
                  idempotency_key: str | None = None) -> ControlReceipt:
        """Pause a run: a queued one parks at once, an active one at its next node boundary (`pausing`)."""
        return self._control("run.pause", run_id, expected_revision, client_id, idempotency_key)

    def resume_run(self, run_id: str, *, expected_revision: int | None = None, client_id: str | None = None,
                   idempotency_key: str | None = None) -> ControlReceipt:
        """Resume a paused run, or retry one parked `no_progress`."""
        return self._control("run.resume", run_id, expected_revision, client_id, idempotency_key)

    def restart_run(self, run_id: str, *, expected_revision: int, from_node: str | None = None,
                    same_code: bool = False, client_id: str | None = None,
                    idempotency_key: str | None = None) -> RunReceipt:
        """A new run (`parent_run_id` = `run_id`) with a finished run's input.

        Only a done, failed or cancelled run at `expected_revision`, without
        unsettled effects. It runs the workflow file's current code
        (`digest_changed` in the receipt says whether that differs from the
        parent's) or, with `same_code`, the parent's stored snapshot; with
        `from_node` it starts at that node, the parent's earlier outputs
        copied. One restart per (run, revision, from_node, code): a second is
        `adopted`. Raises Rejected, Conflict, NotFound.
        """
        return RunReceipt.from_wire(self._write(
            "run.restart", _given(from_node=from_node, same_code=same_code), run_id=run_id,
            expected_revision=expected_revision, client_id=client_id, idempotency_key=idempotency_key))

    def resolve_effect(self, effect_id: str, action: str, output: Any = None, *, client_id: str | None = None,
                       idempotency_key: str | None = None) -> EffectReceipt:
        """Settle an `ambiguous` effect: `confirm` (it happened; `output` becomes the node's output)
        or `retry` (run the node again); the run goes back to the queue."""
        return EffectReceipt.from_wire(self._write(
            "effect.resolve", _given(effect_id=effect_id, action=action, output=output), client_id=client_id,
            idempotency_key=idempotency_key))

    # --- people in the loop ---

    def pending_interactions(self, session_id: str | None = None) -> list[PendingRequest]:
        """Open decisions, checkpoints and agent requests (those addressed to `session_id` or to
        nobody in particular; all of them when None), oldest first."""
        found = self._read(lambda r: queries.pending_interactions(r, session_id))
        return [PendingRequest.from_wire(request) for request in found["requests"]]

    def answer_decision(self, request_id: str, choice: str, *, input: dict[str, Any] | None = None,
                        expected_revision: int | None = None, session_id: str | None = None,
                        client_id: str | None = None, idempotency_key: str | None = None) -> AnswerReceipt:
        """Answer a human decision with one of its choices (and that choice's `input`, if it has one).

        Checked against the decision's contract (Rejected if it does not fit);
        the first valid answer wins, a later one is a Conflict, and so is a
        stale `expected_revision` (the request's revision in
        `pending_interactions`). The run goes back to the queue.
        """
        response: dict[str, Any] = {"choice": choice}
        if input is not None:
            response["input"] = input
        return AnswerReceipt.from_wire(self._write(
            "decision.answer", _given(request_id=request_id, response=response, session_id=session_id),
            expected_revision=expected_revision, client_id=client_id, idempotency_key=idempotency_key,
            peer=embedded_peer()))

    def answer_checkpoint(self, request_id: str, value: Any, *, session_id: str | None = None,
                          client_id: str | None = None, idempotency_key: str | None = None) -> AnswerReceipt:
        """Answer a checkpoint: `value` (any JSON value) becomes the checkpoint node's output and the
        run goes back to the queue. A second answer is a Conflict."""
        # `input` even when None, as the CLI sends it (a checkpoint's value may be JSON null).
        payload = {"request_id": request_id, "input": value, **_given(session_id=session_id)}
        return AnswerReceipt.from_wire(self._write("checkpoint.answer", payload, client_id=client_id,
                                                   idempotency_key=idempotency_key, peer=embedded_peer()))

    def submit_agent(self, request_id: str, value: Any, *, session_id: str | None = None,
                     client_id: str | None = None, idempotency_key: str | None = None) -> str:
        """Submit an agent step's output (`interaction.submit`); returns the submission id.

        The submission starts `validating`: the run's worker checks it against the step's
        `expected_output` and `validate`, and accepts or rejects it later (the socket's
        `interaction.submit` waits for that verdict; `piwf_actors.testing` does too). A request
        addressed to a session needs that `session_id`. Raises Rejected, Conflict, NotFound.
        """
        value = self._write("interaction.submit", {"request_id": request_id, "value": value,
                                                   **_given(session_id=session_id)},
                            client_id=client_id, idempotency_key=idempotency_key, peer=embedded_peer())
        return str(value["receipt"]["submission_id"])

    # --- following runs ---

    def subscribe(self, actor_ref: pykka.ActorRef[Any], runs: Iterable[str] | str | None = None) -> Subscription:
        """Tell `actor_ref` what happens to runs: `RunStarted`, `NodeFinished`, `RunParked`,
        `RunFinished` (`piwf_actors.run_notices`), without polling.

        `runs=None`: every run, from now on. `runs=[ids]`: those runs only,
        each from its first event (nothing is missed between `start_run` and
        `subscribe`). A small actor of the host does the reading; it only
        `tell`s, so the subscriber may be any actor and is never waited on.
        The subscription ends with `unsubscribe()`, with `host.stop()`, or
        when `actor_ref` has stopped. Safe to call from an actor's handler.
        Raises HostError once the host has stopped.
        """
        if not isinstance(actor_ref, pykka.ActorRef):
            raise TypeError(f"subscribe needs a pykka ActorRef, got {type(actor_ref).__name__}")
        wanted = None if runs is None else frozenset([runs] if isinstance(runs, str) else runs)
        with self._parts.stop_lock:  # held by shut_down while it stops the parts
            if self._parts.stopped.is_set():
                raise HostError(f"the host has stopped ({self._parts.stop_reason}); nothing to subscribe to")
            ref = RunEventsSubscription.start(self.writer.ref, self.paths.database, actor_ref, runs=wanted,
                                              since=time.time())
            # Owned by the host: shut_down stops it (first: it was started last). Ended ones are dropped
            # here; they always sit after the core actors, so no lookup of those is disturbed.
            for entry in [e for e in self._parts.actors if e[0] == self._SUBSCRIPTION and not e[1].is_alive()]:
                self._parts.actors.remove(entry)
            self._parts.actors.append((self._SUBSCRIPTION, ref))
        return Subscription(ref, wanted)

    def wait_for_run(self, run_id: str, statuses: tuple[str, ...] = ("done", "failed", "cancelled"),
                     timeout: float = 30.0, poll_s: float = 0.02) -> RunView:
        """Poll (with a deadline) until the run reaches one of `statuses`; returns its view.

        A run that parks for a person (a checkpoint, a decision) is waited through, since an answer
        may come from elsewhere (another thread, a channel, `piwf answer`); include "parked" in
        `statuses` to get the view back at the park and answer it yourself. Raises TimeoutError
        saying where the run stands — for a park, which request waits and the call that answers it.
        (An actor should `subscribe` instead.)"""
        deadline = time.monotonic() + timeout
        while True:
            view = self.get_run(run_id)
            if view is not None and view.status in statuses:
                return view
            if time.monotonic() >= deadline:
                pending = [r for r in self.pending_interactions() if r.run_id == run_id] \
                    if view is not None and view.status == "parked" else []
                raise TimeoutError(timeout_message(run_id, view, pending, timeout))
            time.sleep(poll_s)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the host has stopped (for any reason); True if it has."""
        return self._parts.stopped.wait(timeout)

    def stop(self, reason: str = "stop requested") -> None:
        """Stop every actor this host started (reverse order: subscriptions first, writer last) and
        release the lock."""
        self._parts.shut_down(reason)
        try:
            self.supervisor.stop(block=True, timeout=10)
        except (pykka.ActorDeadError, pykka.Timeout):
            pass

    def __enter__(self) -> HostHandle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
