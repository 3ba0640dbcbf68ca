"""Where the host keeps its state, and the permissions it insists on.

Default location: `$PIWF_STATE_DIR`, else `$XDG_STATE_HOME/piwf`, else
`~/.local/state/piwf`. The directory is 0700 and every file in it 0600: the
socket, the database and the lock grant control over the user's workflows.

The database is `<state-dir>/state.db` unless a database URL names another
(`--database`, `$PIWF_DATABASE_URL`): `sqlite:///abs/path.db` or a plain
path for another SQLite file, `postgresql://…` for a PostgreSQL database
that several hosts share (each engine reads its own URLs:
`store/engines/registry.py`). The socket and the lock stay in the state
directory either way: they belong to one host.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from piwf_actors.errors import UnsafePath
from piwf_actors.store.engines.base import DatabaseLocation
from piwf_actors.store.engines.registry import parse_database_url

#: The environment variable that names the database when `--database` does not.
DATABASE_URL_ENV = "PIWF_DATABASE_URL"

__all__ = ["DATABASE_URL_ENV", "DatabaseLocation", "StatePaths", "default_state_dir", "ensure_private_dir",
           "parse_database_url", "tighten_file"]


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("PIWF_STATE_DIR"):
        return Path(env["PIWF_STATE_DIR"]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "piwf"
    return Path.home() / ".local" / "state" / "piwf"


@dataclass(frozen=True, slots=True)
class StatePaths:
    root: Path
    #: None: `<root>/state.db`.
    database_override: DatabaseLocation | None = None

    @property
    def database(self) -> DatabaseLocation:
        return self.root / "state.db" if self.database_override is None else self.database_override

    @property
    def default_database(self) -> bool:
        """Whether the database is the state directory's own `state.db`."""
        return self.database_override is None

    @property
    def socket(self) -> Path:
        return self.root / "host.sock"

    @property
    def lock(self) -> Path:
        return self.root / "host.lock"

    @classmethod
    def resolve(cls, state_dir: str | os.PathLike[str] | None, database: str | None = None,
                environ: dict[str, str] | None = None) -> StatePaths:
        """The state directory's paths; `database` (else `$PIWF_DATABASE_URL`) names another database."""
        env = os.environ if environ is None else environ
        root = (Path(state_dir).expanduser() if state_dir else default_state_dir(env)).absolute()
        url = database if database is not None else env.get(DATABASE_URL_ENV) or None
        override = None if url is None else parse_database_url(url, relative_to=Path.cwd())
        if override == root / "state.db":
            override = None
        return cls(root, override)


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
