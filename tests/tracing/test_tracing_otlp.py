"""A real `piwf-host` process with the OTEL_* variables exports a run's spans over OTLP/HTTP to a receiver
the test runs on 127.0.0.1 (no traffic leaves loopback), which decodes the protobuf requests."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import host_database, wait_for

from piwf_actors.tracing import ids

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

REPO = Path(__file__).resolve().parents[2]

FLOW = '''
from piwf_actors.workflows import compute, define_workflow, edge, shell

exported = define_workflow(name="exported", start_at="hello", nodes={
    "hello": compute(run=lambda ctx: {"hello": "world"}),
    "echo": shell(command='printf %s "$TRACEPARENT"', shell=True),
}, edges=[edge("hello", "echo")])
'''


class Receiver(http.server.ThreadingHTTPServer):
    """Accepts POST /v1/traces (OTLP/HTTP, protobuf) and keeps every span with its resource's attributes."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            for resource_spans in request.resource_spans:
                resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.server.spans.append({
                            "name": span.name, "trace_id": int.from_bytes(span.trace_id, "big"),
                            "span_id": int.from_bytes(span.span_id, "big"),
                            "parent_span_id": int.from_bytes(span.parent_span_id, "big") or None,
                            "attributes": {kv.key: kv.value for kv in span.attributes},
                            "resource": resource, "scope": scope_spans.scope.name})
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_piwf_host_exports_a_runs_spans_over_otlp_http_to_the_endpoint_of_the_otel_variables(
        state_dir: Path, tmp_path: Path, receiver: Receiver) -> None:
    project = tmp_path / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "flow.py").write_text(FLOW)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "TRACE"))}
    env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.server_address[1]}",
               OTEL_SERVICE_NAME="piwf-under-test", OTEL_BSP_SCHEDULE_DELAY="100")
    database = host_database(state_dir)
    log_path = tmp_path / "host.log"
    with open(log_path, "wb") as log:
        host = subprocess.Popen([str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", "1",
                                 *(["--database", database] if database else [])],
                                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for(lambda: "host started" in log_path.read_text() or host.poll() is not None, 60,
                 lambda: f"the host to start:\n{log_path.read_text()}")
        assert host.poll() is None, log_path.read_text()
        started = subprocess.run([str(REPO / "bin" / "piwf"), "--state-dir", str(state_dir), "start", "exported",
                                  "--project", str(project), "--wait", "--json"],
                                 env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, (started.stdout, started.stderr, log_path.read_text())
        view = json.loads(started.stdout)  # the final run view
        assert view["status"] == "done", view
        run_id = view["run_id"]
        trace_id = ids.trace_id(run_id)

        def run_spans() -> list[dict[str, Any]]:
            with receiver.lock:
                return [span for span in receiver.spans if span["trace_id"] == trace_id]

        wait_for(lambda: any(span["name"] == "run exported" for span in run_spans()), 30,
                 lambda: f"the run's span at the receiver; got {receiver.spans}\n{log_path.read_text()}")
        spans = {span["name"]: span for span in run_spans()}
        assert set(spans) == {"run exported", "node hello", "node echo"}, spans
        assert set(receiver.paths) == {"/v1/traces"}
        run_span = spans["run exported"]
        assert run_span["span_id"] == ids.run_span_id(run_id) and run_span["parent_span_id"] is None
        assert run_span["resource"]["service.name"] == "piwf-under-test"
        assert run_span["scope"] == "piwf_actors"
        assert run_span["attributes"]["piwf.run.status"].string_value == "done"
        for name in ("node hello", "node echo"):
            assert spans[name]["parent_span_id"] == run_span["span_id"], name
        assert spans["node echo"]["attributes"]["piwf.node.kind"].string_value == "effect"
        nodes = {node["node_id"]: node for node in view["nodes"]}
        assert ids.parse_traceparent(nodes["echo"]["output"]["stdout"])[:2] == (trace_id, spans["node echo"]["span_id"])
    finally:
        if host.poll() is None:
            os.killpg(host.pid, signal.SIGTERM)
        try:
            code = host.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(host.pid, signal.SIGKILL)
            host.wait(timeout=10)
            raise
    assert code == 0, log_path.read_text()
