"""Reading the files that decide who may answer decisions, and hold the bot tokens, safely.

The same demands ssh makes of `~/.ssh` (StrictModes): a file or directory that
someone else may write to could be swapped for theirs, and a token file that
someone else may read gives the bot away. Everything is checked on open
descriptors (fstat), so the file checked is the file read, and the files are
opened relative to the directory's descriptor, so the directory checked is
the directory read from.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
from pathlib import Path

MAX_FILE_BYTES = 1 << 20  # both files are a few lines; a bigger one is a mistake, not config


class Refused(Exception):
    """A file or directory exists but is not used; the message is the one-line reason."""


def check_directory(directory: Path, dir_fd: int, uid: int) -> str | None:
    """The one-line reason the open config directory is unsafe, or None.

    Like `channels.toml`: owned by `uid` or root, not writable by group or
    others (sticky bit or not).
    """
    try:
        info = os.fstat(dir_fd)
    except OSError as exc:
        return f"config directory {directory} cannot be checked: {exc.strerror or exc.__class__.__name__}"
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return f"config directory {directory} is not a directory"
    if info.st_uid not in (uid, 0):
        return f"config directory {directory} is owned by uid {info.st_uid}, not the host's uid {uid} or root"
    if mode & 0o022:
        return (
            f"config directory {directory} is writable by group or others (mode {mode:04o}); "
            f"run chmod go-w {shlex.quote(str(directory))}"
        )
    return None


def read_private(dir_fd: int, name: str, *, uid: int, follow_symlinks: bool, secret: bool) -> str:
    """Open, check and read the file `name` in the directory open as `dir_fd`.

    FileNotFoundError when absent, `Refused` otherwise. The checks run on the open descriptor (fstat), so the file checked is the
    file read. O_NONBLOCK keeps a FIFO planted under the name from blocking the
    open; it does not change reads of a regular file. `secret` files must be
    private (mode & 0o077 == 0) and owned by `uid`; settings files must not be
    writable by group or others and be owned by `uid` or root.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if not follow_symlinks and exc.errno in (errno.ELOOP, errno.EMLINK) and _is_symlink(dir_fd, name):
            raise Refused(f"{name} is a symbolic link; replace it with the file itself (mode 600)") from None
        raise Refused(f"{name} cannot be opened: {exc.strerror or exc.__class__.__name__}") from None
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{name} is not a regular file")
        if secret:
            if info.st_uid != uid:
                raise Refused(f"{name} is owned by uid {info.st_uid}, not the host's uid {uid}")
            if mode & 0o077:
                kind = "readable" if mode & 0o044 else "accessible"
                raise Refused(f"{name} is {kind} by group or others (mode {mode:04o}); run chmod 600 on it")
        else:
            if info.st_uid not in (uid, 0):
                raise Refused(f"{name} is owned by uid {info.st_uid}, not the host's uid {uid} or root")
            if mode & 0o022:
                raise Refused(
                    f"{name} is writable by group or others (mode {mode:04o}) and decides who may answer; "
                    f"run chmod go-w on it"
                )
        if info.st_size > MAX_FILE_BYTES:
            raise Refused(f"{name} is larger than {MAX_FILE_BYTES} bytes")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_FILE_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_FILE_BYTES:
            raise Refused(f"{name} is larger than {MAX_FILE_BYTES} bytes")
    except OSError as exc:
        raise Refused(f"{name} cannot be read: {exc.strerror or exc.__class__.__name__}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        # The decode error's message quotes bytes of the file; say only that it is not UTF-8.
        raise Refused(f"{name} is not valid UTF-8") from None


def _is_symlink(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False
