"""Where the host keeps its state, and the permissions it insists on.

Default location: `$PIWF_STATE_DIR`, else `$XDG_STATE_HOME/piwf`, else
`~/.local/state/piwf`. The directory is 0700 and every file in it 0600: the
socket, the database and the lock grant control over the user's workflows.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from piwf_actors.errors import UnsafePath


def default_state_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("PIWF_STATE_DIR"):
        return Path(env["PIWF_STATE_DIR"]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "piwf"
    return Path.home() / ".local" / "state" / "piwf"


@dataclass(frozen=True, slots=True)
class StatePaths:
    root: Path

    @property
    def database(self) -> Path:
        return self.root / "state.db"

    @property
    def socket(self) -> Path:
        return self.root / "host.sock"

    @property
    def lock(self) -> Path:
        return self.root / "host.lock"

    @classmethod
    def resolve(cls, state_dir: str | os.PathLike[str] | None) -> StatePaths:
        root = Path(state_dir).expanduser() if state_dir else default_state_dir()
        return cls(root.absolute())


def ensure_private_dir(path: Path) -> None:
    """Create `path` 0700 (parents as needed) or check that an existing one is safe.

    An existing directory must be a real directory (not a symlink) owned by
    us; a looser mode is tightened to 0700 because the socket and database
    inside it grant control over the user's workflows.
    """
    if not path.exists() and not path.is_symlink():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(str(path), "state directory is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePath(str(path), "state directory is not a directory")
    if info.st_uid != os.getuid():
        raise UnsafePath(str(path), f"owned by uid {info.st_uid}, not {os.getuid()}")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)


def tighten_file(path: Path) -> None:
    """Make an existing regular file 0600 (no-op when it does not exist)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) != 0o600:
        os.chmod(path, 0o600)
