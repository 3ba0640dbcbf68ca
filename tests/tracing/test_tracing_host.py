"""Traces of runs on a real embedded host, real workers and a real SQLite file, exported through the
application's own TracerProvider into the SDK's InMemorySpanExporter (docs/tracing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import wait_for

from piwf_actors import HostHandle
from piwf_actors.tracing import ids

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

FLOWS = '''
import time

from piwf_actors.workflows import (
    action, choice, compute, define_workflow, edge, human_decision, run_workflow, shell, sleep, wait_message,
)


def _boom(ctx):
    raise KeyError("missing")


child = define_workflow(name="child", start_at="c", nodes={"c": compute(run=lambda ctx: {"child": True})},
                        edges=[])

traced = define_workflow(name="traced", start_at="first", nodes={
    "first": compute(run=lambda ctx: {"traceparent": ctx.traceparent}),
    "echo": shell(command='printf %s "$TRACEPARENT"', shell=True),
    "act": action(run=lambda ctx: ctx.send_message(ctx.run_id, "go", {"acted": True})),
    "listen": wait_message("go"),
    "nap": sleep(seconds=0.3),
    "kid": run_workflow(child),
    "ask": human_decision(audience="operator", choices={"go": choice(label="Go")},
                          request=lambda ctx: {"title": "Go on?"}),
}, edges=[edge("first", "echo"), edge("echo", "act"), edge("act", "listen"), edge("listen", "nap"), edge("nap", "kid"),
          edge("kid", "ask")])

broken = define_workflow(name="broken", start_at="bad", nodes={"bad": compute(run=_boom)}, edges=[])

cut_off = define_workflow(name="cut_off", start_at="slow", nodes={
    "slow": action(run=lambda ctx: time.sleep(30), timeout_s=0.5),
}, edges=[])
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


def _spans(exporter: InMemorySpanExporter, trace_of: str) -> list[ReadableSpan]:
    trace_id = ids.trace_id(trace_of)
    return [span for span in exporter.get_finished_spans() if span.context.trace_id == trace_id]


def _one(spans: list[ReadableSpan], name: str, **attributes: Any) -> ReadableSpan:
    found = [span for span in spans if span.name == name
             and all(span.attributes.get(key) == value for key, value in attributes.items())]
    assert len(found) == 1, (name, attributes, [(s.name, dict(s.attributes)) for s in spans])
    return found[0]


def _run_span(exporter: InMemorySpanExporter, run_id: str, workflow: str) -> ReadableSpan:
    return wait_for(lambda: next((s for s in _spans(exporter, run_id) if s.name == f"run {workflow}"), None),
                    30, f"the span of run {run_id}")


def test_a_run_is_a_trace_of_node_attempts_and_waits_with_the_workers_trace_context(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = exported
    host = hosts(state_dir, tracer_provider=provider)
    run_id = host.start_run("traced", project_path=str(project)).run_id
    request = wait_for(lambda: next(iter(host.pending_interactions()), None), 60, "the decision")
    # Waiting for the answer: the decision's wait and its node are still open, the sleep has ended.
    wait_for(lambda: any(s.name == "sleep" for s in _spans(exporter, run_id)), 30, "the sleep span")
    assert not [s for s in _spans(exporter, run_id) if s.name in ("wait decision", "node ask", "run traced")]
    host.answer_decision(request.request_id, "go")
    view = host.wait_for_run(run_id, timeout=60)
    assert view.status == "done", view
    run_span = _run_span(exporter, run_id, "traced")
    spans = _spans(exporter, run_id)

    assert run_span.parent is None and run_span.context.span_id == ids.run_span_id(run_id)
    assert run_span.attributes["piwf.run.id"] == run_id
    assert run_span.attributes["piwf.run.status"] == "done"
    assert {"run_started"} <= {event.name for event in run_span.events}
    assert "run_parked" in {event.name for event in run_span.events}
    nodes = {span.attributes["piwf.node.id"]: span for span in spans if span.name.startswith("node ")}
    assert set(nodes) == {"first", "echo", "act", "listen", "nap", "kid", "ask"}
    for node_id, span in nodes.items():
        assert span.parent is not None and span.parent.span_id == run_span.context.span_id, node_id
        assert span.attributes["piwf.node.outcome"] == "ok", node_id
        assert span.attributes["piwf.node.attempt"] == 1, node_id
        assert run_span.start_time <= span.start_time <= span.end_time <= run_span.end_time, node_id
    kinds = {node_id: span.attributes["piwf.node.kind"] for node_id, span in nodes.items()}
    assert kinds == {"first": "compute", "echo": "effect", "act": "effect", "listen": "message", "nap": "sleep",
                     "kid": "children", "ask": "decision"}
    effects = {effect["node_id"]: effect["effect_id"] for effect in host.get_run(run_id).to_dict()["effects"]}
    assert nodes["act"].attributes["piwf.effect.id"] == effects["act"]
    assert nodes["echo"].attributes["piwf.effect.id"] == effects["echo"]

    # The shell command's TRACEPARENT and a compute callback's ctx.traceparent name their node's span.
    outputs = {node.node_id: node.output for node in view.nodes}
    for node_id, traceparent in (("echo", outputs["echo"]["stdout"]), ("first", outputs["first"]["traceparent"])):
        trace_id, span_id, flags = ids.parse_traceparent(traceparent)
        assert (trace_id, span_id) == (nodes[node_id].context.trace_id, nodes[node_id].context.span_id), node_id
        assert flags == "01"

    # Waits are spans under their node: the decision's ends with the answer, the sleep with its wake-up.
    decision = _one(spans, "wait decision")
    assert decision.parent is not None and decision.parent.span_id == nodes["ask"].context.span_id
    assert decision.attributes["piwf.request.id"] == request.request_id
    assert decision.attributes["piwf.wait.outcome"] == "answered"
    answered_at = next(e.created_at for e in host.run_events(run_id) if e.kind == "interaction_settled")
    assert decision.end_time == int(answered_at * 1_000_000_000)
    nap = _one(spans, "sleep")
    assert nap.parent is not None and nap.parent.span_id == nodes["nap"].context.span_id
    assert nap.end_time - nap.start_time >= 300_000_000  # it slept 0.3 s at least
    message = _one(spans, "wait message")
    assert message.parent is not None and message.parent.span_id == nodes["listen"].context.span_id
    assert message.attributes["piwf.message.topic"] == "go"
    children = _one(spans, "wait children")
    assert children.parent is not None and children.parent.span_id == nodes["kid"].context.span_id

    # The child run is a trace of its own, linked to the parent's wait for it.
    child_id = next(summary.run_id for summary in host.list_runs() if summary.run_id != run_id)
    child_span = _run_span(exporter, child_id, "child")
    assert child_span.attributes["piwf.run.parent_id"] == run_id
    assert [(link.context.trace_id, link.context.span_id) for link in child_span.links] == [
        (run_span.context.trace_id, children.context.span_id)]
    assert _one(_spans(exporter, child_id), "node c").parent.span_id == child_span.context.span_id


def test_a_failed_node_and_its_run_carry_the_error(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = exported
    host = hosts(state_dir, tracer_provider=provider)
    run_id = host.start_run("broken", project_path=str(project)).run_id
    assert host.wait_for_run(run_id, timeout=60).status == "failed"
    run_span = _run_span(exporter, run_id, "broken")
    assert run_span.status.status_code is StatusCode.ERROR
    assert run_span.attributes["error.type"] == "node_failed"
    assert "KeyError" in (run_span.status.description or "")
    node = _one(_spans(exporter, run_id), "node bad")
    assert node.status.status_code is StatusCode.ERROR
    assert node.attributes["piwf.node.outcome"] == "failed"
    assert node.attributes["error.type"] == "node_error"
    assert "KeyError: 'missing'" in node.attributes["piwf.error.message"]
    assert "KeyError: 'missing'" in (node.status.description or "")


def test_an_effect_cut_off_by_its_timeout_is_an_interrupted_attempt_with_its_effect(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = exported
    host = hosts(state_dir, tracer_provider=provider)
    run_id = host.start_run("cut_off", project_path=str(project)).run_id
    parked = host.wait_for_run(run_id, statuses=("parked", "done", "failed"), timeout=60)
    assert (parked.status, parked.park_reason) == ("parked", "ambiguous_effect"), parked
    node = wait_for(lambda: next((s for s in _spans(exporter, run_id) if s.name == "node slow"), None), 30,
                    "the interrupted attempt's span")
    assert node.attributes["piwf.node.outcome"] == "interrupted"
    assert node.attributes["error.type"] == "timeout"
    assert node.attributes["piwf.effect.id"] == parked.park_detail
    assert node.status.status_code is StatusCode.ERROR
    assert "timed out" in (node.status.description or "")
    assert "effect_ambiguous" not in {e.name for s in _spans(exporter, run_id) for e in s.events}  # run still open
    host.cancel_run(run_id)
    run_span = _run_span(exporter, run_id, "cut_off")
    assert run_span.attributes["piwf.run.status"] == "cancelled" and run_span.status.status_code is StatusCode.UNSET
    assert "effect_ambiguous" in {event.name for event in run_span.events}


def test_without_a_tracer_provider_nodes_get_no_trace_context(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEPARENT", raising=False)  # (workers inherit the test's environment)
    host = hosts(state_dir)
    run_id = host.start_run("traced", project_path=str(project)).run_id
    request = wait_for(lambda: next(iter(host.pending_interactions()), None), 60, "the decision")
    host.answer_decision(request.request_id, "go")
    outputs = {node.node_id: node.output for node in host.wait_for_run(run_id, timeout=60).nodes}
    assert outputs["first"] == {"traceparent": None}
    assert outputs["echo"]["stdout"] == ""


def test_a_run_resumed_by_the_next_host_continues_its_trace_and_no_span_is_emitted_twice(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = exported
    first = hosts(state_dir, tracer_provider=provider)
    run_id = first.start_run("traced", project_path=str(project)).run_id
    request = wait_for(lambda: next(iter(first.pending_interactions()), None), 60, "the decision")
    wait_for(lambda: any(s.name == "node kid" for s in _spans(exporter, run_id)), 30, "the spans before the decision")
    first.stop("the first host goes away")
    emitted_first = {span.context.span_id for span in _spans(exporter, run_id)}

    second_provider = TracerProvider()
    second_exporter = InMemorySpanExporter()
    second_provider.add_span_processor(SimpleSpanProcessor(second_exporter))
    try:
        second = hosts(state_dir, tracer_provider=second_provider)
        second.answer_decision(request.request_id, "go")
        assert second.wait_for_run(run_id, timeout=60).status == "done"
        run_span = _run_span(second_exporter, run_id, "traced")
        spans = _spans(second_exporter, run_id)
        # Only what ended under the second host, in the same trace, with the times of the first host's facts.
        assert sorted(span.name for span in spans) == ["node ask", "run traced", "wait decision"]
        assert not emitted_first & {span.context.span_id for span in spans}
        events = {event.kind: event.created_at for event in reversed(second.run_events(run_id))}  # the first of each
        assert run_span.start_time == int(events["run_created"] * 1_000_000_000)
        assert _one(spans, "wait decision").start_time == int(events["interaction_requested"] * 1_000_000_000)
    finally:
        second_provider.shutdown()


def test_a_standby_that_takes_over_emits_only_the_spans_that_end_after_it_became_active(
        state_dir: Path, other_state_dir: Path, project: Path,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    """The standby's tracer starts when it becomes active, not when its process started: the run it
    inherits is read from its first event, and what ended before the takeover was the old host's to emit."""
    from piwf_actors import HostConfig, start_host

    provider, exporter = exported
    standby_provider = TracerProvider()
    standby_exporter = InMemorySpanExporter()
    standby_provider.add_span_processor(SimpleSpanProcessor(standby_exporter))
    shared = f"sqlite://{other_state_dir}/shared.db"
    started: list[HostHandle] = []
    try:
        for name, traced_by in (("a", provider), ("b", standby_provider)):
            started.append(start_host(HostConfig(state_dir=state_dir / name, database=shared, host_id=f"host-{name}",
                                                 lease_s=300.0, reap_grace_s=0.5, tracer_provider=traced_by)))
        active, standby = started
        assert (active.role, standby.role) == ("active", "standby")
        run_id = active.start_run("traced", project_path=str(project)).run_id
        request = wait_for(lambda: next(iter(active.pending_interactions()), None), 60, "the decision")
        wait_for(lambda: any(s.name == "node kid" for s in _spans(exporter, run_id)), 30, "the first host's spans")
        active.stop("the active host goes away")  # a clean stop releases the lease: the standby takes it
        assert standby.wait_active(timeout=60)
        standby.answer_decision(request.request_id, "go")
        assert standby.wait_for_run(run_id, timeout=60).status == "done"
        _run_span(standby_exporter, run_id, "traced")
        assert sorted(span.name for span in _spans(standby_exporter, run_id)) == [
            "node ask", "run traced", "wait decision"]
    finally:
        for host in reversed(started):
            host.stop("test teardown")
        standby_provider.shutdown()


