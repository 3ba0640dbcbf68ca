"""The worker's end of the worker protocol: one request, one answer.

Every transition is a request frame carrying run id, generation, runner
epoch, a message id that is unique within the launch, and the run revision
the worker expects. The supervisor answers only after the writer committed
(or refused) it. `claimLost` ends the worker process: another launch owns
the run now and nothing this one does may count.

`unavailable` (the host cannot write just now: disk full, lease expired,
writer restarting) is not an answer to give up on: the worker keeps its
result and sends the very same request again (same message id, so it is
applied once) with a growing pause, until it is committed or its claim is
lost.

Frames stay bounded whatever the size of the values they carry (see
`messages/content.py`): a request too large for one frame goes with its
large values cut out and sent ahead as `content` frames; an answer or
launch that refers to content is completed with `content.read` requests.
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from piwf_actors.errors import DecodeError
from piwf_actors.messages import pack, recv_frame
from piwf_actors.messages.content import FRAME_BUDGET, ContentRef, content_frames, cut, decode, digest_of, put_back
from piwf_actors.messages.frames import encode_frame, frame_of_body

log = logging.getLogger("piwf.worker")

#: Exit status of a worker that learned its claim is lost.
EXIT_CLAIM_LOST = 3
#: Pauses between resends of a request answered `unavailable`.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 2.0


class ClaimLostExit(SystemExit):
    def __init__(self, detail: str) -> None:
        super().__init__(EXIT_CLAIM_LOST)
        self.detail = detail


class ProtocolBroken(Exception):
    """The supervisor went away or answered something unreadable."""


class SupervisorLink:
    def __init__(self, sock: socket.socket, launch: dict[str, Any], *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._sock = sock
        self._sleep = sleep
        self.run_id: str = launch["run_id"]
        self.generation: int = launch["generation"]
        self.runner_epoch: str = launch["runner_epoch"]
        self.revision: int | None = launch.get("revision")
        self._next_id = 0
        # The request sent with `begin` whose answer is not read yet: (op, the bytes that carried it).
        self._outstanding: tuple[str, list[bytes]] | None = None

    # --- requests -------------------------------------------------------------------

    def request(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> dict[str, Any]:
        """Send one request and wait for its answer; returns {outcome, value, revision, error}.

        `fenced` requests carry the expected revision; the answer's revision
        becomes the next expectation.
        """
        self.settle()
        self.begin(op, payload, fenced=fenced)
        return self._read_answer()

    def begin(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> None:
        """Send a request without waiting; its answer is read (and must be accepted)
        before the next request goes out, so requests stay strictly in order."""
        self.settle()
        frame = self._frame(op, payload or {}, fenced)
        wire = self._encode(frame)
        self._send(wire)
        self._outstanding = (op, wire)

    def settle(self) -> None:
        """Read the answer of a request sent with `begin`; anything but accepted ends the launch."""
        if self._outstanding is None:
            return
        op = self._outstanding[0]
        answer = self._read_answer()
        if answer.get("outcome") != "accepted":
            raise ProtocolBroken(f"{op} was {answer.get('outcome')}: {answer.get('error')}")

    def accepted(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> Any:
        """`request` that must be accepted; anything else is a ProtocolBroken."""
        answer = self.request(op, payload, fenced=fenced)
        if answer.get("outcome") != "accepted":
            raise ProtocolBroken(f"{op} was {answer.get('outcome')}: {answer.get('error')}")
        return answer.get("value")

    def notify(self, frame: dict[str, Any]) -> None:
        """A one-way frame for the supervisor (no answer): e.g. `node_begin` for its watchdog."""
        self._send([encode_frame(frame)])

    def resolve(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Complete a frame from the supervisor whose large values travel as content references."""
        refs = frame.pop("refs", None)
        try:
            for item in refs or []:
                ref = ContentRef.from_wire(item)
                put_back(frame, ref, decode(self._read_content(ref), ref.encoding))
        except DecodeError as exc:
            raise ProtocolBroken(f"content from the supervisor could not be used: {exc.one_line()}") from exc
        return frame

    # --- plumbing -------------------------------------------------------------------------

    def _frame(self, op: str, payload: dict[str, Any], fenced: bool) -> dict[str, Any]:
        self._next_id += 1
        return {"kind": "request", "message_id": f"m{self._next_id}", "op": op, "run_id": self.run_id,
                "generation": self.generation, "runner_epoch": self.runner_epoch,
                "expected_revision": self.revision if fenced else None, "payload": payload}

    @staticmethod
    def _encode(frame: dict[str, Any]) -> list[bytes]:
        """The bytes of a request: one frame, or its content frames and then the cut frame."""
        body = pack(frame)
        if len(body) <= FRAME_BUDGET:
            return [frame_of_body(body)]
        smaller, contents = cut(frame, len(body), under=("payload",))
        smaller["refs"] = [ref.to_wire() for ref, _ in contents]
        wire = [encode_frame(chunk) for chunk in content_frames(contents)]
        return [*wire, encode_frame(smaller)]

    def _send(self, wire: list[bytes]) -> None:
        try:
            for data in wire:
                self._sock.sendall(data)
        except OSError as exc:
            raise ProtocolBroken(f"supervisor connection failed: {exc}") from exc

    def _recv(self, waiting_for: str) -> dict[str, Any]:
        try:
            answer = recv_frame(self._sock)
        except (OSError, DecodeError) as exc:
            raise ProtocolBroken(f"supervisor connection failed while waiting for {waiting_for}: {exc}") from exc
        if answer is None:
            raise ProtocolBroken("supervisor closed the connection")
        return answer

    def _read_answer(self) -> dict[str, Any]:
        assert self._outstanding is not None
        (op, wire), self._outstanding = self._outstanding, None
        pause = RETRY_FIRST_S
        while True:
            answer = self._recv(op)
            outcome = answer.get("outcome")
            if outcome == "claimLost":
                print(f"piwf worker: claim on {self.run_id} lost: {answer.get('error')}", file=sys.stderr)
                raise ClaimLostExit(str(answer.get("error")))
            if outcome != "unavailable":
                break
            # Nothing of it was written: keep the result, send the same message again.
            log.info("run %s: %s not written (%s); sending it again in %.2f s", self.run_id, op,
                     answer.get("error"), pause)
            self._sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)
            self._send(wire)
        if isinstance(answer.get("revision"), int):
            self.revision = answer["revision"]
        if answer.get("refs"):
            self.resolve(answer)
        return answer

    def _read_content(self, ref: ContentRef) -> bytes:
        """Pull one referenced value from the supervisor, chunk by chunk, and check its digest."""
        data = bytearray()
        while True:
            frame = self._frame("content.read", {"digest": ref.digest, "offset": len(data)}, False)
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
