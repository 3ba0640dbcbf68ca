"""The embedding API: typed results (and their dict compatibility), typed errors, answering people's
requests, restarts, and run events told to an application's actor through `HostHandle.subscribe`.

Workflows live in a project directory made per test (`.piwf/workflows/flows.py`), so the names
are found the way the CLI finds them. Waits poll with a deadline or wait on a probe actor.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pykka
import pytest
from testsupport import wait_for

from piwf_actors import (
    AnswerReceipt,
    ControlReceipt,
    HostHandle,
    NodeFinished,
    NodeView,
    PendingRequest,
    RunEvent,
    RunFinished,
    RunParked,
    RunReceipt,
    RunStarted,
    RunSummary,
    RunView,
)
from piwf_actors.actors.base import Ping
from piwf_actors.actors.run_events import RunEventsSubscription, translate
from piwf_actors.errors import Conflict, DecodeError, HostError, NotFound, Rejected, WorkflowNotFound
from piwf_actors.results import EffectReceipt, RunError
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader

FLOWS = '''
from piwf_actors.workflows import (
    checkpoint, choice, compute, decision_switch, define_workflow, edge, human_decision, text_input,
)

pair = define_workflow(name="embed-pair", start_at="a", nodes={
    "a": compute(run=lambda ctx: {"n": ctx.input["n"] + 1}),
    "b": compute(run=lambda ctx: {"n": ctx.outputs["a"]["n"] * 2}),
}, edges=[edge("a", "b")])

broken = define_workflow(name="embed-broken", start_at="boom", nodes={
    "boom": compute(run=lambda ctx: 1 / 0),
}, edges=[])

gate = define_workflow(name="embed-gate", start_at="approve", nodes={
    "approve": human_decision(audience="operator", choices={
        "ship": choice(label="Ship it"),
        "fix": choice(label="Needs changes", input=text_input(name="instructions", prompt="What?", min_length=1)),
    }, request=lambda ctx: {"title": f"Ship {ctx.input['version']}?"}),
    "ship": compute(run=lambda ctx: {"shipped": ctx.input["version"]}),
    "fix": compute(run=lambda ctx: {"fix": ctx.outputs["approve"]["input"]["instructions"]}),
}, edges=[decision_switch("approve", cases={"ship": "ship", "fix": "fix"})])

ask = define_workflow(name="embed-ask", start_at="q", nodes={
    "q": checkpoint(prompt="how many?"),
    "echo": compute(run=lambda ctx: {"got": ctx.outputs["q"]}),
}, edges=[edge("q", "echo")])
'''


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "flows.py").write_text(FLOWS)
    return root


@pytest.fixture
def host(state_dir: Path, hosts: Callable[..., HostHandle]) -> HostHandle:
    return hosts(state_dir, lease_s=5)


class Probe(pykka.ThreadingActor):
    """An application actor that records what it is told; `ask("seen")` returns it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "seen":
            return list(self.seen)
        self.seen.append(message)
        return None


@pytest.fixture
def probes() -> Iterator[Callable[[], pykka.ActorRef[Any]]]:
    started: list[pykka.ActorRef[Any]] = []

    def start() -> pykka.ActorRef[Any]:
        ref = Probe.start()
        started.append(ref)
        return ref

    try:
        yield start
    finally:
        for ref in started:
            ref.stop()


def start(host: HostHandle, project: Path, name: str, run_input: Any = None, **kwargs: Any) -> str:
    return host.start_run(name, run_input, project_path=str(project), **kwargs).run_id


def seen(probe: pykka.ActorRef[Any], run_id: str | None = None) -> list[Any]:
    return [m for m in probe.ask("seen", timeout=5) if run_id is None or m.run_id == run_id]


def shape(notice: Any) -> tuple[Any, ...]:
    """A notice without its ids and sequence numbers."""
    if isinstance(notice, RunStarted):
        return ("started", notice.workflow, notice.resumed)
    if isinstance(notice, NodeFinished):
        return ("node", notice.node_id, notice.outcome)
    if isinstance(notice, RunParked):
        return ("parked", notice.reason)
    assert isinstance(notice, RunFinished), notice
    return ("finished", notice.status, notice.error and notice.error.code)


def wait_told_finished(probe: pykka.ActorRef[Any], run_id: str) -> list[Any]:
    return wait_for(lambda: (told := seen(probe, run_id)) and isinstance(told[-1], RunFinished) and told, 20,
                    lambda: f"RunFinished of {run_id}; told so far: {seen(probe, run_id)}")


