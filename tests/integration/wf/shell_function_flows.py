"""Function workflows whose durable calls are `shell(...)` commands (tests/integration/test_function_shell.py).
Every command appends a line to an oracle file outside the database each time it runs, so a test counts
what actually ran."""

from __future__ import annotations

from typing import Any

from piwf_actors.durable import StepFailed, shell, sleep, workflow


def logged(oracle: str, line: str, then: str = "") -> list[str]:
    """A command that appends `line` to the oracle, then runs `then` (sh)."""
    return ["sh", "-c", f'echo "{line}" >> "$0"; {then}', oracle]


@workflow(name="shell-ok")
def shell_ok(oracle: str) -> dict[str, Any]:
    built = shell(logged(oracle, "build", "echo built; echo 'a warning' >&2"))
    sleep(30)  # the return below is computed in the next launch: the shell call is replayed there
    again = shell(logged(oracle, "second", "printf '%s' \"$GREETING\""), env={"GREETING": "hi"}, name="greet")
    return {"built": built, "greet": again["stdout"]}


@workflow(name="shell-caught")
def shell_caught(oracle: str) -> dict[str, Any]:
    try:
        shell(logged(oracle, "check", "echo 'disk full' >&2; exit 3"), name="check")
        failure = None
    except StepFailed as failed:
        failure = failed
    sleep(30)  # what follows runs in the next launch, where the failure is replayed
    assert failure is not None
    return {"code": failure.code, "message": failure.message, "step": failure.step,
            "stderr": failure.output["stderr"], "exit_code": failure.output["exit_code"]}


@workflow(name="shell-uncaught")
def shell_uncaught(oracle: str) -> None:
    shell(logged(oracle, "uncaught", "echo 'no luck' >&2; exit 1"), name="uncaught")


@workflow(name="shell-times-out")
def shell_times_out(oracle: str, pidfile: str, idempotent: bool) -> dict[str, Any]:
    try:
        shell(logged(oracle, "slow", f'echo $$ > "{pidfile}"; exec sleep 60'), timeout_s=1, idempotent=idempotent)
    except StepFailed as failure:
        return {"code": failure.code, "message": failure.message, "exit_code": failure.output["exit_code"]}
    return {"code": None}


@workflow(name="shell-blocks")
def shell_blocks(oracle: str, flag: str, idempotent: bool) -> dict[str, Any]:
    """Its second command runs until `flag` is removed (a test kills the worker meanwhile); the first is
    the run's committed progress (a worker that dies before any parks its run `no_progress`)."""
    shell(logged(oracle, "first"), name="first")
    done = shell(logged(oracle, "blocking", f'while [ -e "{flag}" ]; do sleep 0.05; done; echo finished'),
                 idempotent=idempotent, name="blocking")
    return {"stdout": done["stdout"]}
