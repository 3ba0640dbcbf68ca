"""`piwf list`, `show`, `events` and `logs` with no host running: they read the state database of a
stopped host read-only and say so on stderr; every other command still exits 3."""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ok_json, piwf, short_dir

from piwf_actors import HostConfig, start_host

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge, shell

    quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"got": ctx.input}),
                            "big": compute(run=lambda ctx: {"blob": "y" * 200_000})}, edges=[edge("a", "big")])
    broken = define_workflow(name="broken", start_at="sh", nodes={
        "sh": shell(command="echo to-stdout; echo to-stderr >&2; exit 4", shell=True)}, edges=[])
''')


@pytest.fixture(scope="module")
def stopped() -> Iterator[dict[str, Any]]:
    """The state directory of a host that ran two runs and stopped."""
    state = short_dir("pco-")
    (state / "flows.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        quick = host.start_run(f"{state / 'flows.py'}:quick", {"n": 1})["receipt"]["run_id"]
        broken = host.start_run(f"{state / 'flows.py'}:broken", {})["receipt"]["run_id"]
        for run_id in (quick, broken):
            host.wait_for_run(run_id, timeout=30)
    finally:
        host.stop("runs done")
    assert not (state / "host.sock").exists()
    try:
        yield {"state": state, "quick": quick, "broken": broken}
    finally:
        shutil.rmtree(state, ignore_errors=True)


def notice(state: Path) -> str:
    return f"piwf: no host is running; reading {state / 'state.db'} (read-only)\n"


def test_list_reads_the_database_of_a_stopped_host(stopped: dict[str, Any]) -> None:
    state = stopped["state"]
    digest = hashlib.sha256((state / "state.db").read_bytes()).hexdigest()
    result = piwf(state, "list")
    assert result.returncode == 0, result.stderr
    assert result.stderr == notice(state)
    assert stopped["quick"][-12:] in result.stdout and stopped["broken"][-12:] in result.stdout
    assert "node_failed" in result.stdout  # the error column
    runs = ok_json(piwf(state, "list", "--json", "--workflow", "broken"))["runs"]
    assert [run["run_id"] for run in runs] == [stopped["broken"]]
    assert ok_json(piwf(state, "list", "--json", "--since", "1d", "--status", "done"))["runs"][0]["run_id"] == \
        stopped["quick"]
    assert ok_json(piwf(state, "list", "--json", "--since", "2999-01-01"))["runs"] == []
    assert hashlib.sha256((state / "state.db").read_bytes()).hexdigest() == digest  # read only


def test_show_events_and_logs_without_a_host(stopped: dict[str, Any]) -> None:
    state, quick, broken = stopped["state"], stopped["quick"], stopped["broken"]
    shown = ok_json(piwf(state, "show", quick[:20], "--json"))  # a prefix, resolved from the database
    assert shown["output"] == {"blob": "y" * 200_000}  # a content marker, read in chunks
    table = piwf(state, "show", broken)
    assert table.returncode == 0 and table.stderr == notice(state)
    assert "node sh: exit code 4" in table.stdout and "to-stderr" in table.stdout
    events = ok_json(piwf(state, "events", broken, "--json"))["events"]
    assert events[0]["kind"] == "run_created" and events[-1]["kind"] == "run_failed"
    logs = piwf(state, "logs", broken, "sh")
    assert logs.returncode == 0 and "── stderr ──\nto-stderr\n" in logs.stdout
    assert piwf(state, "show", "run_zzzz").returncode == 1


def test_other_commands_still_need_a_host(stopped: dict[str, Any]) -> None:
    for args in (("status",), ("watch",), ("cancel", stopped["quick"]), ("inbox",), ("restart", stopped["broken"])):
        result = piwf(stopped["state"], *args)
        assert result.returncode == 3, (args, result.stderr)
        assert "no piwf host is listening" in result.stderr and "piwf-host" in result.stderr, args
