"""The write-ahead log stays small: trimmed when the writer is idle, its size shown by state.status.

SQLite's automatic checkpoint resets the WAL but never shrinks the file, so
without `journal_size_limit` and a truncating checkpoint it keeps the
largest size it ever reached (megabytes beside a small database), and on a
disk that was full and then freed it takes the freed space back.
"""

from __future__ import annotations

import os
import textwrap

from testsupport import sqlite_only, wait_for

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client

FLOW = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge
    pad = define_workflow(name="pad", start_at="a", nodes={
        "a": compute(run=lambda ctx: {"pad": "a" * 20000}),
        "b": compute(run=lambda ctx: {"pad": "b" * 20000}),
        "c": compute(run=lambda ctx: {"pad": "c" * 20000}),
    }, edges=[edge("a", "b"), edge("b", "c")])
''')


@sqlite_only("the size of state.db-wal; PostgreSQL manages its own WAL")
def test_the_wal_is_truncated_when_the_writer_is_idle(state_dir, tmp_path) -> None:
    (tmp_path / "pad.py").write_text(FLOW)
    wal = state_dir / "state.db-wal"
    with start_host(HostConfig(state_dir=state_dir, max_workers=2, lease_s=30)) as host:
        run_ids = [host.start_run(f"{tmp_path / 'pad.py'}:pad", {"i": i})["receipt"]["run_id"] for i in range(40)]
        peak = 0
        for run_id in run_ids:
            assert host.wait_for_run(run_id, timeout=60)["status"] == "done"
            peak = max(peak, os.path.getsize(wal) if wal.exists() else 0)
        assert peak > 1024 * 1024, f"the load should grow the WAL past 1 MiB (peak {peak})"
        # Idle now: the writer trims the log.
        wait_for(lambda: (os.path.getsize(wal) if wal.exists() else 0) <= 64 * 1024, 10,
                 lambda: f"the WAL to shrink (it is {os.path.getsize(wal)} bytes)")
        with Client(state_dir) as client:
            status = client.request("state.status").receipt
        assert status["wal_bytes"] <= 64 * 1024
