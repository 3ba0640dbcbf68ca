"""`shell(...)` in a durable function on real hosts: the command runs as a graph `shell` node runs it
(its output recorded and replayed, a failure raised as StepFailed carrying stderr, its timeout, the
effect ledger and orphan reaping when its worker is SIGKILLed). The flows are in
wf/shell_function_flows.py; each command appends a line to an oracle file outside the database, so a
test counts what actually ran."""

from __future__ import annotations

import collections
import os
import signal
from pathlib import Path

import psutil
import pytest
from testsupport import both_engines
from wf import harness
from wf import shell_function_flows as flows
from wf.harness import SETTLED, active_worker, alive, rows, wait_for, wait_for_status

from piwf_actors.testing.kit import Piwf

guard = harness.guard


def executions(oracle: Path) -> collections.Counter[str]:
    return collections.Counter(oracle.read_text(encoding="utf-8").splitlines() if oracle.exists() else [])


@pytest.fixture
def oracle(tmp_path: Path) -> Path:
    return tmp_path / "oracle"


def _gone(pidfile: Path) -> bool:
    """Whether the process whose pid the command wrote has ended (a zombie counts as ended)."""
    pid = int(pidfile.read_text())
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@both_engines
def test_a_shell_call_returns_its_output_recorded_and_replayed_without_running_again(piwf: Piwf,
                                                                                     oracle: Path) -> None:
    run = piwf.start(flows.shell_ok, {"oracle": str(oracle)})
    piwf.wait_parked(run, "waiting")
    piwf.skip(31)
    view = piwf.wait(run)
    assert view.status == "done", piwf.describe(run)
    built = view.output["built"]
    assert (built["stdout"], built["stderr"], built["exit_code"]) == ("built\n", "a warning\n", 0)
    assert isinstance(built["duration_ms"], int) and view.output["greet"] == "hi"
    assert executions(oracle) == {"build": 1, "second": 1}, "a recorded command ran again on replay"
    nodes = {node.node_id: node for node in view.nodes}
    assert list(nodes) == ["shell", "sleep", "greet", "return"]
    assert nodes["shell"].output == built
    # A command is a side effect: each call has its effect, reserved and applied.
    assert [(effect.node_id, effect.status) for effect in view.effects] == [("shell", "applied"), ("greet", "applied")]


@both_engines
def test_a_failing_command_raises_step_failed_with_its_stderr_and_the_replay_raises_it_again(
        piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.shell_caught, {"oracle": str(oracle)})
    piwf.wait_parked(run, "waiting")
    piwf.skip(31)
    view = piwf.wait(run)
    # The function read the failure in the launch after the sleep, where it was replayed: output and all.
    assert view.status == "done", piwf.describe(run)
    assert view.output == {"code": "node_error", "message": "command exited with code 3", "step": "check",
                           "stderr": "disk full\n", "exit_code": 3}
    assert executions(oracle) == {"check": 1}
    nodes = {node.node_id: node for node in view.nodes}
    assert nodes["check"].status == "failed" and nodes["check"].output["stderr"] == "disk full\n"


def test_a_failing_command_the_function_lets_through_fails_the_run_with_its_code(piwf: Piwf,
                                                                                oracle: Path) -> None:
    view = piwf.wait(piwf.start(flows.shell_uncaught, {"oracle": str(oracle)}))
    assert view.status == "failed" and view.error is not None
    assert (view.error.code, view.error.message) == ("node_error",
                                                     "step 'uncaught' failed: command exited with code 1")
    assert {node.node_id: node.output["stderr"] for node in view.nodes if node.node_id != "return"} == {
        "uncaught": "no luck\n"}
    assert executions(oracle) == {"uncaught": 1}


