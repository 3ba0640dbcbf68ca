"""terminate_tree with real processes and real signals."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import psutil
import pytest

from piwf_actors.worker.termination import is_same_process, process_start_identity, terminate_tree


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached before the deadline")
        time.sleep(0.02)


def gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Spawner:
    """Starts test processes and kills whatever is left of them afterwards."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[bytes]] = []
        self.tracked: list[psutil.Process] = []

    def start(self, command: list[str], new_session: bool = True, **kwargs: object) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(command, start_new_session=new_session, **kwargs)  # type: ignore[call-overload]
        self.popens.append(process)
        self.tracked.append(psutil.Process(process.pid))
        return process

    def tree(self, process: subprocess.Popen[bytes], descendants: int) -> list[psutil.Process]:
        """The leader and its descendants once there are `descendants` of them."""
        leader = psutil.Process(process.pid)
        wait_for(lambda: len(leader.children(recursive=True)) >= descendants)
        members = [leader, *leader.children(recursive=True)]
        self.tracked.extend(members)
        return members

    def cleanup(self) -> None:
        for process in self.tracked:
            try:
                if process.is_running():
                    process.kill()
            except psutil.Error:
                pass
        for popen in self.popens:
            if popen.poll() is None:
                popen.kill()
            popen.wait(timeout=10)


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    spawned = Spawner()
    try:
        yield spawned
    finally:
        spawned.cleanup()


def test_identity() -> None:
    me = process_start_identity(os.getpid())
    assert me is not None
    assert is_same_process(os.getpid(), me)
    assert not is_same_process(os.getpid(), me - 50.0)
    assert not is_same_process(os.getpid(), None)
    assert process_start_identity(2**22 + 17) is None
    assert not is_same_process(2**22 + 17, me)


def test_terminates_group_and_grandchildren(spawner: Spawner, caplog: pytest.LogCaptureFixture) -> None:
    process = spawner.start(["sh", "-c", "sleep 30 & sleep 30"])
    members = spawner.tree(process, descendants=2)
    with caplog.at_level(logging.INFO, logger="piwf_actors.worker.termination"):
        assert terminate_tree(process.pid, process_start_identity(process.pid), grace_s=2.0) is True
    assert all(gone(member) for member in members)
    assert process.wait(timeout=5) == -signal.SIGTERM
    assert f"sent SIGTERM to process group {process.pid}" in caplog.text
    assert f"process tree of pid {process.pid} is gone" in caplog.text


def test_sigkill_after_grace(spawner: Spawner, caplog: pytest.LogCaptureFixture) -> None:
    # An ignored SIGTERM is inherited by the children, so only SIGKILL ends them.
    process = spawner.start(["sh", "-c", "trap '' TERM; sleep 30 & sleep 30"])
    members = spawner.tree(process, descendants=2)
    with caplog.at_level(logging.INFO, logger="piwf_actors.worker.termination"):
        assert terminate_tree(process.pid, process_start_identity(process.pid), grace_s=0.3) is True
    assert all(gone(member) for member in members)
    assert process.wait(timeout=5) == -signal.SIGKILL
    assert "sending SIGKILL" in caplog.text


def test_reused_pid_is_never_signalled(spawner: Spawner) -> None:
    process = spawner.start(["sleep", "30"])
    real = process_start_identity(process.pid)
    assert real is not None
    assert terminate_tree(process.pid, real - 100.0, grace_s=0.2) is True
    assert process.poll() is None  # untouched: the identity did not match


def test_missing_identity_signals_nothing(spawner: Spawner) -> None:
    process = spawner.start(["sleep", "30"])
    assert terminate_tree(process.pid, None, grace_s=0.2) is False
    assert process.poll() is None
    process.kill()
    process.wait(timeout=5)
    assert terminate_tree(process.pid, None) is True


def test_orphans_of_a_dead_leader_are_reaped(spawner: Spawner) -> None:
    process = spawner.start(["sh", "-c", "sleep 30 & read line; exit 0"], stdin=subprocess.PIPE)
    members = spawner.tree(process, descendants=1)
    identity = process_start_identity(process.pid)
    assert process.stdin is not None
    process.stdin.close()  # the leader exits; its background sleep stays in the group
    assert process.wait(timeout=5) == 0
    orphan = members[1]
    assert not gone(orphan)
    assert terminate_tree(process.pid, identity, grace_s=1.0) is True
    assert gone(orphan)


def test_child_in_callers_group_is_signalled_alone(spawner: Spawner) -> None:
    process = spawner.start(["sh", "-c", "sleep 30 & sleep 30"], new_session=False)
    members = spawner.tree(process, descendants=2)
    assert os.getpgid(process.pid) == os.getpgrp()
    assert terminate_tree(process.pid, process_start_identity(process.pid), grace_s=2.0) is True
    assert all(gone(member) for member in members)
    assert process.wait(timeout=5) == -signal.SIGTERM


def test_refuses_own_process() -> None:
    assert terminate_tree(os.getpid(), process_start_identity(os.getpid())) is False
    assert terminate_tree(0, 1.0) is False


def test_already_exited_tree(spawner: Spawner) -> None:
    process = spawner.start(["true"])
    identity = process_start_identity(process.pid)
    wait_for(lambda: gone(psutil.Process(process.pid)))  # a zombie: exited, not reaped
    assert terminate_tree(process.pid, identity) is True
    assert process.wait(timeout=5) == 0
