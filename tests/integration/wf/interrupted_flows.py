"""Workflows for the interrupted-effect tests: side effects cut off by a timeout.

Every node records itself in the oracle file (`ctx.input["oracle"]`) before it does anything
else, so the oracle counts executions whatever the database says. A node blocks only while
`ctx.input["block_flag"]` names a file that exists: removing the file lets a retry finish.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from recovery_flows import record  # a sibling: the file's directory is on sys.path while it loads

from piwf_actors.workflows import action, define_workflow, edge, shell


def _blocking(ctx) -> bool:
    flag = ctx.input.get("block_flag")
    return bool(flag) and os.path.exists(flag)


def _stuck(ctx):
    """The effect happens (the oracle line), then the function blocks where SIGALRM cannot reach it."""
    record(ctx)
    if _blocking(ctx):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(120)
    return {"sent": True}


def _slow(ctx):
    """The effect happens, then the function sleeps past its timeout (the worker's SIGALRM ends it)."""
    record(ctx)
    if _blocking(ctx):
        time.sleep(30)
    return {"sent": True}


def _raises(ctx):
    record(ctx)
    raise RuntimeError("the mail server said no")


def _after(ctx):
    record(ctx)
    return {"after": ctx.outputs.get("send")}


def _flow(name: str, send) -> object:
    return define_workflow(name=name, start_at="send", nodes={"send": send, "after": action(run=_after)},
                           edges=[edge("send", "after")])


#: Killed by the host's watchdog (timeout 1 s + the host's grace).
stuck_action = _flow("stuck-action", action(run=_stuck, timeout_s=1, retries=2))
#: Stopped by the worker's own SIGALRM at its timeout.
slow_action = _flow("slow-action", action(run=_slow, timeout_s=1, retries=2))
#: The same, declared idempotent: the timeout is an ordinary failure and `retries` applies.
slow_idempotent = _flow("slow-idempotent", action(run=_slow, timeout_s=1, retries=1, idempotent=True))
#: A function that raises is a known failure, retried as declared.
raising_action = _flow("raising-action", action(run=_raises, retries=2))

#: A command cut off at its timeout (its process group killed): record, then sleep while blocked.
_SHELL_SCRIPT = (
    "import os, sys, time\n"
    "oracle, run_id, flag = sys.argv[1:4]\n"
    "with open(oracle, 'a') as f: f.write(f'send {run_id}\\n')\n"
    "if os.path.exists(flag): time.sleep(30)\n"
    "print('sent')\n"
)
slow_shell = _flow("slow-shell", shell(
    command=lambda ctx: [sys.executable, "-c", _SHELL_SCRIPT, ctx.input["oracle"], ctx.run_id,
                         ctx.input["block_flag"]],
    timeout_s=1, retries=2))
