"""`piwf start --wait`, `watch RUN`, `show`, `logs [-f]` and `restart` against a real host.

One in-process host serves the module (its own short state directory); every
command is a real `bin/piwf` subprocess. Runs that must stay running while a
command follows them wait for a trigger file the test creates, so nothing
depends on timing.
"""

from __future__ import annotations

import json
import shlex
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import LineReader, ok_json, piwf, popen, short_dir, wait_status

from piwf_actors import HostConfig, start_host

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import choice, compute, decision_switch, define_workflow, edge, human_decision, shell

    release = define_workflow(name="release", start_at="test", nodes={
        "test": compute(run=lambda ctx: {"ok": True}),
        "approve": human_decision(audience="ops", choices={"ship": choice(label="Ship it"),
                                                           "stop": choice(label="Stop")},
                                  request={"title": "Ship it?"}),
        "shipped": compute(run=lambda ctx: {"shipped": True}),
        "stopped": compute(run=lambda ctx: {"stopped": True})},
        edges=[edge("test", "approve"), decision_switch("approve", cases={"ship": "shipped", "stop": "stopped"})])

    def _lookup(ctx):
        return {"value": ctx.input["missing"]}

    keyerror = define_workflow(name="keyerror", start_at="lookup", nodes={"lookup": compute(run=_lookup)}, edges=[])

    failing_shell = define_workflow(name="failing_shell", start_at="build", nodes={"build": shell(
        command='for i in $(seq 1 30); do echo "problem line $i" >&2; done; echo built-out; exit 7', shell=True)},
        edges=[])

    # Prints a line every 0.1 s until the trigger file exists, then exits with the code written in it.
    LOOP = 'i=0; while [ ! -s "$1" ]; do i=$((i+1)); echo "line $i"; sleep 0.1; done; echo last; echo bye >&2; exit $(cat "$1")'
    gated = define_workflow(name="gated", start_at="talk", nodes={
        "talk": shell(command=lambda ctx: ["sh", "-c", LOOP, "sh", ctx.input["trigger"]])}, edges=[])
''')


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pcf-")
    work = short_dir("pcf-wf-")
    (work / "flows.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=4))
    try:
        yield {"state": state, "work": work, "flows": work / "flows.py", "host": host}
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def spec(env: dict[str, Any], attr: str) -> str:
    return f"{env['flows']}:{attr}"


def start(env: dict[str, Any], attr: str, *pairs: str) -> str:
    return ok_json(piwf(env["state"], "start", spec(env, attr), *pairs, "--json"))["run_id"]


def test_start_wait_prints_progress_and_how_to_answer_a_decision(env: dict[str, Any]) -> None:
    waiting = popen(env["state"], "start", spec(env, "release"), "--wait")
    try:
        stderr = LineReader(waiting.stderr)
        stderr.until(lambda line: "node test succeeded" in line)
        command_line = stderr.until(lambda line: "piwf" in line and " answer " in line and " ship" in line)
        stderr.until(lambda line: "# Stop" in line)  # the choices are listed, one command each
        text = "".join(stderr.lines)
        assert "waits for a decision at node approve: Ship it?" in text
        assert "request req_" in text
        # The printed command is exact: run it as printed (with this checkout's bin/piwf).
        words = shlex.split(command_line.split("  #")[0])
        assert words[0] == "piwf" and words[-1] == "ship"
        assert words[1:3] == ["--state-dir", str(env["state"])]  # it names the host it came from
        answered = piwf(None, *words[1:])  # bin/piwf in place of `piwf`
        assert answered.returncode == 0, answered.stderr
        assert waiting.wait(30) == 0
        stderr.rest()
        assert "node shipped succeeded" in "".join(stderr.lines)
        assert waiting.stdout is not None and "done" in waiting.stdout.read()
    finally:
        waiting.kill()
        waiting.communicate()


def test_watch_run_ends_with_the_run(env: dict[str, Any], tmp_path: Path) -> None:
    for code, expected, mode in (("0", 0, ()), ("1", 1, ("--json",))):
        trigger = tmp_path / f"trigger-{code}"
        run_id = start(env, "gated", f"trigger={trigger}")
        wait_status(env["state"], run_id, ("running",))
        watch = popen(env["state"], "watch", run_id[:20], *mode)
        try:
            if mode:  # --json: one view per line; the first is the current one
                assert watch.stdout is not None
                first = json.loads(watch.stdout.readline())
                assert first["run_id"] == run_id and first["status"] == "running"
            trigger.write_text(code)
            assert watch.wait(30) == expected, watch.communicate()
        finally:
            watch.kill()
            out, _err = watch.communicate()
        if mode:
            assert json.loads(out.splitlines()[-1])["status"] == "failed"


def test_show_prints_the_traceback_and_a_failed_shell_nodes_stderr(env: dict[str, Any]) -> None:
    failed = piwf(env["state"], "start", spec(env, "keyerror"), "--wait")
    assert failed.returncode == 1, failed.stderr
    line = FLOWS.splitlines().index('    return {"value": ctx.input["missing"]}') + 1
    for output in (failed.stdout, piwf(env["state"], "show", start_and_wait(env, "keyerror")).stdout):
        assert "Traceback (most recent call last)" in output
        assert f'File "{env["flows"]}", line {line}, in _lookup' in output
        assert "KeyError: 'missing'" in output

    run_id = start_and_wait(env, "failing_shell")
    shown = piwf(env["state"], "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "node build: exit code 7" in shown.stdout
    assert "problem line 30" in shown.stdout and "problem line 11" in shown.stdout
    assert "problem line 10\n" not in shown.stdout and "10 earlier line(s)" in shown.stdout  # the last 20 lines


def start_and_wait(env: dict[str, Any], attr: str, *pairs: str) -> str:
    run_id = start(env, attr, *pairs)
    wait_status(env["state"], run_id, ("done", "failed", "cancelled"))
    return run_id


def test_logs_of_a_failed_shell_node(env: dict[str, Any]) -> None:
    run_id = start_and_wait(env, "failing_shell")
    logs = piwf(env["state"], "logs", run_id)  # no NODE: the node that ran last
    assert logs.returncode == 0, logs.stderr
    assert "── stdout ──\nbuilt-out\n" in logs.stdout
    assert "── stderr ──\nproblem line 1\n" in logs.stdout and "problem line 30\n" in logs.stdout
    assert "exit code 7" in logs.stdout
    as_json = ok_json(piwf(env["state"], "logs", run_id, "build", "--json"))
    assert as_json["output"]["exit_code"] == 7 and as_json["output"]["stdout"] == "built-out\n"
    missing = piwf(env["state"], "logs", run_id, "nope")
    assert missing.returncode == 1 and "node 'nope'" in missing.stderr and "build" in missing.stderr
    ended = piwf(env["state"], "logs", "-f", run_id)  # the run ended already: its output, exit 1 (failed)
    assert ended.returncode == 1 and "problem line 30" in ended.stdout


def test_logs_follow_prints_output_while_the_node_runs(env: dict[str, Any], tmp_path: Path) -> None:
    trigger = tmp_path / "trigger"
    run_id = start(env, "gated", f"trigger={trigger}")
    follow = popen(env["state"], "logs", run_id, "talk", "-f")
    try:
        stdout = LineReader(follow.stdout)
        stdout.until(lambda line: line.startswith("line "))
        # A line arrived and the run cannot have ended: it waits for the trigger.
        assert wait_status(env["state"], run_id, ("running",), timeout=5)["status"] == "running"
        trigger.write_text("0")
        assert follow.wait(30) == 0
        assert stdout.rest().endswith("last\n")
        assert follow.stderr is not None and "bye" in follow.stderr.read()
    finally:
        follow.kill()
        follow.communicate()
    assert wait_status(env["state"], run_id, ("done",))["status"] == "done"


BUGGY = textwrap.dedent('''
    import os
    from piwf_actors.workflows import action, compute, define_workflow, edge

    def _record(ctx):
        with open(ctx.input["oracle"], "a") as handle:
            handle.write(f"{ctx.node_id} {ctx.run_id}\\n")

    def _load(ctx):
        _record(ctx)
        return {"loaded": 1}

    def _charge(ctx):
        _record(ctx)
        return {"charged": 1}

    def _check(ctx):
        _record(ctx)
        return {"value": ctx.input["missing"]}  # the bug

    staged = define_workflow(name="staged", start_at="load",
                             nodes={"load": compute(run=_load), "charge": action(run=_charge),
                                    "check": compute(run=_check)},
                             edges=[edge("load", "charge"), edge("charge", "check")])
