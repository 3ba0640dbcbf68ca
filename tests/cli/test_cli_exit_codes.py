"""Exit codes and output a script can rely on (issue 22, edge 7): `piwf workflows` with a file that fails
to load, `piwf host stop` that returns once the host is gone, an unknown resource manager, and
`piwf watch` on a pipe (plain lines, one per change, instead of a live display)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import BIN, LineReader, environ, ok_json, piwf, popen, short_dir, wait_status, wait_until
from testsupport import kill_group_and_process, lock_is_free

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.client import Client

GOOD = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow

    nightly = define_workflow(name="nightly", start_at="a", nodes={"a": compute(run=lambda ctx: 2)}, edges=[])
''')
BROKEN = "import no_such_module_for_piwf_exit_codes\n"

# `gated` runs until its trigger file exists; `stubborn` is a shell node that ignores SIGTERM (its
# process group too: an ignored signal stays ignored across exec), so stopping the host has to wait out
# the kill's grace period before SIGKILL.
FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow, edge, shell

    gated = define_workflow(name="gated", start_at="wait", nodes={
        "wait": shell(command=lambda ctx: ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.05; done', "sh",
                                           ctx.input["trigger"]], idempotent=True),
        "after": compute(run=lambda ctx: {"ok": True}),
    }, edges=[edge("wait", "after")])
    stubborn = define_workflow(name="stubborn", start_at="sleep", nodes={
        "sleep": shell(command="trap '' TERM; sleep 60", shell=True, idempotent=True)},
        edges=[])
''')


@pytest.fixture
def project() -> Iterator[Path]:
    root = short_dir("pce-")
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "good.py").write_text(GOOD)
    (root / "flows.py").write_text(FLOWS)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def config_home(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


# --- piwf workflows ------------------------------------------------------------------------------


def test_workflows_exits_1_when_a_file_fails_to_load_and_still_lists_what_loaded(project: Path,
                                                                                 tmp_path: Path) -> None:
    (project / ".piwf" / "workflows" / "broken.py").write_text(BROKEN)
    table = piwf(None, "workflows", "--project", str(project), extra_env=config_home(tmp_path))
    assert table.returncode == 1, (table.stdout, table.stderr)
    assert "nightly" in table.stdout and "1 file(s) failed to load" in table.stdout
    # One line on stderr names the failure, so a script that only keeps stderr knows why.
    assert table.stderr.strip().splitlines()[-1].startswith(
        f"piwf: 1 workflow file(s) failed to load: {project}/.piwf/workflows/broken.py: "), table.stderr
    listed = piwf(None, "workflows", "--project", str(project), "--json", extra_env=config_home(tmp_path))
    assert listed.returncode == 1
    view = json.loads(listed.stdout)
    assert [w["name"] for w in view["workflows"]] == ["nightly"] and len(view["failures"]) == 1


def test_workflows_exits_0_when_every_file_loads(project: Path, tmp_path: Path) -> None:
    listed = piwf(None, "workflows", "--project", str(project), extra_env=config_home(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert "nightly" in listed.stdout and listed.stderr == ""


# --- piwf host stop ------------------------------------------------------------------------------


@pytest.fixture
def host_process(state_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A real `piwf-host` on `state_dir` (killed in teardown if a test left it running)."""
    process = subprocess.Popen([str(BIN / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", "1",
                                "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=environ(), stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: (state_dir / "host.sock").exists() or process.poll() is not None, 30, "the host's socket")
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        yield process
    finally:
        if process.poll() is None:
            import psutil

            kill_group_and_process(psutil.Process(process.pid))
        process.wait(10)


def _stubborn_running(state_dir: Path, project: Path) -> str:
    run_id = ok_json(piwf(state_dir, "start", f"{project}/flows.py:stubborn", "--json"))["run_id"]
    wait_status(state_dir, run_id, ("running",))
    return run_id


def test_host_stop_returns_once_the_host_is_gone(state_dir: Path, project: Path,
                                                 host_process: subprocess.Popen[str]) -> None:
    _stubborn_running(state_dir, project)  # its worker takes the kill's grace period to go
    stopped = piwf(state_dir, "host", "stop")
    assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
    assert stopped.stdout.strip().splitlines()[-1] == "host stopped", stopped.stdout
    # Returned only now: the lock is free and nothing listens, so a new host may start at once.
    assert lock_is_free(state_dir / "host.lock")
    assert not (state_dir / "host.sock").exists()
    assert host_process.wait(30) == 0


def test_host_stop_gives_up_after_its_timeout_with_status_1(state_dir: Path, project: Path,
                                                            host_process: subprocess.Popen[str]) -> None:
    _stubborn_running(state_dir, project)
    stopped = piwf(state_dir, "host", "stop", "--timeout", "0.3")
    assert stopped.returncode == 1, (stopped.stdout, stopped.stderr)
    assert stopped.stderr.strip().splitlines()[-1] == "piwf: the host did not stop within 0.3 s (it is still stopping)"
    assert "host stopped" not in stopped.stdout
    assert host_process.wait(30) == 0  # it goes on stopping


def test_host_stop_no_wait_returns_at_once(state_dir: Path, host_process: subprocess.Popen[str]) -> None:
    stopped = piwf(state_dir, "host", "stop", "--no-wait")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "host stopping", stopped.stdout
    assert host_process.wait(30) == 0


def test_host_stop_of_an_embedded_host_waits_for_its_lock(state_dir: Path) -> None:
    host = start_host(HostConfig(state_dir=state_dir, max_workers=1))
    try:
        stopped = piwf(state_dir, "host", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert host.stopped and lock_is_free(state_dir / "host.lock")
    finally:
        host.stop()


# --- piwf resource apply --------------------------------------------------------------------------


def test_an_unknown_resource_manager_exits_1_with_one_line(state_dir: Path, tmp_path: Path) -> None:
    host = start_host(HostConfig(state_dir=state_dir, max_workers=1))
    try:
        spec = tmp_path / "thing.toml"
        spec.write_text('manager = "nosuch"\nkey = "k"\n[spec]\na = 1\n')
        applied = piwf(state_dir, "resource", "apply", "-f", str(spec), "--project", str(tmp_path))
        assert applied.returncode == 1, (applied.stdout, applied.stderr)
        [line] = applied.stderr.strip().splitlines()
        assert line.startswith("piwf: no resource manager 'nosuch': cannot read ")
    finally:
        host.stop()


# --- piwf watch on a pipe -------------------------------------------------------------------------


@pytest.fixture
def host(state_dir: Path) -> Iterator[HostHandle]:
    handle = start_host(HostConfig(state_dir=state_dir, max_workers=2))
    try:
        yield handle
    finally:
        handle.stop()


def test_watch_of_one_run_prints_a_line_per_change_when_not_on_a_terminal(host: HostHandle, state_dir: Path,
                                                                          project: Path, tmp_path: Path) -> None:
    trigger = tmp_path / "trigger"
    run_id = host.start_run(f"{project}/flows.py:gated", {"trigger": str(trigger)}).run_id
    watch = popen(state_dir, "watch", run_id)
    try:
        out = LineReader(watch.stdout)
        # Printed while the run still runs: not a display that shows up only at the end.
        out.until(lambda line: line.split()[1:] == [run_id, "gated", "running"])
        out.until(lambda line: "node wait started" in line)
        assert host.get_run(run_id).status == "running"  # type: ignore[union-attr]
        trigger.touch()
        assert watch.wait(30) == 0
        rest = out.rest()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(10)
    lines = [line.rstrip("\n") for line in out.lines]
    assert "node wait succeeded" in rest and "node after succeeded" in rest
    assert lines[-1].split()[1:] == [run_id, "gated", "done"], lines
    assert not any("\x1b" in line for line in lines)  # plain text, no cursor movement


def test_watch_of_all_runs_prints_a_line_per_run_change_when_not_on_a_terminal(
        host: HostHandle, state_dir: Path, project: Path, tmp_path: Path) -> None:
    watch = popen(state_dir, "watch")
    try:
        out = LineReader(watch.stdout)
        with Client(state_dir) as client:
            wait_until(lambda: client.request("host.status").receipt["gateway"]["watches"] >= 1, 30,
                       "the watch to subscribe")
        trigger = tmp_path / "trigger"
        run_id = host.start_run(f"{project}/flows.py:gated", {"trigger": str(trigger)}).run_id
        out.until(lambda line: line.split()[1:4] == [run_id, "gated", "running"])
        trigger.touch()
        out.until(lambda line: line.split()[1:4] == [run_id, "gated", "done"])
        watch.send_signal(signal.SIGINT)  # how one leaves a watch of every run
        assert watch.wait(30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(10)
    # One line per change of a run: the same status is not printed twice in a row.
    about = [line.split()[3] for line in out.lines if run_id in line]
    assert about == sorted(set(about), key=about.index), about


def test_watch_json_stays_one_view_per_line(host: HostHandle, state_dir: Path, project: Path,
                                            tmp_path: Path) -> None:
    trigger = tmp_path / "trigger"
    trigger.touch()
    run_id = host.start_run(f"{project}/flows.py:gated", {"trigger": str(trigger)}).run_id
    watched = piwf(state_dir, "watch", run_id, "--json")
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout.splitlines()[-1])["status"] == "done"

