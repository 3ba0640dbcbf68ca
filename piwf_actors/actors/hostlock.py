"""The lock file that makes one state directory belong to one live host.

The file is opened with O_NOFOLLOW (a planted symlink cannot redirect it)
and held with flock for the host's whole life. The kernel drops the lock
when the holder dies, even by SIGKILL, so a stale file never blocks a new
host; its contents (pid and process start time) only serve to name the
live holder in the error a second host prints, and to tell a dead holder
(gone, or a zombie nobody reaped yet) from a live one (`holder_alive`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from piwf_actors.errors import HostAlreadyRunning, UnsafePath
from piwf_actors.worker.termination import process_start_identity as process_create_time


def process_start_identity(pid: int) -> str:
    """A string that names one process for its whole life: its start time (psutil create_time)."""
    create_time = process_create_time(pid)
    if create_time is None:
        raise psutil.NoSuchProcess(pid)
    return repr(create_time)


def holder_alive(pid: int | None, identity: str | None) -> bool:
    """True when a process with this pid AND this start identity is running.

    A zombie (exited, not yet reaped by its parent) is dead: it holds no lock
    and does no work, though psutil still reports its start time. Under a
    container's PID 1 that reaps lazily a SIGKILLed host stays one for a
    while, and the next host must not wait for the reaping.
    """
    if pid is None or identity is None:
        return False
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return (repr(float(process.create_time())) == identity
                    and process.status() != psutil.STATUS_ZOMBIE)
    except (psutil.Error, ValueError):
        return False


@dataclass
class HostLock:
    path: Path
    fd: int

    @classmethod
    def acquire(cls, path: Path, state_dir: str) -> HostLock:
        """Take the lock or raise HostAlreadyRunning naming the holder's pid."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(str(path), "lock file is a symbolic link") from exc
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise HostAlreadyRunning(state_dir, holder) from None
        os.fchmod(fd, 0o600)
        pid = os.getpid()
        record = json.dumps({"pid": pid, "process_start_identity": process_start_identity(pid)}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        return cls(path, fd)

    def release(self) -> None:
        """Clear the holder record and drop the lock (idempotent).

        The file is left in place: unlinking it could let a waiter lock an
        inode that a third process then no longer sees.
        """
        if self.fd < 0:
            return
        try:
            os.ftruncate(self.fd, 0)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _read_holder(fd: int) -> int | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        pid = data.get("pid")
        return pid if isinstance(pid, int) else None
    except (ValueError, OSError):
        return None
