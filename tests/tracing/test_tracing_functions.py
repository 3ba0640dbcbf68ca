"""Traces of a durable function run (piwf_actors.durable) on a real embedded host: each durable call
is a node span named by its step id under the run span, and its waits are spans under their node,
exactly as for a graph run (tests/tracing/test_tracing_host.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from testsupport import wait_for

from piwf_actors import HostHandle
from piwf_actors.tracing import ids

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

pytestmark = pytest.mark.timeout(120, method="thread")

FLOWS = '''
from piwf_actors.durable import StepFailed, decide, send_message, sleep, step, wait_message, workflow, current_run


@step
def square(value: int) -> int:
    return value * value


@step
def broken() -> int:
    raise ValueError("broken step")


@step(effect=True)
def publish(total: int) -> dict:
    return {"published": total}


@workflow(name="traced_fn")
def traced_fn(count: int = 2) -> dict:
    total = sum(square(value) for value in range(count))
    try:
        broken()
    except StepFailed:
        pass
    receipt = publish(total)
    send_message(current_run().run_id, "go", {"acted": True})
    got = wait_message("go")
    sleep(0.3)
    answer = decide("approve", title="Go on?", choices={"go": "Go"})
    return {"total": total, "receipt": receipt, "got": got, "answer": answer.choice}
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    workflows = tmp_path / "project" / ".piwf" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "flows.py").write_text(FLOWS)
    return tmp_path / "project"


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _spans(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    trace_id = ids.trace_id(run_id)
    return [span for span in exporter.get_finished_spans() if span.context.trace_id == trace_id]


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_a_function_run_is_a_trace_with_a_span_per_step_named_by_its_id_waits_included(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = exported
    host = hosts(state_dir, tracer_provider=provider)
    run_id = host.start_run("traced_fn", {"count": 3}, project_path=str(project)).run_id
    request = wait_for(lambda: next(iter(host.pending_interactions()), None), 60, "the decision")
    assert request.node_id == "approve"
    # Parked at the decision: the steps before it and the sleep have ended, the decision is open.
    wait_for(lambda: any(s.name == "sleep" for s in _spans(exporter, run_id)), 30, "the sleep span")
    assert not [s for s in _spans(exporter, run_id) if s.name in ("wait decision", "node approve", "run traced_fn")]
    host.answer_decision(request.request_id, "go")
    view = host.wait_for_run(run_id, timeout=60)
    assert view.status == "done" and view.output == {
        "total": 5, "receipt": {"published": 5}, "got": {"acted": True}, "answer": "go"}, view
    run_span = wait_for(lambda: next((s for s in _spans(exporter, run_id) if s.name == "run traced_fn"), None),
                        30, "the run span")
    spans = _spans(exporter, run_id)
    assert run_span.parent is None and run_span.attributes["piwf.run.status"] == "done"

    nodes = {span.attributes["piwf.node.id"]: span for span in spans if span.name.startswith("node ")}
    assert list(nodes) == list(dict.fromkeys(node.node_id for node in view.nodes))  # the run's nodes, in order
    assert set(nodes) == {"square", "square#2", "square#3", "broken", "publish", "wait_message", "sleep",
                          "approve", "return"}
    for node_id, span in nodes.items():
        assert span.name == f"node {node_id}"
        assert span.parent is not None and span.parent.span_id == run_span.context.span_id, node_id
        assert run_span.start_time <= span.start_time <= span.end_time <= run_span.end_time, node_id
    kinds = {node_id: span.attributes["piwf.node.kind"] for node_id, span in nodes.items()}
    assert kinds == {"square": "compute", "square#2": "compute", "square#3": "compute", "broken": "compute",
                     "publish": "effect", "wait_message": "message", "sleep": "sleep", "approve": "decision",
                     "return": "compute"}
    outcomes = {node_id: span.attributes["piwf.node.outcome"] for node_id, span in nodes.items()}
    assert outcomes == {**{node_id: "ok" for node_id in nodes}, "broken": "failed"}
    assert nodes["broken"].status.status_code is StatusCode.ERROR
    assert "ValueError: broken step" in nodes["broken"].attributes["piwf.error.message"]
    effects = {effect["node_id"]: effect["effect_id"] for effect in host.get_run(run_id).to_dict()["effects"]}
    assert nodes["publish"].attributes["piwf.effect.id"] == effects["publish"]

    # Waits are spans under their step's node span.
    for wait_name, node_id in (("wait message", "wait_message"), ("sleep", "sleep"), ("wait decision", "approve")):
        wait = _one(spans, wait_name)
        assert wait.parent is not None and wait.parent.span_id == nodes[node_id].context.span_id, wait_name
    assert _one(spans, "wait decision").attributes["piwf.request.id"] == request.request_id
    assert _one(spans, "wait message").attributes["piwf.message.topic"] == "go"
    nap = _one(spans, "sleep")
    assert nap.end_time - nap.start_time >= 300_000_000  # it slept 0.3 s at least
