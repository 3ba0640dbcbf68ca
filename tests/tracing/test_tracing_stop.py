"""A host stops in bounded time when its tracer provider's exporter hangs (a collector that never
answers): the SDK's BatchSpanProcessor ignores force_flush's timeout and waits out an export in flight."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from piwf_actors import HostHandle
from piwf_actors.tracing import ids

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

FLOWS = '''
from piwf_actors.workflows import compute, define_workflow


def _boom(ctx):
    raise KeyError("missing")


broken = define_workflow(name="broken", start_at="bad", nodes={"bad": compute(run=_boom)}, edges=[])
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    workflows = tmp_path / "project" / ".piwf" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "flows.py").write_text(FLOWS)
    return tmp_path / "project"


class _StuckExporter(SpanExporter):
    """An exporter whose collector never answers: `export` returns only when the test lets it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        self.entered.set()
        self.release.wait(120)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _returns(call: Callable[[], Any]) -> bool:
    """Whether `call` returns well within the SDK's ~30 s (on a thread joined for 20 s)."""
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(20)
    return not worker.is_alive()


@pytest.fixture
def stuck() -> Iterator[tuple[TracerProvider, _StuckExporter]]:
    exporter = _StuckExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=10))
    yield provider, exporter
    exporter.release.set()


def test_a_host_whose_collector_never_answers_still_stops(
        hosts: Callable[..., HostHandle], state_dir: Path, project: Path,
        stuck: tuple[TracerProvider, _StuckExporter], caplog: pytest.LogCaptureFixture) -> None:
    provider, exporter = stuck
    host = hosts(state_dir, tracer_provider=provider)
    run_id = host.start_run("broken", project_path=str(project)).run_id
    assert host.wait_for_run(run_id, timeout=60).status == "failed"
    assert exporter.entered.wait(30)  # its spans are with the exporter, which hangs
    with caplog.at_level(logging.WARNING, logger="piwf_actors.tracing.otel"):
        assert _returns(lambda: host.stop("the collector is gone"))
    assert "did not finish exporting within 5000 ms" in caplog.text


def test_the_hosts_own_provider_is_shut_down_in_bounded_time(stuck: tuple[TracerProvider, _StuckExporter]) -> None:
    from piwf_actors.tracing.otel import SpanEmitter
    from piwf_actors.tracing.spans import SpanRecord

    provider, exporter = stuck
    emitter = SpanEmitter(provider, owned=True)
    emitter.emit([SpanRecord("run wf", ids.trace_id("run_s"), ids.run_span_id("run_s"), None, 1.0, 2.0, {})])
    assert exporter.entered.wait(30)
    assert _returns(emitter.close)
