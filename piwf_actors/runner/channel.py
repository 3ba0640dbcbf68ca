"""The worker's end of the worker protocol: one request, one answer.

Every transition is a request frame carrying run id, generation, runner
epoch, a message id that is unique within the launch, and the run revision
the worker expects. The supervisor answers only after the writer committed
(or refused) it. `claimLost` ends the worker process: another launch owns
the run now and nothing this one does may count.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from piwf_actors.messages import recv_frame, send_frame

#: Exit status of a worker that learned its claim is lost.
EXIT_CLAIM_LOST = 3


class ClaimLostExit(SystemExit):
    def __init__(self, detail: str) -> None:
        super().__init__(EXIT_CLAIM_LOST)
        self.detail = detail


class ProtocolBroken(Exception):
    """The supervisor went away or answered something unreadable."""


class SupervisorChannel:
    def __init__(self, sock: socket.socket, launch: dict[str, Any]) -> None:
        self._sock = sock
        self.run_id: str = launch["run_id"]
        self.generation: int = launch["generation"]
        self.runner_epoch: str = launch["runner_epoch"]
        self.revision: int | None = launch.get("revision")
        self._next_id = 0
        self._outstanding: str | None = None  # op of a request sent with `begin`, answer not read yet

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
        self._next_id += 1
        frame = {
            "kind": "request", "message_id": f"m{self._next_id}", "op": op, "run_id": self.run_id,
            "generation": self.generation, "runner_epoch": self.runner_epoch,
            "expected_revision": self.revision if fenced else None, "payload": payload or {},
        }
        try:
            send_frame(self._sock, frame)
        except OSError as exc:
            raise ProtocolBroken(f"supervisor connection failed: {exc}") from exc
        self._outstanding = op

    def settle(self) -> None:
        """Read the answer of a request sent with `begin`; anything but accepted ends the launch."""
        if self._outstanding is None:
            return
        answer = self._read_answer()
        if answer.get("outcome") != "accepted":
            raise ProtocolBroken(f"{self._outstanding} was {answer.get('outcome')}: {answer.get('error')}")

    def _read_answer(self) -> dict[str, Any]:
        op, self._outstanding = self._outstanding, None
        try:
            answer = recv_frame(self._sock)
        except OSError as exc:
            raise ProtocolBroken(f"supervisor connection failed while waiting for {op}: {exc}") from exc
        if answer is None:
            raise ProtocolBroken("supervisor closed the connection")
        outcome = answer.get("outcome")
        if outcome == "claimLost":
            print(f"piwf worker: claim on {self.run_id} lost: {answer.get('error')}", file=sys.stderr)
            raise ClaimLostExit(str(answer.get("error")))
        if isinstance(answer.get("revision"), int):
            self.revision = answer["revision"]
        return answer

    def accepted(self, op: str, payload: dict[str, Any] | None = None, *, fenced: bool = True) -> Any:
        """`request` that must be accepted; anything else is a ProtocolBroken."""
        answer = self.request(op, payload, fenced=fenced)
        if answer.get("outcome") != "accepted":
            raise ProtocolBroken(f"{op} was {answer.get('outcome')}: {answer.get('error')}")
        return answer.get("value")
