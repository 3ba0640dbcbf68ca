"""`piwf inbox` when nothing is pending (issue 22, edge 8): a run without a session writes no session
message (only notify nodes and the end of a run started with --session do), so for most people the
"session messages" table was always an empty frame. An empty part is now one line that says why, and
a message a notify node wrote still shows as a row."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import piwf

from piwf_actors import HostConfig, HostHandle, start_host

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import define_workflow, notify

    tell = define_workflow(name="tell", start_at="n", nodes={"n": notify(message="disk at 91%")}, edges=[])
''')


@pytest.fixture
def host(state_dir: Path) -> Iterator[HostHandle]:
    handle = start_host(HostConfig(state_dir=state_dir, max_workers=1))
    try:
        yield handle
    finally:
        handle.stop()


def test_an_empty_inbox_says_so_in_two_lines(host: HostHandle, state_dir: Path) -> None:
    shown = piwf(state_dir, "inbox")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "no pending requests",
        "no session messages (notify nodes write them, and a run started with --session S tells S how it ended)"]


def test_a_notify_message_shows_as_a_row_and_the_empty_part_as_a_line(host: HostHandle, state_dir: Path,
                                                                     tmp_path: Path) -> None:
    flows = tmp_path / "flows.py"
    flows.write_text(FLOWS)
    run_id = host.start_run(f"{flows}:tell", {}).run_id
    assert host.wait_for_run(run_id, timeout=30).status == "done"
    shown = piwf(state_dir, "inbox")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "no pending requests"
    assert lines[1].startswith("session messages") and "disk at 91%" in shown.stdout and "notify" in shown.stdout