def settle(subscription_ref: pykka.ActorRef[Any]) -> None:
    """Let a subscription work off what it was told so far (a notice, then the read it schedules)."""
    subscription_ref.ask(Ping(), timeout=5)
    subscription_ref.ask(Ping(), timeout=5)


def raw(host: HostHandle, read: Callable[[StoreReader], Any]) -> Any:
    reader = StoreReader(host.paths.database)
    try:
        return read(reader)
    finally:
        reader.close()


def parked_request(host: HostHandle, run_id: str) -> PendingRequest:
    host.wait_for_run(run_id, ("parked",), timeout=20)
    (request,) = [r for r in host.pending_interactions() if r.run_id == run_id]
    return request


# --- typed results ---------------------------------------------------------------------------------


def test_results_are_typed_and_read_as_their_wire_dicts(host: HostHandle, project: Path) -> None:
    receipt = host.start_run("embed-pair", {"n": 1}, project_path=str(project))
    assert isinstance(receipt, RunReceipt)
    assert (receipt.status, receipt.revision, receipt.outcome, receipt.parent_run_id) == ("queued", 1, "accepted", None)
    assert receipt.to_dict() == {"outcome": "accepted", "receipt": {"run_id": receipt.run_id, "status": "queued",
                                                                    "revision": 1}, "revision": 1}
    assert receipt["receipt"]["run_id"] == receipt.run_id and receipt["outcome"] == "accepted"
    assert receipt.get("nothing", "default") == "default" and "receipt" in receipt
    assert RunReceipt.from_wire(receipt.to_dict()) == receipt
    with pytest.raises(dataclasses.FrozenInstanceError):
        receipt.status = "done"  # type: ignore[misc]

    view = host.wait_for_run(receipt.run_id, timeout=20)
    assert isinstance(view, RunView) and view.finished
    assert (view.status, view.workflow, view.output, view.error) == ("done", "embed-pair", {"n": 4}, None)
    assert view.to_dict() == raw(host, lambda r: queries.run_view(r, receipt.run_id))  # exactly the wire form
    assert view["status"] == "done" and view["nodes"][1]["output"] == {"n": 4} and view.get("error") is None
    assert all(isinstance(node, NodeView) for node in view.nodes)
    assert [n.node_id for n in view.nodes] == ["a", "b"] and view.node("a").output == {"n": 2}
    assert view.node("nope") is None
    assert RunView.from_wire(view.to_dict()) == view
    assert host.get_run("run_missing") is None

    (summary,) = host.list_runs()
    assert isinstance(summary, RunSummary) and (summary.run_id, summary.status) == (receipt.run_id, "done")
    assert [s.to_dict() for s in host.list_runs("done")] == raw(host, lambda r: queries.run_list(r, "done"))
    assert host.list_runs("failed") == [] and summary["workflow"] == "embed-pair"

    events = host.run_events(receipt.run_id)
    assert all(isinstance(e, RunEvent) for e in events)
    assert (events[0].kind, events[-1].kind) == ("run_created", "run_finished")
    assert [e.to_dict() for e in events] == raw(host, lambda r: queries.run_events(r, receipt.run_id))
    assert host.run_events(receipt.run_id, after=events[-2].seq) == [events[-1]]
    assert events[-1]["kind"] == "run_finished"

    first = host.start_run("embed-pair", {"n": 2}, project_path=str(project), client_id="t", idempotency_key="k")
    again = host.start_run("embed-pair", {"n": 2}, project_path=str(project), client_id="t", idempotency_key="k")
    assert (first.outcome, again.outcome, again.run_id) == ("accepted", "adopted", first.run_id)
    assert again["receipt"] == first["receipt"]


