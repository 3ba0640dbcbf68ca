"""Terminate a process tree without ever signalling a reused pid.

A process is identified by `(pid, create_time)` (psutil's start time). The
one termination function is `terminate_tree`; everything that kills a worker
or a shell command goes through it, so identity checks and logging happen in
one place.

Why identity is enough: Linux does not hand out a pid again while any
process still uses it as its process-group id, so while members of a
leader's group are alive, that group id still means the same group. A
zombie (exited, not yet reaped) leader keeps its pid too; callers that
terminate their own child should reap it only after `terminate_tree`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)

# psutil derives create_time from clock ticks since boot; two values for the
# same process agree exactly, a JSON/msgpack round trip may not, so allow a
# little slack (far below the time it takes to cycle through all pids).
_IDENTITY_TOLERANCE_S = 0.01
_POLL_S = 0.05
_KILL_CONFIRM_S = 3.0


def process_start_identity(pid: int) -> float | None:
    """The start time psutil reports for `pid`, or None if there is no such process."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, ValueError):
        return None


def machine_identity() -> str:
    """The machine this process runs on, for the whole of its boot: `<hostname>/<boot id>`.

    A pid and a start time name a process only on the machine that saw them,
    so every registered child records this too, and a host signals only the
    children registered on its own machine. The kernel's boot id changes at
    every boot (a pid from before a reboot means nothing either); where there
    is none (not Linux), the boot time stands in for it.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot or f'boot-{psutil.boot_time():.0f}'}"


def is_same_process(pid: int, create_time: float | None) -> bool:
    """True if `pid` is still the process that started at `create_time`.

    A zombie counts as the same process (it still holds the pid); a None
    identity never matches.
    """
    if create_time is None:
        return False
    current = process_start_identity(pid)
    return current is not None and abs(current - create_time) <= _IDENTITY_TOLERANCE_S


def _alive(process: psutil.Process) -> bool:
    """Running and not a zombie; `is_running` also checks the start time, so a
    reused pid reads as dead."""
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _group_members(group_id: int, not_before: float) -> list[psutil.Process]:
    """Processes whose process group is `group_id` and that started after the leader."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group_id and process.create_time() >= not_before - _IDENTITY_TOLERANCE_S:
                members.append(process)
        except (OSError, psutil.Error):
            continue
    return members


def _collect(pid: int, create_time: float, leader: psutil.Process | None) -> dict[int, psutil.Process]:
    """The tree: the leader, its descendants, and members of its process group."""
    found: dict[int, psutil.Process] = {}
    if leader is not None:
        found[pid] = leader
        try:
            for child in leader.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            pass
    # The group outlives its leader: orphans reparented to init stay in it.
    for member in _group_members(pid, create_time):
        found.setdefault(member.pid, member)
    found.pop(os.getpid(), None)
    return found


def _signal_all(
    pid: int, group_id: int | None, processes: dict[int, psutil.Process], signum: int,
    log: logging.Logger,
) -> None:
    name = signal.Signals(signum).name
    if group_id is not None:
        try:
            os.killpg(group_id, signum)
            log.info("sent %s to process group %d", name, group_id)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            log.warning("cannot signal process group %d: %s", group_id, exc)
    for process in processes.values():
        if group_id is not None and process.pid != pid and _pgid(process.pid) == group_id:
            continue  # already reached through killpg
        if group_id is not None and process.pid == pid:
            continue
        try:
            # psutil refuses to signal a process whose start time changed (pid reuse).
            process.send_signal(signum)
            log.info("sent %s to pid %d", name, process.pid)
        except psutil.NoSuchProcess:
            pass
        except psutil.Error as exc:
            log.warning("cannot signal pid %d: %s", process.pid, exc)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _wait_gone(processes: dict[int, psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Poll until every process is dead (zombies count as dead); returns survivors."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in processes.values() if _alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))


def terminate_tree(
    pid: int, create_time: float | None, grace_s: float = 3.0, log: logging.Logger = logger
) -> bool:
    """Stop the process `(pid, create_time)` and everything it started.

    Steps, each logged: verify identity (a pid that now belongs to another
    process is never signalled); SIGTERM the process group (when `pid` leads
    its own group) and every known descendant; wait up to `grace_s`; SIGKILL
    the group and survivors; confirm with psutil. If the leader is already
    gone, members of its old group that started after it are still
    terminated (orphan reaping).

    Returns True when nothing of the tree is alive afterwards (zombies count
    as dead). With `create_time=None` identity cannot be checked, so nothing
    is signalled and the result is True only if no process has that pid.
    Never signals the calling process or its process group.
    """
    if pid <= 0 or pid == os.getpid():
        log.error("refusing to terminate pid %d (not a child process id)", pid)
        return False
    if create_time is None:
        if psutil.pid_exists(pid):
            log.warning("not signalling pid %d: no start identity to verify it", pid)
            return False
        return True
    leader: psutil.Process | None = None
    if is_same_process(pid, create_time):
        leader = psutil.Process(pid)
    elif psutil.pid_exists(pid):
        # The pid belongs to another process now, so the old group is gone too
        # (the kernel would not reuse a pid still serving as a group id).
        log.info("pid %d was reused by another process; the original tree is gone", pid)
        return True
    leads_group = leader is not None and _pgid(pid) == pid and pid != os.getpgrp()
    group_id = pid if leads_group else None
    tree = _collect(pid, create_time, leader)
    if not any(_alive(p) for p in tree.values()):
        log.info("process tree of pid %d is already gone", pid)
        return True
    log.info("terminating process tree of pid %d (%d processes)", pid, len(tree))
    _signal_all(pid, group_id, tree, signal.SIGTERM, log)
    _wait_gone(tree, grace_s)
    # Processes may have forked while we waited; look again before killing.
    tree.update(_collect(pid, create_time, leader if leader is not None and _alive(leader) else None))
    survivors = [p for p in tree.values() if _alive(p)]
    if survivors:
        log.warning(
            "process tree of pid %d survived SIGTERM for %.1fs (%d left); sending SIGKILL",
            pid, grace_s, len(survivors),
        )
        group_still_ours = group_id is not None and is_same_process(pid, create_time)
        _signal_all(pid, group_id if group_still_ours else None, {p.pid: p for p in survivors}, signal.SIGKILL, log)
    left = _wait_gone(tree, _KILL_CONFIRM_S)
    if left:
        log.error("process tree of pid %d still has live processes: %s", pid, [p.pid for p in left])
        return False
    log.info("process tree of pid %d is gone", pid)
    return True
