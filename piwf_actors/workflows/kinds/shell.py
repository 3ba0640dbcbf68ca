"""shell: a command in its own process group (worker/shell.py runs it); a side effect like action.

Its output is `{stdout, stderr, exit_code, duration_ms}`; a nonzero exit fails the node unless
`allow_nonzero_exit`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail
from piwf_actors.workflows.model import NodeSpec, freeze


@dataclass(frozen=True, kw_only=True, slots=True)
class ShellSpec(NodeSpec):
    """A command run by `piwf_actors.worker.shell.run_shell`.

    `command`, `cwd` and `env` may be callables of the node context. A string
    command with `shell=False` is split with `shlex.split`; a list command with
    `shell=True` is joined with `shlex.join` and run by `/bin/sh -c`.
    """

    kind: ClassVar[str] = "shell"
    has_side_effect: ClassVar[bool] = True
    command: Any  # tuple[str, ...] | str | Callback
    shell: bool = False
    cwd: Any = None  # str | Callback | None
    env: Any = None  # Mapping[str, str | None] | Callback | None
    allow_nonzero_exit: bool = False
    timeout_s: float | None = 900.0
    idempotent: bool = False


def shell(
    command: Any,
    shell: bool = False,
    cwd: Any = None,
    env: Any = None,
    timeout_s: float | None = 900,
    allow_nonzero_exit: bool = False,
    idempotent: bool = False,
    retries: int = 0,
    retry_backoff_s: float = 0.0,
    rate: Any = None,
) -> ShellSpec:
    """A command (list or string, or a callable of ctx returning one).

    Output `{stdout, stderr, exit_code, duration_ms}`; a nonzero exit fails the
    node unless `allow_nonzero_exit`. `env` is merged onto the worker's
    environment (a value of None removes the variable). `rate`: a named `rate_limiter` the command
    takes a start of before it runs (workflows/rate_limits.py).
    """
    return ShellSpec(
        command=command, shell=shell, cwd=cwd, env=env, timeout_s=timeout_s,
        allow_nonzero_exit=allow_nonzero_exit, idempotent=idempotent, retries=retries,
        retry_backoff_s=retry_backoff_s, rate=rate,
    )


def check(node_id: str, spec: ShellSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    command = spec.command
    if isinstance(command, (list, tuple)):
        if not command or not all(isinstance(part, str) for part in command):
            raise fail(node_id, "command must be a non-empty list of strings")
        command = tuple(command)
    elif isinstance(command, str):
        if not command.strip():
            raise fail(node_id, "command must not be empty")
    elif not callable(command):
        raise fail(node_id, f"command must be a list, a string or a callable of ctx, got {type(command).__name__}")
    if not isinstance(spec.shell, bool) or not isinstance(spec.allow_nonzero_exit, bool):
        raise fail(node_id, "shell and allow_nonzero_exit must be true or false")
    if spec.cwd is not None and not isinstance(spec.cwd, str) and not callable(spec.cwd):
        raise fail(node_id, f"cwd must be a string or a callable of ctx, got {type(spec.cwd).__name__}")
    env = spec.env
    if isinstance(env, Mapping):
        for key, value in env.items():
            if not isinstance(key, str) or not key or "=" in key or not (value is None or isinstance(value, str)):
                raise fail(node_id, f"env entry {key!r} must map a variable name to a string or None")
        env = freeze(env)
    elif env is not None and not callable(env):
        raise fail(node_id, f"env must be a mapping or a callable of ctx, got {type(env).__name__}")
    return changes | {"command": command, "env": env}


def describe(spec: ShellSpec) -> list[str]:
    """The command as a shell would read it; one computed from the run as `(command computed)`."""
    if callable(spec.command):
        return ["(command computed)"]
    if isinstance(spec.command, str):
        return [spec.command]
    return [shlex.join(spec.command)]


KIND = NodeKind(spec=ShellSpec, check=check, describe=describe, drawing=Drawing(('[/"', '"/]'), "parallelogram"))