def test_run_controls_return_control_receipts_and_raise_typed_errors(host: HostHandle, project: Path) -> None:
    run_id = start(host, project, "embed-gate", {"version": "1.0"})
    parked = host.wait_for_run(run_id, ("parked",), timeout=20)
    assert (parked.park_reason, parked.park_detail) == ("waiting", parked_request(host, run_id).request_id)

    paused = host.pause_run(run_id, expected_revision=parked.revision)
    assert isinstance(paused, ControlReceipt) and (paused.status, paused.outcome) == ("parked", "accepted")
    assert paused.to_dict() == {"outcome": "accepted", "receipt": {"run_id": run_id, "status": "parked",
                                                                   "revision": paused.revision},
                                "revision": paused.revision}
    assert host.get_run(run_id).pause_requested
    resumed = host.resume_run(run_id)
    assert (resumed["receipt"]["status"], resumed.revision) == ("parked", paused.revision + 1)
    with pytest.raises(Conflict):
        host.cancel_run(run_id, expected_revision=paused.revision)  # stale
    cancelled = host.cancel_run(run_id, expected_revision=resumed.revision, client_id="t", idempotency_key="c")
    assert cancelled.status == "cancelled"
    assert host.cancel_run(run_id, expected_revision=resumed.revision, client_id="t",
                           idempotency_key="c") == dataclasses.replace(cancelled, outcome="adopted")
    with pytest.raises(Rejected):
        host.cancel_run(run_id)  # already cancelled
    with pytest.raises(NotFound):
        host.pause_run("run_missing")
    with pytest.raises(NotFound):
        host.resolve_effect("eff_missing", "retry")
    with pytest.raises(Rejected):
        host.resolve_effect("eff_missing", "maybe")
    with pytest.raises(NotFound):
        host.answer_decision("req_missing", "ship")
    with pytest.raises(WorkflowNotFound):
        host.start_run("embed-nothing", project_path=str(project))


def test_answer_decision(host: HostHandle, project: Path) -> None:
    run_id = start(host, project, "embed-gate", {"version": "2.0"})
    request = parked_request(host, run_id)
    assert isinstance(request, PendingRequest)
    assert (request.kind, request.node_id, request.status, request.audience) == ("decision", "approve", "pending",
                                                                                 "operator")
    assert request.contract["title"] == "Ship 2.0?" and set(request.contract["choices"]) == {"ship", "fix"}
    assert request["request_id"] == request.request_id
    assert [r.to_dict() for r in host.pending_interactions()] == raw(
        host, lambda r: queries.pending_interactions(r))["requests"]

    with pytest.raises(Rejected):
        host.answer_decision(request.request_id, "fix")  # "fix" needs its instructions
    with pytest.raises(Conflict):
        host.answer_decision(request.request_id, "ship", expected_revision=request.revision + 1)
    receipt = host.answer_decision(request.request_id, "fix", input={"instructions": "more tests"},
                                   expected_revision=request.revision, client_id="t", idempotency_key="a1")
    assert isinstance(receipt, AnswerReceipt)
    assert (receipt.request_id, receipt.run_id, receipt.choice, receipt.outcome) == (
        request.request_id, run_id, "fix", "accepted")
    assert receipt.to_dict() == {"outcome": "accepted", "receipt": {
        "request_id": request.request_id, "submission_id": receipt.submission_id, "run_id": run_id, "choice": "fix",
        "revision": receipt.revision}, "revision": receipt.revision}
    replay = host.answer_decision(request.request_id, "fix", input={"instructions": "more tests"},
                                  expected_revision=request.revision, client_id="t", idempotency_key="a1")
    assert (replay.outcome, replay.submission_id) == ("adopted", receipt.submission_id)
    with pytest.raises(Conflict):
        host.answer_decision(request.request_id, "ship", client_id="t", idempotency_key="a2")  # answered already

    view = host.wait_for_run(run_id, timeout=20)
    assert (view.status, view.output) == ("done", {"fix": "more tests"})
    assert [r for r in host.pending_interactions() if r.run_id == run_id] == []


def test_answer_checkpoint(host: HostHandle, project: Path) -> None:
    run_id = start(host, project, "embed-ask")
    request = parked_request(host, run_id)
    assert (request.kind, request.contract["prompt"]) == ("checkpoint", "how many?")
    receipt = host.answer_checkpoint(request.request_id, {"k": 3})
    assert isinstance(receipt, AnswerReceipt) and receipt.choice is None and receipt.run_id == run_id
    assert set(receipt["receipt"]) == {"request_id", "submission_id", "run_id", "revision"}
    with pytest.raises(Conflict):
        host.answer_checkpoint(request.request_id, {"k": 4})
    assert host.wait_for_run(run_id, timeout=20).output == {"got": {"k": 3}}


