"""The worker's end of the worker protocol: requests answered in order, pure results pipelined.

Every transition is a request frame carrying run id, generation, launch
id, a message id that is unique within the launch, and the run revision
the worker expects. The supervisor answers each request only after the
writer committed (or refused) it, and answers them in the order they were
sent. `claimLost` ends the worker process: another launch owns the run now
and nothing this one does may count.

Pipelining (`post`): a pure node's result is sent and the engine goes on to
the next node without waiting for the answer. Every answer still has to
come back accepted, in order; `settle` reads them all and is called before
anything that must not run on an uncommitted past (an effect, an
interaction, the end of the run — see docs/durability.md). The expected
revision of a pipelined request is predicted (each accepted fenced request
moves the run's progress by exactly one), so a refused request makes every
later one refused too, and none of them is written.

`unavailable` (the host cannot write just now: disk full, lease expired,
writer restarting) is not an answer to give up on: the worker keeps its
results and sends every outstanding request again (same message ids, so each
is applied once) with a growing pause, until they are committed or the claim
is lost. The answers to the first sending of the later requests are still on
their way when the head's `unavailable` arrives; they are read and dropped
first, since the second sending's answers are the ones that count.

A stop directive (the host parked or ended the run at a node boundary: pause,
cancel) in a pipelined answer raises RunStopped; the requests sent after it
are answered with refusals, which are read and dropped. The engine `poll`s
the answers that have arrived after every pipelined result, so a stop ends
the launch within a node; and when a pause is requested, the supervisor
sends a `hold` frame, after which the worker waits for its answers before
it starts another node: the pause lands at the boundary with no node run
for nothing. At most PIPELINE_WINDOW results are ever outstanding.

Frames stay bounded whatever the size of the values they carry (see
`wire/content.py`): a request too large for one frame goes with its
large values cut out and sent ahead as `content` frames; an answer or
launch that refers to content is completed with `content.read` requests,
which are only sent while no pipelined request is outstanding (the answers
of those carry no content references).
"""

from __future__ import annotations

import logging
import select
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import DecodeError
from piwf_actors.wire import pack, recv_frame
from piwf_actors.wire.content import (
    FRAME_BUDGET,
    ContentRef,
    content_frames,
    cut,
    decode,
    digest_of,
    put_back,
    whole_frame,
)
from piwf_actors.wire.frames import encode_frame, frame_of_body

log = logging.getLogger("piwf.worker")

#: Exit status of a worker that learned its claim is lost.
EXIT_CLAIM_LOST = 3
#: Pure results sent ahead at most: a host that stops answering (paused, stalled) holds the worker
#: after this many, and no more than this many pure nodes are ever run for nothing.
PIPELINE_WINDOW = 8
#: Pauses between resends of requests answered `unavailable`.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0


class ClaimLostExit(SystemExit):
    def __init__(self, detail: str) -> None:
        super().__init__(EXIT_CLAIM_LOST)
        self.detail = detail


class ProtocolBroken(Exception):
    """The supervisor went away, answered something unreadable, or refused a transition."""


class RunStopped(Exception):
    """The host ended this launch at a node boundary (the run was paused or cancelled)."""


@dataclass(slots=True)
class _Sent:
    """A request whose answer has not been read yet."""

    op: str
    message_id: str
    wire: list[bytes]


