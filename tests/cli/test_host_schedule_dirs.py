"""What `piwf-host` says at start about schedules (issue 22, edge 6): where it looked (the user's
config directory and each --project) and how many it found in each, with the hint a plain host needs:
without --project it never looks in a project."""

from __future__ import annotations

import logging
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import BIN, LineReader, environ, short_dir
from testsupport import kill_group_and_process, wait_for

from piwf_actors import HostConfig, start_host

SCHEDULES = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_schedule, define_workflow

    tock = define_workflow(name="tock", start_at="t", nodes={"t": compute(run=lambda ctx: {})}, edges=[])
    hourly = define_schedule(name="hourly", workflow=tock, every_s=3600, catch_up="skip")
    daily = define_schedule(name="daily", workflow=tock, cron="0 4 * * *", catch_up="skip")
''')


@pytest.fixture
def config_home() -> Iterator[Path]:
    """An XDG_CONFIG_HOME of the test's own, with an empty piwf/workflows directory."""
    root = short_dir("phs-c-")
    (root / "piwf" / "workflows").mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_plain_piwf_host_says_where_it_looked_for_schedules(state_dir: Path, config_home: Path) -> None:
    process = subprocess.Popen([str(BIN / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               env=environ({"XDG_CONFIG_HOME": str(config_home)}), start_new_session=True)
    try:
        line = LineReader(process.stderr).until(lambda text: "schedules:" in text)
    finally:
        import psutil

        kill_group_and_process(psutil.Process(process.pid))
        process.wait(10)
    said = line.split(" schedules: ", 1)[1].strip()  # after the logger name (…actors.schedules:)
    assert said == (f"none found in {config_home}/piwf/workflows "
                    "(give --project DIR for a project's .piwf/workflows)"), line


def test_a_host_with_projects_counts_the_schedules_of_each_directory(state_dir: Path, config_home: Path,
                                                                     caplog: pytest.LogCaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    with_two, empty = short_dir("phs-a-"), short_dir("phs-b-")
    try:
        (with_two / ".piwf" / "workflows").mkdir(parents=True)
        (with_two / ".piwf" / "workflows" / "s.py").write_text(SCHEDULES)
        (with_two / ".piwf" / "workflows" / "broken.py").write_text("import no_such_module_for_piwf_hsd\n")
        caplog.set_level(logging.INFO, logger="piwf_actors.actors.schedules")
        host = start_host(HostConfig(state_dir=state_dir, max_workers=1, projects=(str(with_two), str(empty))))
        try:
            # The schedule keeper says what it found after its first scan, on its own thread: a
            # loaded machine may not have got there when start_host returns.
            said_lines = wait_for(lambda: [r.getMessage() for r in caplog.records
                                           if r.getMessage().startswith("schedules: ")],
                                  20, "the schedule keeper to say what it found")
        finally:
            host.stop()
    finally:
        shutil.rmtree(with_two, ignore_errors=True)
        shutil.rmtree(empty, ignore_errors=True)
    [said] = said_lines
    assert said == (f"schedules: 2 in {with_two}/.piwf/workflows (daily, hourly; 1 file failed to load, see "
                    f"piwf schedule list); none found in {empty}/.piwf/workflows; none found in "
                    f"{config_home}/piwf/workflows"), said