def test_restart_run(host: HostHandle, project: Path) -> None:
    parent = start(host, project, "embed-pair", {"n": 1})
    view = host.wait_for_run(parent, timeout=20)
    with pytest.raises(Conflict):
        host.restart_run(parent, expected_revision=view.revision - 1)

    child = host.restart_run(parent, expected_revision=view.revision)
    assert isinstance(child, RunReceipt)
    assert (child.parent_run_id, child.digest_changed, child.status, child.outcome) == (parent, False, "queued",
                                                                                        "accepted")
    assert child.to_dict() == {"outcome": "accepted", "receipt": {
        "run_id": child.run_id, "status": "queued", "revision": 1, "parent_run_id": parent,
        "digest_changed": False}, "revision": 1}
    assert child["receipt"]["parent_run_id"] == parent
    assert host.restart_run(parent, expected_revision=view.revision, same_code=True).outcome == "adopted"
    done = host.wait_for_run(child.run_id, timeout=20)
    assert (done.status, done.output, done.parent_run_id) == ("done", {"n": 4}, parent)

    from_b = host.restart_run(parent, expected_revision=view.revision, from_node="b")
    assert (from_b.from_node, from_b["receipt"]["from_node"]) == ("b", "b") and from_b.run_id != child.run_id
    assert host.wait_for_run(from_b.run_id, timeout=20).output == {"n": 4}
    with pytest.raises(Rejected):
        host.restart_run(parent, expected_revision=view.revision, from_node="nope")