class SupervisorLink:
    def __init__(self, sock: socket.socket, launch: dict[str, Any], *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._sock = sock
        self._sleep = sleep
        self.run_id: str = launch["run_id"]
        self.generation: int = launch["generation"]
        self.launch_id: str = launch["launch_id"]
        #: The run's progress revision as last committed (from the answers).
        self.revision: int | None = launch.get("revision")
        # What the next fenced request expects: the committed revision plus one per fenced
        # request still outstanding.
        self._expected: int | None = self.revision
        self._next_id = 0
        self._outstanding: deque[_Sent] = deque()
        self._hold = False  # the supervisor said a pause is pending (a `hold` frame)

    # --- requests -------------------------------------------------------------------

    def post(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> None:
        """Send a request without waiting for its answer (pipelined). Its answer is read, and must be
        accepted, by the next `settle` (which every waiting request does first)."""
        while len(self._outstanding) >= PIPELINE_WINDOW:
            self._take_pipelined()
        self._send_request(op, payload or {}, fenced, posted=True)

    def request(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> dict[str, Any]:
        """Settle what is outstanding, then send one request and wait for its answer; returns
        {outcome, value, revision, error}."""
        self.settle()
        self._send_request(op, payload or {}, fenced)
        return self._read_head()

    def accepted(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> Any:
        """`request` that must be accepted; anything else is a ProtocolBroken."""
        answer = self.request(op, payload, fenced=fenced)
        if answer.get("outcome") != "accepted":
            raise ProtocolBroken(f"{op} was {answer.get('outcome')}: {answer.get('error')}")
        return answer.get("value")

    def last(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> None:
        """Send the launch's last request (the result that ends the run) right behind the pipelined
        ones, then read every answer, as `settle` does (RunStopped for its own stop directive).

        Unlike `request` it does not settle first, so the results and the end of the run reach the
        host together and are committed in one transaction, in order. Nothing that must not run on
        an uncommitted past comes after it in this launch, and it cannot be committed without the
        results before it: their expected revisions are predicted, so a refusal of a fenced one
        refuses it too. The one unfenced request that may be outstanding, a posted `ready` (a run
        whose first node is its last), is refused only by the claim's own checks, which refuse
        this request as well. It is not marked posted: the worker waits for it, the writer must
        not hold it."""
        while len(self._outstanding) >= PIPELINE_WINDOW:
            self._take_pipelined()
        self._send_request(op, payload or {}, fenced)
        self.settle()

    def settle(self) -> None:
        """Read the answers of every pipelined request. A refusal ends the launch (ProtocolBroken);
        a stop directive raises RunStopped once the rest are read."""
        while self._outstanding:
            self._take_pipelined()

    def poll(self) -> None:
        """Read the answers that have already arrived, without waiting for the others: a stop
        directive among them (a pause at an earlier boundary) ends the launch now (RunStopped)
        instead of after a chain of pure nodes computed for nothing."""
        while self._outstanding and self._readable():
            self._take_pipelined()
        if self._hold:
            # A pause is pending: find out whether it lands at the boundary just passed before
            # starting another node.
            self._hold = False
            self.settle()

    def _take_pipelined(self) -> None:
        """Read the oldest pipelined answer: it must be accepted, and may stop the launch."""
        op = self._outstanding[0].op
        answer = self._read_head()
        if answer.get("outcome") != "accepted":
            raise ProtocolBroken(f"{op} was {answer.get('outcome')}: {answer.get('error')}")
        value = answer.get("value")
        if isinstance(value, dict) and value.get("directive") == "stop":
            self._drop_outstanding()
            raise RunStopped()

    def _readable(self) -> bool:
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError) as exc:
            raise ProtocolBroken(f"supervisor connection failed: {exc}") from exc
        return bool(readable)

    @property
    def outstanding(self) -> int:
        """Requests sent whose answers are not read yet."""
        return len(self._outstanding)

    def notify(self, frame: dict[str, Any]) -> None:
        """A one-way frame for the supervisor (no answer): e.g. `node_begin` for its watchdog."""
        self._send([encode_frame(frame)])

    def resolve(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Complete a frame from the supervisor whose large values travel as content references."""
        refs = frame.pop("refs", None)
        if refs and self._outstanding:
            raise ProtocolBroken("content references arrived while pipelined requests were outstanding")
        try:
            for item in refs or []:
                ref = ContentRef.from_wire(item)
                put_back(frame, ref, decode(self._read_content(ref), ref.encoding))
        except DecodeError as exc:
            raise ProtocolBroken(f"content from the supervisor could not be used: {exc.one_line()}") from exc
        return frame

    # --- plumbing -------------------------------------------------------------------------

    def _frame(self, op: str, payload: dict[str, Any], expected: int | None) -> dict[str, Any]:
        self._next_id += 1
        return {"kind": "request", "message_id": f"m{self._next_id}", "op": op, "run_id": self.run_id,
                "generation": self.generation, "launch_id": self.launch_id,
                "expected_revision": expected, "payload": payload}

    def _send_request(self, op: str, payload: dict[str, Any], fenced: bool, *, posted: bool = False) -> None:
        expected = self._expected if fenced else None
        frame = self._frame(op, payload, expected)
        if posted:
            # Not waited for: the host may hold its commit a moment to take the next results along.
            frame["posted"] = True
        wire = self._encode(frame)
        self._send(wire)
        self._outstanding.append(_Sent(op, frame["message_id"], wire))
        if fenced and self._expected is not None:
            self._expected += 1

    @staticmethod
    def _encode(frame: dict[str, Any]) -> list[bytes]:
        """The bytes of a request: one frame, or its content frames and then the cut frame."""
        body = pack(frame)
        if len(body) <= FRAME_BUDGET:
            return [frame_of_body(body)]
        smaller, contents = cut(frame, len(body), under=("payload",))
        smaller["refs"] = [ref.to_wire() for ref, _ in contents]
        wire = [whole_frame(chunk) for chunk in content_frames(contents)]
        return [*wire, encode_frame(smaller)]

    def _send(self, wire: list[bytes]) -> None:
        try:
            for data in wire:
                self._sock.sendall(data)
        except OSError as exc:
            raise ProtocolBroken(f"supervisor connection failed: {exc}") from exc

    def _recv(self, waiting_for: str) -> dict[str, Any]:
        """The next answer; a `hold` frame on the way is noted (see `poll`) and skipped."""
        while True:
            try:
                answer = recv_frame(self._sock)
            except (OSError, DecodeError) as exc:
                raise ProtocolBroken(f"supervisor connection failed while waiting for {waiting_for}: {exc}") from exc
            if answer is None:
                raise ProtocolBroken("supervisor closed the connection")
            if answer.get("kind") != "hold":
                return answer
            self._hold = True

    def _read_head(self) -> dict[str, Any]:
        """The answer to the oldest outstanding request, after resending on `unavailable`."""
        head = self._outstanding[0]
        pause = RETRY_FIRST_S
        while True:
            answer = self._recv(head.op)
            if answer.get("message_id") != head.message_id:
                raise ProtocolBroken(f"answer to {answer.get('message_id')!r} arrived while waiting for "
                                     f"{head.message_id!r}")
            outcome = answer.get("outcome")
            if outcome == "claimLost":
                print(f"piwf worker: claim on {self.run_id} lost: {answer.get('error')}", file=sys.stderr)
                raise ClaimLostExit(str(answer.get("error")))
            if outcome != "unavailable":
                break
            # Nothing from the head on was written: drop the answers to the first sending of the
            # later requests, then send them all again, in order.
            log.info("run %s: %s not written (%s); sending %d request(s) again in %.2f s", self.run_id, head.op,
                     answer.get("error"), len(self._outstanding), pause)
            for later in list(self._outstanding)[1:]:
                self._drop_answer(later)
            self._sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)
            for sent in self._outstanding:
                self._send(sent.wire)
        self._outstanding.popleft()
        revision = answer.get("revision")
        if isinstance(revision, int) and outcome == "accepted":
            self.revision = revision
            if not self._outstanding:
                self._expected = revision  # nothing in flight: the prediction is the committed value
        if answer.get("refs"):
            self.resolve(answer)
        return answer

    def _drop_answer(self, sent: _Sent) -> None:
        answer = self._recv(sent.op)
        if answer.get("message_id") != sent.message_id:
            raise ProtocolBroken(f"answer to {answer.get('message_id')!r} arrived while dropping the answer to "
                                 f"{sent.message_id!r}")

    def _drop_outstanding(self) -> None:
        """After a stop: the requests sent later were refused (the launch is over); read past them."""
        while self._outstanding:
            self._drop_answer(self._outstanding.popleft())

    def _read_content(self, ref: ContentRef) -> bytes:
        """Pull one referenced value from the supervisor, chunk by chunk, and check its digest."""
        data = bytearray()
        while True:
            frame = self._frame("content.read", {"digest": ref.digest, "offset": len(data)}, None)
            self._send([encode_frame(frame)])
            answer = self._recv("content.read")
            if answer.get("outcome") != "accepted":
                raise ProtocolBroken(f"content.read of {ref.digest[:12]}… was {answer.get('outcome')}: "
                                     f"{answer.get('error')}")
            chunk = (answer.get("value") or {}).get("data")
            if not isinstance(chunk, bytes) or (not chunk and len(data) < ref.size):
                raise ProtocolBroken(f"content.read of {ref.digest[:12]}… returned no data at {len(data)}")
            data += chunk
            if len(data) >= ref.size:
                break
        if len(data) != ref.size or digest_of(bytes(data)) != ref.digest:
            raise ProtocolBroken(f"content {ref.digest[:12]}… arrived damaged ({len(data)} of {ref.size} bytes)")
        return bytes(data)
