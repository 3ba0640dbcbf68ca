"""`shell(...)`: a command run as one durable call of a workflow function — a graph `shell` node's
twin.

The call builds the `ShellSpec` a `shell(...)` node would have and hands it to the run's replay
(durable/replay.py), so the command runs exactly as the node runs it (worker/executors/shell.py,
worker/shell.py): in its own process group, its output streamed to `piwf logs -f` and capped at
1 MiB a stream, its processes registered for orphan reaping, killed as a tree at `timeout_s`, and
its effect reserved in the ledger first — a command is a side effect: cut off by a crash, the
watchdog or its timeout it parks the run `ambiguous_effect` unless `idempotent=True`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from piwf_actors.durable.replay import checked_name, current_replay
from piwf_actors.workflows.kinds.shell import ShellSpec
from piwf_actors.workflows.validation import checked_node


def shell(command: str | Sequence[str], *, name: str = "shell", shell: bool = False,
          cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str | None] | None = None,
          timeout_s: float | None = 900, allow_nonzero_exit: bool = False, idempotent: bool = False,
          retries: int = 0, retry_backoff_s: float = 0.0) -> dict[str, Any]:
    """Run `command` (a list of words, or a string split as a shell would; `shell=True`: run by
    `/bin/sh -c`) and return its output `{stdout, stderr, exit_code, duration_ms}` — recorded, so a
    replay returns it without running the command again.

    A nonzero exit (unless `allow_nonzero_exit`), a command that cannot start or its timeout raise
    `StepFailed` after `retries`; its `.output` holds what the command printed (`.output["stderr"]`).
    `env` is merged onto the worker's environment (None removes a variable); `name` is the call's id.
    """
    if callable(command) or callable(cwd) or callable(env):
        raise TypeError("shell(): command, cwd and env are values here (compute them in the function), "
                        "not callables of a node context")
    if cwd is not None:
        cwd = os.fspath(cwd)
    spec = ShellSpec(command=tuple(command) if isinstance(command, (list, tuple)) else command, shell=shell,
                     cwd=cwd, env=env, timeout_s=timeout_s, allow_nonzero_exit=allow_nonzero_exit,
                     idempotent=idempotent, retries=retries, retry_backoff_s=retry_backoff_s)
    replay = current_replay("shell()")
    output: dict[str, Any] = replay.call(name, checked_node(checked_name(name, "shell"), spec))
    return output