def test_an_event_the_tracer_cannot_read_ends_that_runs_trace_and_the_others_are_traced_on(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, caplog: pytest.LogCaptureFixture,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    import logging
    import sqlite3

    provider, exporter = exported
    host = hosts(state_dir, tracer_provider=provider)
    if not isinstance(host.paths.database, Path):
        pytest.skip("the odd event is written into the SQLite file")
    odd = host.start_run("traced", project_path=str(project)).run_id
    request = wait_for(lambda: next(iter(host.pending_interactions()), None), 60, "the decision")
    # An event no writer would commit: a time that is not a number (SQLite keeps the text in a REAL column).
    with sqlite3.connect(host.paths.database, timeout=30) as conn:
        conn.execute("INSERT INTO run_event (run_id, seq, kind, created_at) SELECT ?, max(seq) + 1, 'run_parked', "
                     "'not a time' FROM run_event WHERE run_id = ?", (odd, odd))
    conn.close()
    with caplog.at_level(logging.ERROR, logger="piwf_actors.actors.tracing"):
        host.answer_decision(request.request_id, "go")  # a commit naming the run: the tracer reads the odd event
        assert host.wait_for_run(odd, timeout=60).status == "done"
        other = host.start_run("broken", project_path=str(project)).run_id
        assert host.wait_for_run(other, timeout=60).status == "failed"
        assert _run_span(exporter, other, "broken").attributes["piwf.run.status"] == "failed"
    failures = [record.getMessage() for record in caplog.records if odd in record.getMessage()]
    assert failures == [f"tracing: run {odd} is not traced any more: reading its events failed"]
    assert not [s for s in _spans(exporter, odd) if s.name == "run traced"]


def test_a_host_that_does_not_trace_never_imports_opentelemetry(state_dir: Path, project: Path) -> None:
    script = f'''
import sys
from piwf_actors import HostConfig, start_host
from piwf_actors.cli.host import build_parser
build_parser()
host = start_host(HostConfig(state_dir={str(state_dir)!r}))
try:
    run_id = host.start_run("broken", project_path={str(project)!r}).run_id
    assert host.wait_for_run(run_id, timeout=60).status == "failed"
finally:
    host.stop()
print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
'''
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_global_provider_is_used_when_asked_for_and_a_bad_setting_is_refused_at_start(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path, monkeypatch: pytest.MonkeyPatch,
        exported: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    from opentelemetry import trace

    from piwf_actors.errors import HostError

    with pytest.raises(HostError, match="tracer_provider must be a TracerProvider, 'global' or 'env'"):
        hosts(state_dir, tracer_provider="everywhere")
    provider, exporter = exported
    # What opentelemetry.trace.set_tracer_provider would have made global (it can be set once per process).
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    host = hosts(state_dir, tracer_provider="global")  # the refused start left nothing behind
    run_id = host.start_run("broken", project_path=str(project)).run_id
    assert host.wait_for_run(run_id, timeout=60).status == "failed"
    assert _run_span(exporter, run_id, "broken").attributes["piwf.run.status"] == "failed"
