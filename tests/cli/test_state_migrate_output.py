"""What `piwf state migrate` prints (issue 22, edge 8): the summary is one line, not a table title
wrapped to the width of a two-column table, and each table's count is printed once (in the table),
not a second time as a progress line on stderr."""

from __future__ import annotations

from pathlib import Path

from cli_support import piwf

from piwf_actors import HostConfig, start_host
from piwf_actors.store.engines.postgresql import PostgresDatabase


def test_migrate_prints_one_summary_line_and_each_count_once(state_dir: Path, pg_database: PostgresDatabase,
                                                             tmp_path: Path) -> None:
    sqlite = f"sqlite://{state_dir}/state.db"
    flows = tmp_path / "flows.py"
    flows.write_text("from piwf_actors.workflows import compute, define_workflow\n"
                     "one = define_workflow(name='one', start_at='a', nodes={'a': compute(run=lambda ctx: 1)}, "
                     "edges=[])\n")
    host = start_host(HostConfig(state_dir=state_dir, database=sqlite, max_workers=1))
    try:
        for _ in range(3):
            assert host.wait_for_run(host.start_run(f"{flows}:one", {}).run_id, timeout=30).status == "done"
    finally:
        host.stop()
    migrated = piwf(state_dir, "--database", sqlite, "state", "migrate", "--to", pg_database.url, timeout=120)
    assert migrated.returncode == 0, (migrated.stdout, migrated.stderr)
    lines = migrated.stdout.splitlines()
    summary = lines[0]
    assert summary.startswith("copied ") and " rows in " in summary, lines
    assert summary.endswith("row counts and state.verify checked"), lines
    assert not any("state.verify" in line for line in lines[1:]), lines  # not wrapped into more lines
    run_rows = [line for line in lines if line.split("│")[1:2] and line.split("│")[1].strip() == "run"]
    assert len(run_rows) == 1 and run_rows[0].split("│")[2].strip() == "3", lines
    assert migrated.stderr.splitlines() == [f"piwf: copying {state_dir}/state.db into {pg_database} …"], \
        migrated.stderr
