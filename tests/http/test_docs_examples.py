"""docs/http.md's curl examples, run as the page shows them against a real host (its port put in place
of 8080), and the SSE stream of one run, which ends once the run finished."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from http_support import Door, flow, sse

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "http.md").read_text()


def _examples() -> str:
    part = DOC[DOC.index("## Examples"):]
    return part.split("```sh\n", 1)[1].split("```", 1)[0]


@pytest.mark.skipif(not (shutil.which("curl") and shutil.which("jq")), reason="curl and jq run the examples")
def test_the_curl_examples_run_against_a_real_host(door: Door) -> None:
    script = _examples().replace("http://127.0.0.1:8080", door.base)
    assert script.count(door.base) >= 6
    done = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TOKEN": door.tokens["ops"]})
    assert done.returncode == 0, done.stderr
    # role; the new run's status in the list (it may not have reached its decision yet); the answer's
    # outcome; the stream's end; the output.
    assert re.fullmatch(r'"active"\n"(queued|starting|running|parked)"\n"accepted"\n"status":"done"\n'
                        r'\{\n  "shipped": "1\.2\.0"\n\}\n', done.stdout), done.stdout


def test_a_runs_stream_shows_it_finish_and_ends(door: Door) -> None:
    run_id = door.operator.post("/api/v1/runs", json={"workflow": flow("three"), "input": {"sleep": 0.05}}
                                ).json()["receipt"]["run_id"]
    with sse(door.viewer, f"/api/v1/streams/runs/{run_id}") as events:
        seen = [data["status"] for name, data in events if name == "run"]
    assert seen[-1] == "done"  # the stream ended by itself after the event that shows the run finished
    assert len(seen) >= 1


def test_the_runs_and_inbox_streams_show_changes(door: Door) -> None:
    with sse(door.viewer, "/api/v1/streams/interactions") as inbox:
        first_name, first = next(inbox)
        assert first_name == "interactions" and first["requests"] == []
        run_id = door.operator.post("/api/v1/runs", json={"workflow": flow("asks")}).json()["receipt"]["run_id"]
        for _name, view in inbox:
            if any(r["run_id"] == run_id for r in view["requests"]):
                break
    with sse(door.viewer, "/api/v1/streams/runs") as runs:
        name, view = next(runs)
        assert name == "runs" and run_id in [r["run_id"] for r in view["runs"]]
    refused = door.viewer.get("/api/v1/streams/runs/run_nope")
    assert refused.status_code == 404 and refused.json()["outcome"] == "notFound"
