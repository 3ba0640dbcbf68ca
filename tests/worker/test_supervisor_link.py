"""The worker's end of the worker protocol, against a scripted supervisor on a socketpair.

- `unavailable` (nothing was written) makes the worker send the very same
  request again (same message id) after a growing pause, until it is
  answered otherwise;
- a request too large for one frame goes with its large values cut out and
  sent ahead as `content` frames, which the supervisor's `ContentUpload`
  puts back exactly;
- an answer that refers to content is completed with `content.read`
  requests, and damaged content is refused.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from piwf_actors.wire import recv_frame, send_frame
from piwf_actors.wire.content import FRAME_BUDGET, ContentUpload, digest_of, encode
from piwf_actors.worker.supervisor_link import ProtocolBroken, SupervisorLink

LAUNCH = {"run_id": "r1", "generation": 1, "launch_id": "e1", "revision": 0}


class Supervisor:
    """The far end: records every frame and answers requests with `answer(frame)`."""

    def __init__(self, sock: socket.socket, answer: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
        self.sock = sock
        self.answer = answer
        self.frames: list[dict[str, Any]] = []
        self.upload = ContentUpload()  # content frames go here, as in the runner supervisor
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                frame = recv_frame(self.sock, max_bytes=8 * 1024 * 1024)
            except OSError:
                return
            if frame is None:
                return
            self.frames.append(frame)
            if frame.get("kind") == "content":
                self.upload.add(frame)
            if frame.get("kind") == "request":
                reply = self.answer(frame)
                if reply is not None:
                    send_frame(self.sock, {"kind": "response", "message_id": frame["message_id"], **reply})


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    worker, supervisor = socket.socketpair()
    try:
        yield worker, supervisor
    finally:
        worker.close()
        supervisor.close()


def test_unavailable_is_answered_by_sending_the_same_message_again(pair) -> None:
    worker_sock, supervisor_sock = pair
    answers = iter([{"outcome": "unavailable", "error": "database or disk is full"},
                    {"outcome": "unavailable", "error": "database or disk is full"},
                    {"outcome": "accepted", "value": {"ok": 1}, "revision": 5}])
    far = Supervisor(supervisor_sock, lambda _frame: next(answers))
    pauses: list[float] = []
    link = SupervisorLink(worker_sock, LAUNCH, sleep=pauses.append)
    assert link.accepted("node_finished", {"node_id": "a", "outcome": "ok"}) == {"ok": 1}
    requests = [f for f in far.frames if f["kind"] == "request"]
    assert len(requests) == 3
    assert {f["message_id"] for f in requests} == {"m1"} and all(f == requests[0] for f in requests)
    assert pauses == [0.05, 0.1]
    assert link.revision == 5


def test_a_large_request_travels_as_content_frames_and_is_put_back_exactly(pair) -> None:
    worker_sock, supervisor_sock = pair
    resolved: list[dict[str, Any]] = []
    far: Supervisor

    def answer(frame: dict[str, Any]) -> dict[str, Any]:
        resolved.append(far.upload.resolve(dict(frame)))
        return {"outcome": "accepted", "value": None}

    far = Supervisor(supervisor_sock, answer)
    original = {"node_id": "big", "outcome": "ok",
                "output": {"stdout": "x" * 3_000_000, "rows": [{"i": i, "pad": "p" * 100} for i in range(20_000)],
                           "small": 7}}
    link = SupervisorLink(worker_sock, LAUNCH)
    link.accepted("node_finished", original)
    request = next(f for f in far.frames if f["kind"] == "request")
    assert request["refs"], "the large parts should have been cut out"
    assert request["payload"]["output"]["small"] == 7  # small values stay inline
    contents = [f for f in far.frames if f["kind"] == "content"]
    assert contents and all(len(f["data"]) <= 1024 * 1024 for f in contents)
    assert far.frames.index(request) > far.frames.index(contents[-1])  # content goes ahead of its request
    assert resolved[0]["payload"] == original
    assert "refs" not in resolved[0]


def test_an_answer_with_content_references_is_completed_by_content_reads(pair) -> None:
    worker_sock, supervisor_sock = pair
    value = {"outputs": {"a": "y" * 2_500_000}}
    data, encoding = encode(value["outputs"]["a"])
    digest = digest_of(data)

    def answer(frame: dict[str, Any]) -> dict[str, Any]:
        if frame["op"] == "content.read":
            offset = frame["payload"]["offset"]
            return {"outcome": "accepted", "value": {"digest": digest, "offset": offset, "total_bytes": len(data),
                                                     "data": data[offset:offset + 1024 * 1024]}}
        return {"outcome": "accepted", "value": {"outputs": {"a": None}},
                "refs": [{"path": ["value", "outputs", "a"], "digest": digest, "bytes": len(data),
                          "encoding": encoding}]}

    far = Supervisor(supervisor_sock, answer)
    link = SupervisorLink(worker_sock, LAUNCH)
    assert link.accepted("ready", {}, fenced=False) == value
    reads = [f for f in far.frames if f.get("op") == "content.read"]
    assert [f["payload"]["offset"] for f in reads] == [0, 1024 * 1024, 2 * 1024 * 1024]


def test_damaged_content_is_refused(pair) -> None:
    worker_sock, supervisor_sock = pair
    data, encoding = encode("z" * 100)

    def answer(frame: dict[str, Any]) -> dict[str, Any]:
        if frame["op"] == "content.read":
            return {"outcome": "accepted", "value": {"digest": "0" * 64, "offset": 0, "total_bytes": len(data),
                                                     "data": data}}
        return {"outcome": "accepted", "value": {"v": None},
                "refs": [{"path": ["value", "v"], "digest": "0" * 64, "bytes": len(data), "encoding": encoding}]}

    Supervisor(supervisor_sock, answer)
    link = SupervisorLink(worker_sock, LAUNCH)
    with pytest.raises(ProtocolBroken, match="damaged"):
        link.accepted("ready", {}, fenced=False)


def test_small_requests_are_one_frame_without_references(pair) -> None:
    worker_sock, supervisor_sock = pair
    far = Supervisor(supervisor_sock, lambda _f: {"outcome": "accepted", "value": None})
    link = SupervisorLink(worker_sock, LAUNCH)
    link.accepted("node_finished", {"node_id": "a", "output": "x" * (FRAME_BUDGET // 2)})
    assert [f["kind"] for f in far.frames] == ["request"] and "refs" not in far.frames[0]


def test_the_last_result_goes_right_behind_the_pipelined_ones_to_be_committed_with_them(pair) -> None:
    """`last` does not wait for the answers of the results before it: the host gets them all at once
    and commits them in one transaction. Only the posted ones are marked `posted` (the writer may hold
    those a moment for more; the last one, the worker waits for)."""
    worker_sock, supervisor_sock = pair
    seen = threading.Event()
    held: list[dict[str, Any]] = []

    def answer(frame: dict[str, Any]) -> dict[str, Any] | None:
        held.append(frame)
        if len(held) < 3:
            return None  # the answers are held back until all three requests are in
        seen.set()
        for earlier in held[:-1]:
            send_frame(supervisor_sock, {"kind": "response", "message_id": earlier["message_id"],
                                         "outcome": "accepted", "value": {}, "revision": 0})
        return {"outcome": "accepted", "value": {"directive": None}, "revision": 0}

    far = Supervisor(supervisor_sock, answer)
    link = SupervisorLink(worker_sock, LAUNCH)
    link.post("node_finished", {"node_id": "a", "outcome": "ok"})
    link.post("node_finished", {"node_id": "b", "outcome": "ok"})
    link.last("node_finished", {"node_id": "c", "outcome": "ok"})
    assert seen.is_set() and link.outstanding == 0
    requests = [frame for frame in far.frames if frame["kind"] == "request"]
    assert [frame["payload"]["node_id"] for frame in requests] == ["a", "b", "c"]
    assert [frame.get("posted") for frame in requests] == [True, True, None]
    assert [frame["expected_revision"] for frame in requests] == [0, 1, 2]


def test_a_refused_earlier_result_ends_the_launch_at_the_last_one(pair) -> None:
    worker_sock, supervisor_sock = pair
    answers = iter([{"outcome": "conflict", "error": "progress conflict"},
                    {"outcome": "conflict", "error": "progress conflict"}])
    Supervisor(supervisor_sock, lambda _frame: next(answers))
    link = SupervisorLink(worker_sock, LAUNCH)
    link.post("node_finished", {"node_id": "a", "outcome": "ok"})
    with pytest.raises(ProtocolBroken, match="conflict"):
        link.last("node_finished", {"node_id": "b", "outcome": "ok"})
