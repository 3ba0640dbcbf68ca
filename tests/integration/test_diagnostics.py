"""Diagnostics: a failing node says where it failed, the host says how each run ended, and logs can be JSON.

- A node that raises keeps the traceback of the user's frames (file and
  line of the workflow) with its failed attempt; `run.get` shows it on the
  node's error and on the run's error.
- The host logs one line per finished run (failures at WARNING with the
  error code and message); workers log at the host's level; `piwf-host
  --log-format json` writes one JSON object per line.
- A running shell node's output is followed live by a `run` watch as
  `node_output` events.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import textwrap
from pathlib import Path

from testsupport import wait_for
from wf import harness

from piwf_actors.client import Client

guard = harness.guard
REPO = Path(__file__).resolve().parents[2]

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge, shell

    def lookup(ctx):
        table = {"present": 1}
        return table[ctx.input["key"]]  # line 6: the KeyError

    def prepare(ctx):
        return {"value": lookup(ctx)}

    broken = define_workflow(name="broken", start_at="prepare", nodes={"prepare": compute(run=prepare)}, edges=[])
    fine = define_workflow(name="fine", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": True})}, edges=[])
    chatty = define_workflow(name="chatty", start_at="talk", nodes={"talk": shell(
        command="for i in 1 2 3; do echo out $i; echo err $i >&2; sleep 0.4; done; exit 3", shell=True)}, edges=[])
''')


def _flows(tmp_path: Path) -> Path:
    path = tmp_path / "diag_flows.py"
    path.write_text(FLOWS)
    return path


def test_a_failed_node_keeps_the_traceback_of_the_users_frames(guard, state_dir, tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="piwf_actors.runs")
    flows = _flows(tmp_path)
    host = guard.start_host(state_dir)
    run_id = host.start_run(f"{flows}:broken", {"key": "missing"})["receipt"]["run_id"]
    view = host.wait_for_run(run_id, timeout=30)
    assert view["status"] == "failed"
    trace = view["error"]["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert f'File "{flows}", line 6, in lookup' in trace and f'File "{flows}", line 9, in prepare' in trace
    assert trace.rstrip().endswith("KeyError: 'missing'")
    assert "piwf_actors" not in trace  # the engine's frames are left out
    [node] = view["nodes"]
    assert node["error"]["traceback"] == trace
    # One line for the finished run, at WARNING with the code and the message.
    # The line is logged after the commit the view read, so it may come a moment later.
    wait_for(lambda: [r for r in caplog.records if r.name == "piwf_actors.runs" and run_id in r.getMessage()], 5,
             "the failed line")
    [line] = [r for r in caplog.records if r.name == "piwf_actors.runs" and run_id in r.getMessage()]
    assert line.levelno == logging.WARNING
    assert f"run {run_id} failed (workflow broken): node_failed" in line.getMessage()
    assert "KeyError" in line.getMessage()
    fine = host.start_run(f"{flows}:fine")["receipt"]["run_id"]
    host.wait_for_run(fine, timeout=30)
    wait_for(lambda: [r for r in caplog.records if fine in r.getMessage()], 5, "the done line")
    [done] = [r for r in caplog.records if fine in r.getMessage()]
    assert done.levelno == logging.INFO and done.getMessage() == f"run {fine} done (workflow fine)"


def test_piwf_host_writes_json_logs_and_its_workers_log_at_its_level(state_dir, tmp_path) -> None:
    flows = _flows(tmp_path)
    log_path = tmp_path / "host.log"
    with open(log_path, "wb") as log_file:
        host = subprocess.Popen([str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--log-level", "INFO",
                                 "--log-format", "json", "--max-workers", "1"], stdout=log_file, stderr=log_file,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: (state_dir / "host.sock").exists() and "host started" in log_path.read_text(), 30,
                 lambda: f"the host to start: {log_path.read_text()}")
        with Client(state_dir) as client:
            run_id = client.start(f"{flows}:broken", {"key": "missing"})["run_id"]
            client.wait(run_id, timeout=30)
        records = wait_for(lambda: _records_with(log_path, run_id, "piwf_actors.runs"), 10, "the run's line")
    finally:
        host.send_signal(signal.SIGTERM)
        assert host.wait(30) == 0
    lines = log_path.read_text().splitlines()
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "message", "pid"} <= set(entry) for entry in parsed)
    [finished] = records
    assert finished["level"] == "WARNING" and finished["run_id"] == run_id and finished["error_code"] == "node_failed"
    # The worker logged the node's traceback at the host's level (INFO), as JSON too.
    assert any(entry.get("role") == "worker" and "KeyError" in entry["message"] for entry in parsed), lines[-20:]


def _records_with(path: Path, run_id: str, logger: str) -> list[dict]:
    found = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("logger") == logger and entry.get("run_id") == run_id:
            found.append(entry)
    return found


def test_a_running_shell_nodes_output_is_followed_live(guard, state_dir, tmp_path) -> None:
    flows = _flows(tmp_path)
    guard.start_host(state_dir)
    with Client(state_dir) as client:
        run_id = client.start(f"{flows}:chatty")["run_id"]
        seen: list[tuple[str, str]] = []
        status_when_first_seen = None
        for event in client.watch("run", run_id=run_id, timeout=20):
            if event["topic"] == "node_output":
                payload = event["payload"]
                assert payload["run_id"] == run_id and payload["node_id"] == "talk"
                seen.append((payload["stream"], payload["data"]))
                if status_when_first_seen is None:
                    status_when_first_seen = client.get(run_id)["status"]
            elif (event["payload"] or {}).get("status") in ("done", "failed"):
                break
    stdout = "".join(data for stream, data in seen if stream == "stdout")
    stderr = "".join(data for stream, data in seen if stream == "stderr")
    assert stdout == "out 1\nout 2\nout 3\n" and stderr == "err 1\nerr 2\nerr 3\n"
    assert status_when_first_seen == "running"  # the first lines arrived while the node still ran
