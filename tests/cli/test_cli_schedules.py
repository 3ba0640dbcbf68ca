"""`piwf schedule list | pause | resume | trigger NAME` (bin/piwf against an in-process host), and the list's
pure render at a fixed width."""

from __future__ import annotations

import re
import shutil
import textwrap
from datetime import datetime
from zoneinfo import ZoneInfo

from cli_support import ok_json, piwf, short_dir, wait_until
from rich.console import Console

from piwf_actors.cli.schedules import render_list

SCHEDULES = """
from piwf_actors.workflows import compute, define_schedule, define_workflow

echo = define_workflow(name="echo", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[])
nightly = define_schedule(name="nightly", workflow=echo, cron="0 3 * * *", timezone="Europe/Berlin",
                          input=lambda t: {"day": t.date().isoformat()})
"""


def test_schedule_commands_against_a_host(hosts, state_dir) -> None:
    project = short_dir("pw-proj-")
    try:
        (project / ".piwf" / "workflows").mkdir(parents=True)
        (project / ".piwf" / "workflows" / "nightly.py").write_text(textwrap.dedent(SCHEDULES))
        hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=1)
        listed = wait_until(lambda: (v := ok_json(piwf(state_dir, "schedule", "list", "--json")))["schedules"]
                            and v["schedules"][0]["next_fire_at"] and v, 15, "the schedule to be recorded")
        [item] = listed["schedules"]
        assert item["name"] == "nightly" and item["workflow"] == "echo" and item["paused"] is False
        table = piwf(state_dir, "schedule", "list")
        assert table.returncode == 0 and "nightly" in table.stdout and "cron 0 3 * * * (Europe/Berlin)" in table.stdout
        assert "03:00:00 CE" in table.stdout  # the next fire in the schedule's zone (CET or CEST)
        paused = piwf(state_dir, "schedule", "pause", "nightly")
        assert paused.returncode == 0 and paused.stdout.strip() == "schedule nightly paused"
        again = piwf(state_dir, "schedule", "pause", "nightly")
        assert again.returncode == 1 and "already paused" in again.stderr
        fired = ok_json(piwf(state_dir, "schedule", "trigger", "nightly", "--json"))
        assert re.fullmatch(r"run_[0-9a-z]{26}", fired["run_id"]) and fired["status"] == "queued"  # one id shape
        shown = ok_json(piwf(state_dir, "show", fired["run_id"], "--json"))
        assert shown["schedule"]["name"] == "nightly" and shown["schedule"]["kind"] == "manual"
        resumed = piwf(state_dir, "schedule", "resume", "nightly")
        assert resumed.returncode == 0 and resumed.stdout.strip() == "schedule nightly resumed"
        missing = piwf(state_dir, "schedule", "trigger", "nope")
        assert missing.returncode == 1 and "notFound" in missing.stderr
    finally:
        shutil.rmtree(project, ignore_errors=True)


BERLIN_3AM = datetime(2026, 12, 1, 3, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()


def test_render_list_at_a_fixed_width() -> None:
    view = {"running": True, "dirs": ["/p/.piwf/workflows"], "clashes": [],
            "failures": [{"path": "/p/.piwf/workflows/broken.py", "error": "SyntaxError: [bold]x[/bold]"}],
            "schedules": [
                {"name": "nightly", "loaded": True, "paused": False, "workflow": "report",
                 "timing": "cron 0 3 * * * (Europe/Berlin)", "timezone": "Europe/Berlin",
                 "next_fire_at": BERLIN_3AM, "last_fire_at": BERLIN_3AM - 86400, "fire_count": 12,
                 "skipped_count": 2, "last_error": None},
                {"name": "tick", "loaded": True, "paused": True, "workflow": "echo", "timing": "every 60 s",
                 "timezone": "UTC", "next_fire_at": None, "last_fire_at": None, "fire_count": 0,
                 "skipped_count": 0, "last_error": "ValueError: no input"},
            ]}
    console = Console(record=True, width=140, color_system=None)
    console.print(render_list(view, now=BERLIN_3AM - 3600))
    text = console.export_text()
    assert "nightly  active  report    cron 0 3 * * * (Europe/Berlin)  2026-12-01 03:00:00 CET (in 1h00m)" in text
    assert "2026-11-30 03:00:00 CET" in text and "12 (2 skipped)" in text
    assert "tick     paused  echo      every 60 s" in text
    assert "tick: last fire started no run: ValueError: no input" in text
    assert "failed to load /p/.piwf/workflows/broken.py: SyntaxError: [bold]x[/bold]" in text  # not markup
