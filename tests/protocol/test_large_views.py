"""A watched view too large for one frame is announced as truncated, never dropped."""

from __future__ import annotations

import textwrap

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client
from piwf_actors.protocol.socket_loop import Limits

BIG = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow
    big = define_workflow(name="big", start_at="a", nodes={"a": compute(run=lambda ctx: {"blob": "x" * 200_000})},
                          edges=[])
''')


def test_view_larger_than_a_frame_arrives_as_a_truncated_event(state_dir, tmp_path):
    (tmp_path / "big.py").write_text(BIG)
    limits = Limits(max_frame_bytes=64 * 1024)
    with start_host(HostConfig(state_dir=state_dir, max_workers=1, limits=limits)) as host:
        run_id = host.start_run(f"{tmp_path / 'big.py'}:big")["receipt"]["run_id"]
        assert host.wait_for_run(run_id, timeout=30)["status"] == "done"
        with Client(state_dir) as client:
            event = next(client.watch("run", run_id=run_id, timeout=10))
        assert event["topic"] == "run" and event["revision"] == 1
        assert event["payload"]["truncated"] is True
        assert "could not be sent" in event["payload"]["reason"]