def test_start_run_resolves_names_from_the_current_directory(host: HostHandle, project: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    receipt = host.start_run("embed-pair", {"n": 5})
    view = host.wait_for_run(receipt.run_id, timeout=20)
    assert (view.status, view.output, view.project_path) == ("done", {"n": 12}, os.getcwd())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(WorkflowNotFound):
        host.start_run("embed-pair", {"n": 5})
    assert host.start_run("embed-pair", {"n": 1}, project_path=str(project)).status == "queued"


# --- subscriptions -----------------------------------------------------------------------------------


def test_subscribe_tells_an_actor_the_events_of_every_run(host: HostHandle, project: Path, probes) -> None:
    probe = probes()
    subscription = host.subscribe(probe)
    assert subscription.active and subscription.runs is None

    pair = start(host, project, "embed-pair", {"n": 1})
    broken = start(host, project, "embed-broken")
    gate = start(host, project, "embed-gate", {"version": "3.0"})
    assert [shape(n) for n in wait_told_finished(probe, pair)] == [
        ("started", "embed-pair", False), ("node", "a", "ok"), ("node", "b", "ok"), ("finished", "done", None)]
    told = wait_told_finished(probe, broken)
    assert [shape(n) for n in told] == [
        ("started", "embed-broken", False), ("node", "boom", "failed"), ("finished", "failed", "node_failed")]
    assert "ZeroDivisionError" in told[1].error and "ZeroDivisionError" in told[-1].error.message

    request = parked_request(host, gate)
    parked = wait_for(lambda: [n for n in seen(probe, gate) if isinstance(n, RunParked)], 20, "RunParked")
    assert (parked[0].reason, parked[0].detail) == ("waiting", request.request_id)
    host.answer_decision(request.request_id, "ship")
    told = wait_told_finished(probe, gate)
    assert [shape(n) for n in told] == [
        ("started", "embed-gate", False), ("parked", "waiting"), ("started", "embed-gate", True),
        ("node", "approve", "ok"), ("node", "ship", "ok"), ("finished", "done", None)]
    for run_id in (pair, broken, gate):  # each event once, in order
        seqs = [n.seq for n in seen(probe, run_id)]
        assert seqs == sorted(set(seqs)), seqs
    node = next(n for n in told if isinstance(n, NodeFinished) and n.node_id == "ship")
    assert node.attempt_id == host.get_run(gate).node("ship").attempt_id


def test_subscribe_to_named_runs_replays_them_and_tells_nothing_else(host: HostHandle, project: Path,
                                                                     probes) -> None:
    earlier = start(host, project, "embed-pair", {"n": 1})
    host.wait_for_run(earlier, timeout=20)
    probe, other = probes(), probes()
    subscription = host.subscribe(probe, runs=[earlier])
    assert subscription.runs == frozenset({earlier})
    # A run that finished before the subscription is told from its first event to its end.
    assert [shape(n) for n in wait_told_finished(probe, earlier)] == [
        ("started", "embed-pair", False), ("node", "a", "ok"), ("node", "b", "ok"), ("finished", "done", None)]

    later = host.start_run("embed-pair", {"n": 2}, project_path=str(project)).run_id
    host.subscribe(other, runs=later)  # one id as a string
    wait_told_finished(other, later)
    settle(subscription.actor_ref)
    assert {n.run_id for n in seen(probe)} == {earlier}
    assert {n.run_id for n in seen(other)} == {later}
    assert len(seen(probe)) == 4  # nothing told twice


def test_unsubscribe_and_a_stopped_subscriber_end_the_subscription(host: HostHandle, project: Path,
                                                                   probes) -> None:
    probe = probes()
    subscription = host.subscribe(probe)
    subscription.unsubscribe()
    assert not subscription.active
    subscription.unsubscribe()  # twice is fine
    run_id = start(host, project, "embed-pair", {"n": 1})
    host.wait_for_run(run_id, timeout=20)
    assert seen(probe) == []

    gone = probes()
    orphaned = host.subscribe(gone)
    gone.stop()
    start(host, project, "embed-pair", {"n": 2})
    wait_for(lambda: not orphaned.active, 20, "the subscription of a stopped actor to end")
    assert probe.is_alive()


def test_host_stop_stops_its_subscriptions(state_dir: Path, hosts: Callable[..., HostHandle], probes) -> None:
    host = hosts(state_dir, lease_s=5)
    probe = probes()
    subscriptions = [host.subscribe(probe), host.subscribe(probe, runs=["run_x"])]
    ended = host.subscribe(probe)
    ended.unsubscribe()
    assert [s.active for s in subscriptions] == [True, True]
    host.stop("test")
    assert [s.active for s in subscriptions] == [False, False]
    assert pykka.ActorRegistry.get_by_class(RunEventsSubscription) == []
    assert probe.is_alive()
    with pytest.raises(HostError):
        host.subscribe(probe)


# --- the pieces, without a host ------------------------------------------------------------------------


def _event(seq: int, kind: str, payload: Any = None, node_id: str | None = None) -> RunEvent:
    return RunEvent(seq, kind, node_id, None, payload, 1.0)


def test_translate_maps_event_kinds_to_notices() -> None:
    assert translate("r", _event(3, "run_started", {"steps": 0}), "wf", None) == RunStarted("r", "wf", 3)
    assert translate("r", _event(9, "run_resumed", {"steps": 2, "current_node": "x"}), "wf", None) == RunStarted(
        "r", "wf", 9, resumed=True)
    assert translate("r", _event(7, "run_resumed", {"from": "paused"}), "wf", None) is None  # re-queued only
    assert translate("r", _event(4, "node_failed", {"outcome": "failed", "error": "boom"}, "n"), "wf", None) == (
        NodeFinished("r", "n", "failed", None, 4, error="boom"))
    assert translate("r", _event(5, "run_parked", {"reason": "ambiguous_effect", "effect_id": "eff_1"}), "wf",
                     None) == RunParked("r", "ambiguous_effect", "eff_1", 5)
    assert translate("r", _event(6, "run_cancelled"), "wf", RunError("x", "y")) == RunFinished("r", "cancelled",
                                                                                              None, 6)
    assert translate("r", _event(6, "run_failed", {"error_code": "step_limit"}), "wf", None) == RunFinished(
        "r", "failed", RunError("step_limit", None), 6)
    assert translate("r", _event(2, "node_started"), "wf", None) is None


def test_from_wire_checks_shapes_and_keeps_unknown_keys() -> None:
    with pytest.raises(DecodeError):
        RunReceipt.from_wire({"outcome": "accepted", "receipt": {"run_id": "r", "status": "queued"}})
    with pytest.raises(DecodeError):
        RunReceipt.from_wire({"outcome": "maybe", "receipt": {"run_id": "r", "status": "queued", "revision": 1}})
    with pytest.raises(DecodeError):
        ControlReceipt.from_wire({"outcome": "accepted", "receipt": {"run_id": "r", "status": "x", "revision": True}})
    with pytest.raises(DecodeError):
        RunEvent.from_wire([1, "run_created"])
    wire = {"outcome": "adopted", "receipt": {"run_id": "r", "effect_id": "e", "action": "confirm", "revision": 4,
                                              "note": "new"}, "revision": 4}
    effect = EffectReceipt.from_wire(wire)
    assert (effect.action, effect.outcome, effect.extra) == ("confirm", "adopted", {"note": "new"})
    assert effect.to_dict() == wire
    node = {"node_id": "a", "status": "succeeded", "attempts": 1, "output": {"$content": "d", "bytes": 70000,
                                                                           "preview": "…"},
            "error": None, "attempt_id": "att", "copied_from": None}
    assert NodeView.from_wire(node).to_dict() == node  # a content marker stays as it is
