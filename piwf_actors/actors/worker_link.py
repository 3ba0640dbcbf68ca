"""`LaunchLink`: one launch's hot path, from the worker's socket to the writer and back.

Every transition a worker reports is a request the writer must commit before
the worker hears its answer (worker/supervisor_link.py). The requests of a
launch go from the socket thread (`WorkerSockets`) straight into the
writer's queue, and the writer's answers go from its thread straight back to
the worker's socket: a node costs no actor message at all, where passing
through the runner supervisor cost two thread hand-offs per request. The
supervisor keeps what is not per node: the launch's life cycle (the launch
frame, the end of the launch, the exit it reports), the watchdog's checks,
`content.read` (a read of the blob table) and stopping a launch whose claim
is lost, which this link tells it (`LaunchClaimLost`).

Threads. A link is made by its supervisor for each launch and touched by
three threads, each through its own methods:

- the socket thread: `from_worker` (requests, content frames) and the
  watchdog's arming and disarming;
- the writer's thread: `deliver_all`, the answers of one batch;
- the supervisor's: everything else.

The state they share is a handful of attributes, each changed with a
single assignment (atomic under the GIL): `claim_released` by the writer's
thread, `load_failure` by the socket thread, `exit_reported` by the
supervisor (mirroring its step function's state, supervision.py); `watch`
and `ready_deadline` are set and cleared by the socket thread and cleared by
the supervisor (its watchdog, the exit), where the last write wins and
either way the watchdog stands down. The order that matters is carried by the worker itself (it sends
`run_over` only after it read the answer that released the claim, so the
supervisor sees `claim_released` by then). The content exchange's upload
side is the socket thread's alone; its download side is filled by whoever
encodes a frame for the worker before the worker can ask for it.

A bug in this hot path must not leave a launch hanging (its worker waiting
for an answer that never comes): an exception in `from_worker` or
`deliver_all` is logged and told to the supervisor as `LinkBroken`, which
kills the worker and settles the launch, as a crash of the supervisor
itself would have.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.actors.content_exchange import ContentExchange
from piwf_actors.actors.worker_sockets import WorkerSockets
from piwf_actors.actors.writer_handle import BatchReply, WriterHandle
from piwf_actors.errors import DecodeError, outcome_for
from piwf_actors.store.requests import WriteCommand, WriteResult

log = logging.getLogger(__name__)

#: Requests after which no node is running any more (the watchdog stands down).
NODE_ENDS = frozenset({"node_finished", "interaction_request", "run_failed", "finish"})

#: The write commands of each launch kind: (worker requests, the exit of a launch that ended without its result).
COMMANDS = {"run": ("worker.message", "runner.exit"), "reconcile": ("reconcile.message", "reconcile.exit")}


@dataclass(frozen=True, slots=True)
class Launch:
    """A claimed run, told by the scheduler to an idle supervisor."""

    run_id: str
    generation: int
    launch_id: str
    token_hash: str
    revision: int
    envelope: dict[str, Any]  # workflow, path, attr, digest, project path, source bytes, state
    worker_pid: int | None = None  # the worker recorded with the claim (None: attach after spawning)
    #: "run", or "reconcile": a resource manager's reconcile (worker/reconcile.py), whose `run_id` is its
    #: launch id, `generation` its claim generation, and `fence` the resource it claimed ({manager, key}).
    kind: str = "run"
    fence: dict[str, Any] | None = None

    def claim_fence(self) -> dict[str, Any]:
        """What names the claim this launch's writes are fenced by: the run and its claim generation,
        or the resource and its claim generation."""
        if self.kind == "reconcile":
            assert self.fence is not None
            return {**self.fence, "claim_generation": self.generation}
        return {"run_id": self.run_id, "generation": self.generation}


@dataclass(frozen=True, slots=True)
class LaunchClaimLost:
    """Told to the supervisor by a link when the writer answered one of the launch's requests
    `claimLost` before the launch's own transition released the claim: stop the launch."""

    launch_id: str


@dataclass(frozen=True, slots=True)
class LinkBroken:
    """Told to the supervisor by a link when its worker broke the protocol (a bad content frame)."""

    launch_id: str
    detail: str