''')
FIXED = BUGGY.replace('ctx.input["missing"]', 'ctx.input.get("missing", 42)')


def test_restart_from_a_node_and_after_fixing_the_workflow(env: dict[str, Any], tmp_path: Path) -> None:
    flow, oracle = tmp_path / "staged.py", tmp_path / "oracle"
    flow.write_text(BUGGY)
    parent = ok_json(piwf(env["state"], "start", f"{flow}:staged", f"oracle={oracle}", "--json"))["run_id"]
    assert wait_status(env["state"], parent, ("done", "failed"))["status"] == "failed"

    def executions(run_id: str) -> list[str]:
        return [line.split()[0] for line in oracle.read_text().splitlines() if line.split()[1] == run_id]

    assert executions(parent) == ["load", "charge", "check"]

    forked = ok_json(piwf(env["state"], "restart", parent[:20], "--from", "check", "--same-code", "--json"))
    assert forked["from_node"] == "check" and forked["digest_changed"] is False
    assert wait_status(env["state"], forked["run_id"], ("done", "failed"))["status"] == "failed"
    assert executions(forked["run_id"]) == ["check"]  # load and charge (a side effect) did not run again

    flow.write_text(FIXED)
    restarted = piwf(env["state"], "restart", parent)
    assert restarted.returncode == 0, restarted.stderr
    assert "the workflow's code changed" in restarted.stdout
    child = restarted.stdout.split(" as ")[1].split()[0]
    view = wait_status(env["state"], child, ("done", "failed"))
    assert (view["status"], view["output"]) == ("done", {"value": 42})
    again = piwf(env["state"], "restart", parent)  # the same revision again: the first restart, no new run
    assert again.returncode == 0 and child in again.stdout and "restarted before" in again.stdout
    unknown = piwf(env["state"], "restart", parent, "--from", "nope")
    assert unknown.returncode == 1 and "nope" in unknown.stderr


def test_watch_waits_run_and_logs_exit_codes_agree(env: dict[str, Any], tmp_path: Path) -> None:
    """`start --wait`, `watch RUN` and `logs -f` all exit 1 for a failed run, 0 for a done one."""
    failed = start_and_wait(env, "failing_shell")
    assert piwf(env["state"], "watch", failed).returncode == 1
    assert piwf(env["state"], "logs", "-f", failed).returncode == 1
    trigger = tmp_path / "t"
    trigger.write_text("0")
    done = start_and_wait(env, "gated", f"trigger={trigger}")
    assert piwf(env["state"], "watch", done, "--json").returncode == 0
    assert piwf(env["state"], "logs", "-f", done).returncode == 0