def test_an_idempotent_command_past_its_timeout_is_killed_and_raises_step_failed_timeout(
        piwf: Piwf, oracle: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    run = piwf.start(flows.shell_times_out, {"oracle": str(oracle), "pidfile": str(pidfile), "idempotent": True})
    view = piwf.wait(run)
    assert view.status == "done", piwf.describe(run)
    assert view.output["code"] == "timeout" and view.output["message"] == "command timed out after 1s"
    assert view.output["exit_code"] is not None and view.output["exit_code"] < 0  # ended by a signal
    assert _gone(pidfile), "the timed-out command is still running"
    assert executions(oracle) == {"slow": 1}


def test_a_command_that_is_not_idempotent_cut_off_by_its_timeout_parks_the_run_ambiguous(
        piwf: Piwf, oracle: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    run = piwf.start(flows.shell_times_out, {"oracle": str(oracle), "pidfile": str(pidfile), "idempotent": False})
    view = piwf.wait_parked(run, "ambiguous_effect")
    assert [(effect.node_id, effect.status) for effect in view.effects] == [("shell", "ambiguous")]
    assert _gone(pidfile)
    assert executions(oracle) == {"slow": 1}


def _start_blocking(guard, state_dir: Path, oracle: Path, flag: Path, pidfile: Path, idempotent: bool):
    """A host and a run whose command blocks on `flag`; once the command is registered for reaping,
    SIGKILL the worker. Returns (host, run_id)."""
    host = guard.start_host(state_dir, max_workers=1)
    run_id = host.start_run(f"{flows.__file__}:shell_blocks",
                            {"oracle": str(oracle), "flag": str(flag), "idempotent": idempotent})["receipt"]["run_id"]
    wait_for(lambda: executions(oracle)["blocking"] == 1, 15, "the command to start")
    # The command is registered for orphan reaping before it can do anything lasting.
    [registered] = wait_for(lambda: rows(state_dir, "SELECT pid FROM child_process WHERE run_id = ? AND kind = 'shell' "
                                                    "AND released_at IS NULL", (run_id,)), 5, "the command's registration")
    pid = int(registered["pid"])
    pidfile.write_text(str(pid))
    guard.track(pid)
    worker = guard.track(active_worker(host, run_id))
    os.kill(worker.pid, signal.SIGKILL)
    wait_for(lambda: not alive(worker), 5, "the worker to die")
    return host, run_id


@both_engines
def test_a_command_cut_off_by_a_sigkilled_worker_parks_ambiguous_and_its_orphan_is_reaped(
        guard, state_dir: Path, oracle: Path, tmp_path: Path) -> None:
    flag, pidfile = tmp_path / "block", tmp_path / "pid"
    flag.write_text("block")
    host, run_id = _start_blocking(guard, state_dir, oracle, flag, pidfile, idempotent=False)
    view = wait_for_status(host, run_id, SETTLED, timeout=30)
    assert (view["status"], view["park_reason"]) == ("parked", "ambiguous_effect"), view
    assert [(e["node_id"], e["status"]) for e in view["effects"]] == [("first", "applied"), ("blocking", "ambiguous")]
    wait_for(lambda: _gone(pidfile), 10, "the orphaned command to be terminated")
    assert executions(oracle) == {"first": 1, "blocking": 1}, "the cut-off command ran again"
    flag.unlink()
    host.resolve_effect(view["park_detail"], "retry")  # a person says: run it again
    done = wait_for_status(host, run_id, ("done", "failed"), timeout=30)
    assert done["output"] == {"stdout": "finished\n"}, done
    assert executions(oracle) == {"first": 1, "blocking": 2}


def test_an_idempotent_command_cut_off_by_a_sigkilled_worker_runs_again_without_parking(
        guard, state_dir: Path, oracle: Path, tmp_path: Path) -> None:
    flag, pidfile = tmp_path / "block", tmp_path / "pid"
    flag.write_text("block")
    host, run_id = _start_blocking(guard, state_dir, oracle, flag, pidfile, idempotent=True)
    wait_for(lambda: executions(oracle)["blocking"] == 2, 30,
             lambda: f"the command to run again: {host.get_run(run_id)} {[(e['kind'], e['node_id'], e['payload']) for e in host.run_events(run_id)]}")
    assert _gone(pidfile), "the first command was not reaped before the second ran"
    flag.unlink()
    done = wait_for_status(host, run_id, ("done", "failed", "parked"), timeout=30)
    assert (done["status"], done["output"]) == ("done", {"stdout": "finished\n"}), done
    assert [(e["node_id"], e["status"]) for e in done["effects"]] == [
        ("first", "applied"), ("blocking", "failed"), ("blocking", "applied")]
