"""`bin/piwf` as a real command against a real host.

One host runs in-process for the module (its own short state directory
under /tmp, as in tests/conftest.py) with a small workflow file written to a
temp dir; every test runs `bin/piwf …` as a subprocess and checks its exit
status, stdout (JSON with --json) and stderr. `piwf watch` is driven in a
real terminal inside tmux. Host stop gets a host of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import execute

from piwf_actors import HostConfig, start_host
from piwf_actors.cli.main import main
from piwf_actors.cli.values import cutoff, key_value
from piwf_actors.client import Client

REPO = Path(__file__).resolve().parents[2]
PIWF = REPO / "bin" / "piwf"

WORKFLOWS = textwrap.dedent('''
    import time
    from piwf_actors.workflows import compute, define_workflow, edge

    quick = define_workflow(
        name="quick", start_at="a",
        nodes={"a": compute(run=lambda ctx: {"got": ctx.input}),
               "b": compute(run=lambda ctx: {"n": 1, "prev": ctx.outputs["a"]})},
        edges=[edge("a", "b")],
    )

    def _nap(ctx):
        time.sleep(float(ctx.input.get("sleep", 30)))
        return {"slept": True}

    slow = define_workflow(name="slow", start_at="nap", nodes={"nap": compute(run=_nap)}, edges=[])

    def _boom(ctx):
        raise RuntimeError("boom [red]x[/red]")

    failing = define_workflow(name="failing", start_at="boom", nodes={"boom": compute(run=_boom)}, edges=[])

    big = define_workflow(name="big", start_at="a", nodes={"a": compute(run=lambda ctx: {"blob": "z" * 300_000})},
                          edges=[])
''')


def _short_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = _short_dir("pc-")
    work = _short_dir("pc-wf-")
    (work / "wf.py").write_text(WORKFLOWS)
    (work / "proj" / ".piwf" / "workflows").mkdir(parents=True)
    (work / "proj" / ".piwf" / "workflows" / "flows.py").write_text(WORKFLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=4))
    try:
        yield {"state": state, "work": work, "wf": str(work / "wf.py"), "host": host}
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def piwf(state: Path | None, *args: str, timeout: float = 30, extra_env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(PIWF), *args]
    if state is not None:
        command += ["--state-dir", str(state)]
    environ = {k: v for k, v in os.environ.items() if k != "PIWF_STATE_DIR"}
    environ.update(extra_env or {})
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environ,
                          cwd=cwd or REPO, stdin=subprocess.DEVNULL)


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return json.loads(result.stdout)


def start(env: dict[str, Any], workflow: str, *pairs: str) -> str:
    return ok_json(piwf(env["state"], "start", f"{env['wf']}:{workflow}", *pairs, "--json"))["run_id"]


def wait_status(env: dict[str, Any], run_id: str, statuses: tuple[str, ...], timeout: float = 15) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    with Client(env["state"]) as client:
        while True:
            view = client.get(run_id)
            if view["status"] in statuses:
                return view
            assert time.monotonic() < deadline, f"run {run_id} stayed {view['status']}"
            time.sleep(0.05)


# --- runs ------------------------------------------------------------------------------------


def test_start_wait_prints_the_final_run(env: dict[str, Any]) -> None:
    view = ok_json(piwf(env["state"], "start", f"{env['wf']}:quick", "--wait", "--json", "x=1"))
    assert view["status"] == "done"
    assert view["output"] == {"n": 1, "prev": {"got": {"x": 1}}}
    assert [n["node_id"] for n in view["nodes"]] == ["a", "b"]


def test_start_key_values_build_the_input_and_relative_paths_work(env: dict[str, Any]) -> None:
    # Pairs add keys to --input's object (a key in both is an error: test_cli_start_args.py).
    result = piwf(env["state"], "start", "wf.py:quick", "--input", '{"base": true}', "n=3", "name=ada",
                  "list=[1,2]", "text=a b=c", "--json", cwd=env["work"])
    run_id = ok_json(result)["run_id"]
    view = wait_status(env, run_id, ("done",))
    assert view["input"] == {"base": True, "n": 3, "name": "ada", "list": [1, 2], "text": "a b=c"}
    assert view["project_path"] == str(env["work"])


def test_start_a_discovered_workflow_by_name(env: dict[str, Any]) -> None:
    project = env["work"] / "proj"
    by_flag = ok_json(piwf(env["state"], "start", "quick", "--project", str(project), "--wait", "--json"))
    assert by_flag["status"] == "done" and by_flag["project_path"] == str(project)
    from_cwd = ok_json(piwf(env["state"], "start", "quick", "--json", cwd=project))
    assert wait_status(env, from_cwd["run_id"], ("done",))["project_path"] == str(project)


def test_failed_run_exits_1_and_untrusted_text_is_not_markup(env: dict[str, Any]) -> None:
    result = piwf(env["state"], "start", f"{env['wf']}:failing", "--wait")
    assert result.returncode == 1, result.stderr
    assert "boom [red]x[/red]" in result.stdout
    assert "failed" in result.stdout


def test_list_and_show(env: dict[str, Any]) -> None:
    run_id = start(env, "quick", "who=list")
    wait_status(env, run_id, ("done",))
    runs = ok_json(piwf(env["state"], "list", "--json", "--limit", "50"))["runs"]
    assert run_id in [r["run_id"] for r in runs]
    done = ok_json(piwf(env["state"], "list", "--status", "done", "--json"))["runs"]
    assert done and all(r["status"] == "done" for r in done)
    table = piwf(env["state"], "list")
    # Tables show ids by their random end (`…` and 12 characters), never wrapped.
    assert table.returncode == 0 and "…" + run_id[-12:] in table.stdout and "workflow" in table.stdout
    assert run_id not in table.stdout and "duration" in table.stdout
    shown = piwf(env["state"], "show", run_id)
    assert shown.returncode == 0, shown.stderr
    for text in (run_id, "quick", "done", "nodes", '{"got":{"who":"list"}}'):
        assert text in shown.stdout


def test_events(env: dict[str, Any]) -> None:
    run_id = start(env, "quick")
    wait_status(env, run_id, ("done",))
    events = ok_json(piwf(env["state"], "events", run_id, "--json"))["events"]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "run_created" and kinds[-1] == "run_finished"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    later = ok_json(piwf(env["state"], "events", run_id, "--after", "2", "--json"))["events"]
    assert [e["seq"] for e in later] == list(range(3, len(events) + 1))
    table = piwf(env["state"], "events", run_id)
    assert table.returncode == 0 and "run_finished" in table.stdout and "node_finished" in table.stdout


def test_pause_resume_cancel_follow_and_restart(env: dict[str, Any]) -> None:
    run_id = start(env, "slow", "sleep=30")
    wait_status(env, run_id, ("running",))
    follow = subprocess.Popen([str(PIWF), "events", run_id, "--follow", "--json", "--state-dir", str(env["state"])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert ok_json(piwf(env["state"], "pause", run_id, "--json"))["status"] == "pausing"
        assert piwf(env["state"], "resume", run_id).returncode == 0
        cancelled = piwf(env["state"], "cancel", run_id)
        assert cancelled.returncode == 0 and "cancelling" in cancelled.stdout
        out, err = follow.communicate(timeout=20)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert kinds[0] == "run_created" and kinds[-1] == "run_cancelled"
    assert {"pause_requested", "pause_cancelled", "cancel_requested"} <= set(kinds)
    again = piwf(env["state"], "cancel", run_id)
    assert again.returncode == 1 and again.stderr.startswith("piwf: rejected: ")

    receipt = ok_json(piwf(env["state"], "restart", run_id, "--json"))
    assert receipt["parent_run_id"] == run_id and receipt["run_id"] != run_id
    child = wait_status(env, receipt["run_id"], ("running", "done"))
    assert child["parent_run_id"] == run_id and child["input"] == {"sleep": 30}
    assert piwf(env["state"], "cancel", receipt["run_id"]).returncode == 0
    wait_status(env, receipt["run_id"], ("cancelled",))


def test_unknown_run_and_effect_exit_1(env: dict[str, Any]) -> None:
    for args, kind in ((("show", "run_nope"), "run"), (("restart", "run_nope"), "run"), (("watch", "run_nope"), "run"),
                       (("effect", "resolve", "eff_nope", "confirm"), "effect")):
        result = piwf(env["state"], *args)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.startswith(f"piwf: no {kind} matches '{args[-1] if kind == 'run' else 'eff_nope'}'"), (
            args, result.stderr)
    refused = piwf(env["state"], "show", "run_nope", "--json")
    assert json.loads(refused.stdout)["outcome"] == "notFound"
    # A full id is used as is: the host answers for it.
    full = piwf(env["state"], "show", "run_" + "0" * 26)
    assert full.returncode == 1 and full.stderr.startswith("piwf: notFound: "), full.stderr
    unknown = piwf(env["state"], "start", "no_such_workflow")
    assert unknown.returncode == 1 and unknown.stderr.startswith("piwf: rejected: ")


# --- host and state ------------------------------------------------------------------------


def test_status(env: dict[str, Any]) -> None:
    view = ok_json(piwf(env["state"], "status", "--json"))
    assert view["epoch"] >= 1 and view["lease"]["live"] is True
    assert set(view["runs"]) >= {"queued", "running", "done", "failed", "cancelled"}
    assert view["workers"]["max"] == 4 and "queue_depth" in view["writer"]
    # Common options may come before the subcommand too (and PIWF_STATE_DIR names the default).
    before = piwf(None, "--json", "--state-dir", str(env["state"]), "status",
                  extra_env={"PIWF_STATE_DIR": "/nonexistent"})
    assert ok_json(before)["epoch"] == view["epoch"]
    human = piwf(None, "status", extra_env={"PIWF_STATE_DIR": str(env["state"])})
    assert human.returncode == 0 and "epoch" in human.stdout and "commits/s" in human.stdout


def test_state_commands(env: dict[str, Any]) -> None:
    status = ok_json(piwf(env["state"], "state", "status", "--json"))
    assert status["tables"]["run"] >= 1 and "done" in status["runs"]
    verify = piwf(env["state"], "state", "verify")
    assert verify.returncode == 0 and "state ok" in verify.stdout
    destination = env["work"] / f"backup-{uuid.uuid4().hex[:6]}.db"
    backup = ok_json(piwf(env["state"], "state", "backup", str(destination), "--json"))
    assert backup["verified"] is True and destination.is_file()
    again = piwf(env["state"], "state", "backup", str(destination))
    assert again.returncode == 1 and "already exists" in again.stderr
    plan = ok_json(piwf(env["state"], "state", "prune", "--before", "2000-01-01", "--json"))
    assert plan["applied"] is False and plan["run_count"] == 0
    dry = piwf(env["state"], "state", "prune", "--before", "0d")
    assert dry.returncode == 0 and "dry run" in dry.stdout
    assert piwf(env["state"], "state", "prune", "--before", "someday").returncode == 2


def test_host_not_running_exits_3_with_a_hint() -> None:
    empty = _short_dir("pc-none-")
    try:
        result = piwf(empty, "list")
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    assert result.returncode == 3
    assert "piwf-host" in result.stderr and "no piwf host" in result.stderr


def test_bad_usage_exits_2(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    result = piwf(env["state"], "start")  # once for real, through bin/piwf
    assert result.returncode == 2 and "usage:" in result.stderr
    for args in ((), ("frobnicate",), ("list", "--limit", "many"), ("effect", "resolve", "e", "maybe"),
                 ("start", "wf", "--input", "{not json"), ("start", "wf", "novalue"), ("state",),
                 ("list", "--bogus"), ("show",), ("state", "prune"), ("start", "wf", "--wait", "a=1", "-x")):
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--state-dir", str(env["state"])])
        assert exit_info.value.code == 2, args
        assert "usage:" in capsys.readouterr().err, args


def test_parsers() -> None:
    assert key_value("n=3") == ("n", 3)
    assert key_value("s=hello") == ("s", "hello")
    assert key_value("o={\"a\": null}") == ("o", {"a": None})
    assert key_value("x=NaN") == ("x", "NaN") and key_value("e=") == ("e", "")
    assert cutoff("30d", now=1_000_000.0) == 1_000_000.0 - 30 * 86400
    assert cutoff("1.5h", now=10_000.0) == 10_000.0 - 5400
    assert cutoff("2024-01-01T00:00:00+00:00") == 1704067200.0


# --- live views ---------------------------------------------------------------------------


def test_watch_in_a_terminal(env: dict[str, Any]) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    run_id = start(env, "quick", "for=watch")
    wait_status(env, run_id, ("done",))
    server = f"piwf-test-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", server]
    command = f"{PIWF} watch --state-dir {env['state']}; echo EXITED $?; sleep 30"
    subprocess.run([*tmux, "new-session", "-d", "-s", "w", "-x", "120", "-y", "40", command], check=True,
                   env={k: v for k, v in os.environ.items() if k != "TMUX"})

    def screen_until(text: str, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "w"], capture_output=True,
                                    text=True).stdout
            if text in screen:
                return screen
            assert time.monotonic() < deadline, f"{text!r} not on screen:\n{screen}"
            time.sleep(0.1)

    try:
        screen = screen_until(run_id[-12:])  # ids are shown by their ends: `…` and 12 characters
        assert "run id" in screen and "workflow" in screen and "Ctrl-C" in screen
        new_run = start(env, "quick", "for=watch2")
        screen_until(new_run[-12:])  # the live table follows new runs
        subprocess.run([*tmux, "send-keys", "-t", "w", "C-c"], check=True)
        screen_until("EXITED 0")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def test_verify_violations_then_host_stop_ends_watches_with_exit_3() -> None:
    state = _short_dir("pc-stop-")
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    # Break an invariant behind the host's back: an event of a run that does not exist.
    execute(state, "INSERT INTO run_event (run_id, seq, kind, created_at) VALUES ('run_ghost', 1, 'note', 0)")
    verify = piwf(state, "state", "verify")
    assert verify.returncode == 1 and "event_of_missing_run" in verify.stdout and "run_ghost" in verify.stdout
    assert json.loads(piwf(state, "state", "verify", "--json").stdout)["ok"] is False
    watch = subprocess.Popen([str(PIWF), "watch", "--json", "--state-dir", str(state)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        first = json.loads(watch.stdout.readline())  # the initial runs view
        assert first["runs"] == [] and first["counts"]["done"] == 0
        stopped = piwf(state, "host", "stop", "--json")
        assert ok_json(stopped) == {"stopping": True, "stopped": True}  # it returned once the host had stopped
        assert watch.wait(15) == 3
        assert "piwf-host" in (watch.stderr.read() if watch.stderr else "")
        deadline = time.monotonic() + 10
        while not host.stopped:
            assert time.monotonic() < deadline, "the host did not stop"
            time.sleep(0.05)
    finally:
        watch.kill()
        watch.communicate()
        host.stop("test done")
        shutil.rmtree(state, ignore_errors=True)


def test_show_prints_values_over_64_kib_in_full(env: dict[str, Any]) -> None:
    """run.get sends a large output as a content marker; `piwf show` fetches it with content.read."""
    run_id = env["host"].start_run(f"{env['wf']}:big")["receipt"]["run_id"]
    assert env["host"].wait_for_run(run_id, timeout=30)["status"] == "done"
    assert "$content" in env["host"].get_run(run_id)["output"]
    shown = ok_json(piwf(env["state"], "show", run_id, "--json"))
    assert shown["output"] == {"blob": "z" * 300_000}
    assert shown["nodes"][0]["output"] == {"blob": "z" * 300_000}
