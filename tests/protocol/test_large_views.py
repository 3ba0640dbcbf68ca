"""Large views: values over 64 KiB travel as content markers; a view still too large is announced as truncated.

A single large value (a 200 KB output) no longer makes a view large: `run.get`
and the `run` watch show it as `{"$content": digest, "bytes": n, "preview": …}`
and `content.read` returns it. A view made of many values each under 64 KiB
can still exceed a (deliberately small) frame limit: its event is replaced by
a truncated one, never dropped.
"""

from __future__ import annotations

import json
import textwrap

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client
from piwf_actors.wire.limits import Limits

BIG = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge
    big = define_workflow(name="big", start_at="a", nodes={"a": compute(run=lambda ctx: {"blob": "x" * 200_000})},
                          edges=[])
    many = define_workflow(name="many", start_at="a", nodes={
        "a": compute(run=lambda ctx: {"blob": "a" * 40_000}),
        "b": compute(run=lambda ctx: {"blob": "b" * 40_000}),
    }, edges=[edge("a", "b")])
''')


def test_a_large_output_is_a_content_marker_in_views_and_readable(state_dir, tmp_path):
    (tmp_path / "big.py").write_text(BIG)
    with start_host(HostConfig(state_dir=state_dir, max_workers=1)) as host:
        run_id = host.start_run(f"{tmp_path / 'big.py'}:big")["receipt"]["run_id"]
        assert host.wait_for_run(run_id, timeout=30)["status"] == "done"
        with Client(state_dir) as client:
            event = next(client.watch("run", run_id=run_id, timeout=10))
            marker = event["payload"]["output"]
            assert set(marker) == {"$content", "bytes", "preview"}
            assert marker["preview"].startswith('{"blob":"xxx') and marker["bytes"] == len('{"blob":""}') + 200_000
            assert client.read_json(marker) == {"blob": "x" * 200_000}
            first = client.request("content.read", {"digest": marker["$content"], "offset": 3, "length": 5}).receipt
            assert first == {"digest": marker["$content"], "offset": 3, "total_bytes": marker["bytes"],
                             "data": b'lob":'}
        # The embedding API shows the same marker, and reads it too.
        assert host.get_run(run_id)["output"] == marker
        assert json.loads(host.read_content(marker["$content"])) == {"blob": "x" * 200_000}


def test_view_larger_than_a_frame_arrives_as_a_truncated_event(state_dir, tmp_path):
    (tmp_path / "big.py").write_text(BIG)
    limits = Limits(max_frame_bytes=64 * 1024)
    with start_host(HostConfig(state_dir=state_dir, max_workers=1, limits=limits)) as host:
        run_id = host.start_run(f"{tmp_path / 'big.py'}:many")["receipt"]["run_id"]
        assert host.wait_for_run(run_id, timeout=30)["status"] == "done"
        with Client(state_dir) as client:
            event = next(client.watch("run", run_id=run_id, timeout=10))
        assert event["topic"] == "run" and event["revision"] == 1
        assert event["payload"]["truncated"] is True
        assert "could not be sent" in event["payload"]["reason"]
