"""Signed webhooks' declarations: `hooks.toml` in the state directory, and each hook's secret file.

A hook is declared in the state directory's `hooks.toml` (docs/http.md,
"Webhooks"), one table per hook, read once when the HTTP door starts:

    [github-push]
    workflow = "examples/http/on_push.py:on_push"  # start a run; the body is its input
    secret_file = "github-push.secret"             # in the state directory, chmod 600

    [approvals]
    topic = "approval"          # send the body as a message on this topic …
    run_field = "run_id"        # … to the run named by this field of the body
    secret_file = "approvals.secret"
    signature = "stripe"        # Stripe-Signature: t=…,v1=… (default "github": X-Hub-Signature-256)

Why a file and not an attribute of a workflow file: the door must know its
hooks without running workflow code (which runs only on the gateway's
user-code threads, docs/security.md), and a hook's secret belongs beside the
state, not in a project's source. A hook that starts a run hands the body to
the workflow as its input; the workflow maps it (no user code on the door).

The files are read as the Telegram credentials are (channels/private_files.py):
`hooks.toml` must not be writable by group or others, a secret file must be
the host account's own and readable by nobody else (0600), neither may be a
symbolic link, and every check runs on the open descriptor. A secret is held
as a `Secret` (prints `****`). Any problem is one line (`HookConfigError`),
and the door refuses to start with it. Runs on the door's actor thread.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piwf_actors.channels.config import Secret
from piwf_actors.channels.private_files import Refused, check_directory, read_private
from piwf_actors.protocol.envelope import MAX_ID_LEN

#: Where the door serves the hooks of this file (kept here, beside their configuration, so that the
#: OpenAPI description names it without importing Starlette).
HOOK_PATH = "/hooks/{name}"

HOOKS_FILE = "hooks.toml"
#: A hook's name is a path segment of `/hooks/NAME`, and part of the client id its requests carry.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: Signature conventions: header, value prefix (github) and where the delivery id is by default.
SCHEMES = ("github", "stripe")
SCHEME_DEFAULTS: dict[str, dict[str, Any]] = {
    "github": {"signature_header": "X-Hub-Signature-256", "signature_prefix": "sha256=",
               "delivery_header": "X-GitHub-Delivery", "delivery_field": None},
    "stripe": {"signature_header": "Stripe-Signature", "signature_prefix": "",
               "delivery_header": None, "delivery_field": "id"},
}
DEFAULT_TOLERANCE_S = 300.0
_KEYS = {"workflow", "project_path", "topic", "run_field", "secret_file", "signature", "signature_header",
         "signature_prefix", "delivery_header", "delivery_field", "tolerance_s"}


class HookConfigError(ValueError):
    """hooks.toml or a secret file cannot be used: the one-line reason (never a secret's text)."""


@dataclass(frozen=True, slots=True)
class Hook:
    """One declared hook. Exactly one form: `workflow` (start a run with the body as input) or
    `topic` + `run_field` (send the body as a message to the run named by that field)."""

    name: str
    secret: Secret
    workflow: str | None = None
    project_path: str | None = None
    topic: str | None = None
    run_field: str | None = None
    signature: str = "github"
    signature_header: str = "X-Hub-Signature-256"
    signature_prefix: str = "sha256="
    delivery_header: str | None = "X-GitHub-Delivery"
    delivery_field: str | None = None
    tolerance_s: float = DEFAULT_TOLERANCE_S

    @property
    def client_id(self) -> str:
        """The client id of the hook's requests: its deliveries' idempotency records are kept under it."""
        return f"hook-{self.name}"


def load_hooks(state_dir: Path, uid: int | None = None) -> dict[str, Hook]:
    """The hooks of `state_dir/hooks.toml` by name ({} when there is no such file); HookConfigError."""
    uid = os.getuid() if uid is None else uid
    try:
        raw = _read(state_dir / HOOKS_FILE, uid, secret=False)
    except FileNotFoundError:
        return {}
    try:
        document = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise HookConfigError(f"{state_dir / HOOKS_FILE}: not TOML: {exc}") from None
    hooks = {}
    for name, table in document.items():
        where = f"{HOOKS_FILE} [{name}]"
        if not isinstance(table, dict):
            raise HookConfigError(f"{HOOKS_FILE}: {name} is not a table: declare each hook as [NAME]")
        if not _NAME.fullmatch(name):
            raise HookConfigError(f"{where}: a hook's name is 1-64 of a-z, 0-9, _ and -, starting with a letter "
                                  f"or digit")
        hooks[name] = _hook(name, table, where, state_dir, uid)
    return hooks


def _hook(name: str, table: dict[str, Any], where: str, state_dir: Path, uid: int) -> Hook:
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise HookConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS))})")
    for key, value in table.items():
        if key == "tolerance_s":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
                raise HookConfigError(f"{where}: tolerance_s is a number of seconds from 0 to 86400")
        elif not isinstance(value, str) or not value.strip():
            raise HookConfigError(f"{where}: {key} must be a non-empty string")
    signature = table.get("signature", "github")
    if signature not in SCHEMES:
        raise HookConfigError(f"{where}: signature must be one of {', '.join(SCHEMES)}, got {signature!r}")
    starts, sends = "workflow" in table, "topic" in table or "run_field" in table
    if starts == sends or (sends and not ("topic" in table and "run_field" in table)):
        raise HookConfigError(f"{where}: declare either workflow (start a run) or topic and run_field (send a "
                              f"message to the run named by that field of the body)")
    if sends and "project_path" in table:
        raise HookConfigError(f"{where}: project_path goes with workflow")
    if "secret_file" not in table:
        raise HookConfigError(f"{where}: secret_file is missing (a file in the state directory, chmod 600, "
                              f"holding the shared secret)")
    secret_path = Path(table["secret_file"]).expanduser()
    if not secret_path.is_absolute():
        secret_path = state_dir / secret_path
    try:
        secret = _read(secret_path, uid, secret=True).strip()
    except FileNotFoundError:
        raise HookConfigError(f"{where}: secret file {secret_path} does not exist") from None
    except HookConfigError as err:
        raise HookConfigError(f"{where}: {err}") from None
    if not secret:
        raise HookConfigError(f"{where}: secret file {secret_path} is empty")
    settings = {**SCHEME_DEFAULTS[signature], **{key: table[key] for key in SCHEME_DEFAULTS[signature] if key in table}}
    if "delivery_header" in table and "delivery_field" not in table:
        settings["delivery_field"] = None  # one place for the delivery id: the one named
    elif "delivery_field" in table and "delivery_header" not in table:
        settings["delivery_header"] = None
    if "run_field" in table and len(table["run_field"]) > MAX_ID_LEN:
        raise HookConfigError(f"{where}: run_field is over {MAX_ID_LEN} characters")
    return Hook(name, Secret(secret), workflow=table.get("workflow"), project_path=table.get("project_path"),
                topic=table.get("topic"), run_field=table.get("run_field"), signature=signature,
                tolerance_s=float(table.get("tolerance_s", DEFAULT_TOLERANCE_S)), **settings)


def _read(path: Path, uid: int, *, secret: bool) -> str:
    """The text of `path`, checked on open descriptors (FileNotFoundError when absent; HookConfigError)."""
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise HookConfigError(f"{path.parent} cannot be opened: {exc.strerror or type(exc).__name__}") from None
    try:
        problem = check_directory(path.parent, dir_fd, uid)
        if problem is not None:
            raise HookConfigError(problem)
        return read_private(dir_fd, path.name, uid=uid, follow_symlinks=False, secret=secret)
    except Refused as refused:
        raise HookConfigError(f"{path.parent}/{refused}" if str(refused).startswith(path.name)
                              else str(refused)) from None
    finally:
        os.close(dir_fd)
