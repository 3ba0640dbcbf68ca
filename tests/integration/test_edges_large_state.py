"""Bounded content: no frame depends on the size of a run's state.

Six shell nodes print ~0.9 MB each (5.4 MB of outputs, more than one 4 MiB
frame), then the run waits at a checkpoint. After the answer a new launch
must carry that state to a worker, and `run.get` must answer within the
frame limit: values over 64 KiB travel as content references
(`{"$content": digest, "bytes": n, "preview": ...}`) that `content.read`
returns in chunks. With `max_workers` 1, a quick run started beside it must
finish too: a launch that cannot start may never hold the only worker slot.
"""

from __future__ import annotations

import json

from wf import harness
from wf.harness import Oracle, edge_flow

from piwf_actors import HostHandle
from piwf_actors.client import Client
from piwf_actors.wire.codec import MAX_FRAME_BYTES, pack

guard = harness.guard

BIG_NODES = [f"big{i}" for i in range(1, 7)]



def wait_for_status(host: HostHandle, run_id: str, statuses: tuple[str, ...], timeout: float) -> dict:
    """Like harness.wait_for_status, but a failure shows the run's status only (its outputs are megabytes)."""
    try:
        return host.wait_for_run(run_id, statuses, timeout=timeout)
    except TimeoutError as exc:
        view = host.get_run(run_id) or {}
        raise AssertionError(f"{exc}; steps {view.get('steps')}, current node {view.get('current_node')}") from None


def _read_content(client: Client, marker: dict) -> bytes:
    digest, total = marker["$content"], marker["bytes"]
    data = b""
    while len(data) < total:
        answer = client.request("content.read", {"digest": digest, "offset": len(data)})
        assert answer.outcome == "accepted", answer
        chunk = answer.receipt
        assert chunk["digest"] == digest and chunk["offset"] == len(data) and chunk["total_bytes"] == total
        assert 0 < len(chunk["data"]) <= 1024 * 1024
        data += chunk["data"]
    return data


def test_a_run_larger_than_a_frame_finishes_and_is_readable(guard, state_dir) -> None:
    oracle = Oracle(state_dir / "oracle")
    host = guard.start_host(state_dir, max_workers=1, warm_workers=1)
    run_id = host.start_run(edge_flow("large_state"), {"oracle": str(oracle.path)})["receipt"]["run_id"]
    view = wait_for_status(host, run_id, ("parked", "failed", "done"), timeout=60)
    assert (view["status"], view["park_reason"]) == ("parked", "waiting"), view

    with Client(state_dir, timeout=30) as client:
        request_id = view["park_detail"]
        answer = client.request("checkpoint.answer", {"request_id": request_id, "input": {"go": True}})
        assert answer.outcome == "accepted", answer
        quick = host.start_run(edge_flow("quick"))["receipt"]["run_id"]
        assert wait_for_status(host, run_id, ("done", "failed", "parked"), timeout=60)["status"] == "done"
        assert wait_for_status(host, quick, ("done", "failed", "parked"), timeout=30)["status"] == "done"
        # The worker saw every output in full.
        sizes = host.get_run(run_id)["output"]
        assert sizes == {node: 900_000 for node in BIG_NODES}, str(sizes)[:500]

        answer = client.request("run.get", run_id=run_id)
        assert answer.outcome == "accepted", answer
        run = answer.receipt
        assert len(pack(run)) < MAX_FRAME_BYTES
        outputs = {node["node_id"]: node["output"] for node in run["nodes"]}
        for i, node in enumerate(BIG_NODES, 1):
            marker = outputs[node]
            assert set(marker) == {"$content", "bytes", "preview"}, str(marker)[:300]
            assert marker["bytes"] > 64 * 1024 and marker["preview"].startswith("{")
            assert len(marker["preview"]) <= 1000
            value = json.loads(_read_content(client, marker))
            assert value["stdout"] == str(i) * 900_000 and value["exit_code"] == 0
        # Small values stay inline.
        assert outputs["gate"] == {"go": True}

        missing = client.request("content.read", {"digest": "0" * 64})
        assert missing.outcome == "notFound", missing


def test_a_launch_that_cannot_start_is_settled_and_frees_its_slot(guard, state_dir, monkeypatch) -> None:
    """Whatever makes a runner supervisor fail to start a launch, the run does not stay `starting`:
    it parks `no_progress` with the reason, and the only worker slot serves the next run."""
    from piwf_actors.actors.runner_supervisor import RunnerSupervisor

    real = RunnerSupervisor._launch_frame
    failures = []

    def broken(self, serving):
        if not failures:
            failures.append(serving.launch.run_id)
            raise RuntimeError("launch envelope broken on purpose")
        return real(self, serving)

    monkeypatch.setattr(RunnerSupervisor, "_launch_frame", broken)
    host = guard.start_host(state_dir, max_workers=1, warm_workers=1)
    first = host.start_run(edge_flow("quick"))["receipt"]["run_id"]
    view = wait_for_status(host, first, ("parked", "done", "failed"), timeout=30)
    assert (view["status"], view["park_reason"]) == ("parked", "no_progress")
    assert "launch envelope broken on purpose" in view["park_detail"]
    second = host.start_run(edge_flow("quick"))["receipt"]["run_id"]
    assert wait_for_status(host, second, ("parked", "done", "failed"), timeout=30)["status"] == "done"
    host.resume_run(first)
    assert wait_for_status(host, first, ("parked", "done", "failed"), timeout=30)["status"] == "done"