class LaunchLink(BatchReply):
    """What the supervisor, the socket thread and the writer know of one launch (see the module
    docstring for which thread touches what)."""

    def __init__(self, launch: Launch, content: ContentExchange, *, writer: WriterHandle, sockets: WorkerSockets,
                 sock: socket.socket | None, ready_deadline: float | None, tell: Callable[[Any], object],
                 clock: Callable[[], float], watchdog_grace_s: float) -> None:
        """Runs in the supervisor's thread, at the launch."""
        self.launch = launch
        self.content = content
        self._writer = writer
        self._sockets = sockets
        self._sock = sock  # the worker's socket this launch went to
        self._tell = tell  # to the supervisor
        self._clock = clock
        self._watchdog_grace_s = watchdog_grace_s
        self._request_command = COMMANDS[launch.kind][0]
        self._fence = {**launch.claim_fence(), "launch_id": launch.launch_id, "token_hash": launch.token_hash}
        self.ready_deadline = ready_deadline  # cleared by the socket thread at the worker's first request
        # (node id, attempt id, timeout_s, deadline), set by the socket thread on `node_begin`.
        self.watch: tuple[str, str, float, float] | None = None
        self.exit_reported = False  # the supervisor's: the launch's exit is settled or being settled
        self.claim_released = False  # the writer's: the launch's own transition ended it
        self.load_failure: str | None = None  # the socket thread's: the worker could not load the workflow
        self._sent_epoch: dict[str, int | None] = {}  # host epoch each request went with (socket → writer)

    # --- to the worker (any thread) ---------------------------------------------------------------

    def send(self, frame: dict[str, Any], under: tuple[str, ...] = ()) -> None:
        """Send a frame to this launch's worker, large values under `under` cut out as readable
        content. A worker gone or replaced meanwhile gets nothing (its socket was removed)."""
        if self._sock is not None:
            self._sockets.send(self._sock, self.content.encode(frame, under))

    def answer(self, message_id: Any, answer: dict[str, Any]) -> None:
        if self._sock is not None:
            self._sockets.send(self._sock, self._answer_bytes(message_id, answer))

    def answer_read(self, message_id: Any, payload: dict[str, Any]) -> None:
        """Answer the worker's `content.read` with one chunk, in a frame that is never cut."""
        if self._sock is not None:
            self._sockets.send(self._sock, self.content.read(message_id, payload))

    def _answer_bytes(self, message_id: Any, answer: dict[str, Any]) -> bytes:
        value = answer.get("value")
        if isinstance(value, dict) and value.get("content_refs"):
            # A `ready` answer carries the launch state; its large values stay in the store.
            value = dict(value)
            stored = value.pop("content_refs")
            answer = self.content.point_at({**answer, "value": value}, stored, "value")
        return self.content.encode({"kind": "response", "message_id": message_id, **answer}, ("value",))

    # --- from the worker (the socket thread) ------------------------------------------------------

    def from_worker(self, frame: dict[str, Any]) -> bool:
        """A `request` (other than `content.read`) or a `content` frame of this launch's worker.
        False when handling it failed: the supervisor was told `LinkBroken`."""
        try:
            self._from_worker(frame)
            return True
        except Exception as exc:
            log.exception("run %s: a worker frame could not be handled", self.launch.run_id)
            self._tell(LinkBroken(self.launch.launch_id, f"a worker frame could not be handled: "
                                                         f"{type(exc).__name__}: {exc}"))
            return False

    def _from_worker(self, frame: dict[str, Any]) -> None:
        if frame.get("kind") == "content":
            try:
                self.content.receive(frame)
            except DecodeError as exc:
                self._tell(LinkBroken(self.launch.launch_id, f"bad content frame: {exc.one_line()}"))
            return
        self.ready_deadline = None  # the worker is up and talking
        op = frame.get("op")
        if op in NODE_ENDS:
            self.disarm_watchdog(frame)
        try:
            frame = self.content.complete(frame)
        except DecodeError as exc:
            self.answer(frame.get("message_id"), {"outcome": "rejected", "error": exc.one_line()})
            return
        launch = self.launch
        if (frame.get("run_id") != launch.run_id or frame.get("generation") != launch.generation
                or frame.get("launch_id") != launch.launch_id):
            self.answer(frame.get("message_id"), {"outcome": "claimLost", "error": "message for another launch"})
            return
        payload = frame.get("payload")
        if op == "run_failed" and isinstance(payload, dict) and payload.get("code") == "workflow_load_failed":
            self.load_failure = str(payload.get("message", ""))
        correlation = f"msg:{frame.get('message_id')}"
        self._sent_epoch[correlation] = self._writer.host_epoch
        self._writer.submit(WriteCommand(self._request_command, {
            **self._fence, "message_id": frame.get("message_id"), "op": op,
            "expected_revision": frame.get("expected_revision"), "payload": payload}, correlation_id=correlation,
            pipelined=frame.get("posted") is True), self)

    def arm_watchdog(self, frame: dict[str, Any]) -> None:
        """`node_begin {node_id, attempt_id, timeout_s}`: the node must be over by timeout_s + grace."""
        timeout_s = frame.get("timeout_s")
        if isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool) and timeout_s > 0:
            self.watch = (str(frame.get("node_id")), str(frame.get("attempt_id")), float(timeout_s),
                          self._clock() + float(timeout_s) + self._watchdog_grace_s)

    def disarm_watchdog(self, frame: dict[str, Any]) -> None:
        """A request that ends the watched node stands the watchdog down. It may already be armed for
        the next node (both frames came in one read), so only the watched attempt's own end counts."""
        watch = self.watch
        if watch is None:
            return
        payload = frame.get("payload") or {}
        if frame.get("op") == "run_failed" or payload.get("attempt_id") in (None, watch[1]):
            self.watch = None

    # --- the writer's answers (the writer's thread) -----------------------------------------------

    def deliver_all(self, results: list[WriteResult]) -> None:
        """The answers to this launch's requests in one batch, in order, in one send."""
        try:
            self._deliver_all(results)
        except Exception as exc:
            log.exception("run %s: the writer's answers could not be sent", self.launch.run_id)
            self._tell(LinkBroken(self.launch.launch_id, f"the writer's answers could not be sent: "
                                                         f"{type(exc).__name__}: {exc}"))

    def _deliver_all(self, results: list[WriteResult]) -> None:
        if self.exit_reported:
            return  # the launch is over: its worker is gone, or ended it and waits for the next
        frames = []
        lost = False
        for result in results:
            correlation = result.correlation_id or ""
            answer = self._answer_to(result, self._sent_epoch.pop(correlation, None))
            frames.append(self._answer_bytes(correlation[4:], answer))
            if answer["outcome"] == "claimLost" and not self.claim_released:
                # (After the launch's own transition released the claim, the requests the worker
                # pipelined behind it are refused this way; it reads past them and ends the launch.)
                lost = True
        if self._sock is not None:
            self._sockets.send(self._sock, b"".join(frames))
        if lost:
            self._tell(LaunchClaimLost(self.launch.launch_id))

    def _answer_to(self, result: WriteResult, sent_epoch: int | None) -> dict[str, Any]:
        if result.ok and result.value.get("released"):
            self.claim_released = True
        expires_at = self._writer.lease_expires_at
        if result.ok and expires_at is not None and time.time() >= expires_at:
            # Committed under the lease, but the lease ran out before the answer went out (the
            # host was paused): the worker must not go on now. It sends the message again and
            # gets the recorded answer once the lease is held again.
            return {"outcome": "unavailable", "error": "the host's lease expired; try again"}
        if result.ok:
            answer = dict(result.value)
            answer.setdefault("outcome", "accepted")
            return answer
        if result.error_code == "stale_epoch" and sent_epoch == self._writer.host_epoch:
            # The host's epoch is over and did not move on: this host lost its lease, and the
            # run's claim with it. (Had the host taken the lease again at a higher epoch, its
            # claims moved with it and the worker just sends the message again: `unavailable`.)
            return {"outcome": "claimLost", "error": result.error}
        return {"outcome": outcome_for(result.error_code), "error": result.error}
