"""Workflows for the rate-limit and debounce crash tests (test_rate_crashes.py), each run recording
its own start in an oracle file: one `O_APPEND` write of `"start <run_id> <time.time()> <pid>\\n"`
(atomic for a line this short, also when the process is SIGKILLed right after).

- `paced_graph` (a graph) and `paced_function` (a function workflow) share the named limiter
  `mail_api`: together at most `PACE_MAX` starts in any `PACE_PER_S` seconds;
- `notify_graph` (an `action` node) and `notify_function` (an `effect=True` step) take a start of the
  named limiter `smtp` before each call: together at most `SMTP_MAX` calls in any `SMTP_PER_S`
  seconds, each recording `sent <run_id> <time.time()> <pid>` as it runs;
- `reindex` is debounced per `input["doc"]`: starts within `QUIET_S` of each other make one run,
  which records the input it got (`indexed <run_id> <doc> <edit>`).
"""

from __future__ import annotations

import os
import time

from piwf_actors.durable import step, workflow
from piwf_actors.workflows import action, compute, debounce, define_workflow, rate_limiter

PACE_MAX = 2
PACE_PER_S = 4.0
QUIET_S = 4.0
SMTP_MAX = 2
SMTP_PER_S = 3.0


def append(path: str, *fields: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (" ".join(str(f) for f in fields) + "\n").encode())
    finally:
        os.close(fd)


mail_api = rate_limiter("mail-api", PACE_MAX, per_s=PACE_PER_S)


def _send(ctx):
    append(ctx.input["oracle"], "start", ctx.run_id, repr(time.time()), os.getpid())
    return {"sent": ctx.input["n"]}


paced_graph = define_workflow(name="paced-graph", start_at="send", nodes={"send": compute(run=_send)}, edges=[],
                              rate=mail_api)


@step
def send_mail(oracle: str, run_id: str) -> bool:
    append(oracle, "start", run_id, repr(time.time()), os.getpid())
    return True


@workflow(name="paced-function", rate=mail_api)
def paced_function(oracle: str, n: int) -> dict:
    from piwf_actors.durable import current_run

    send_mail(oracle, current_run().run_id)
    return {"sent": n}


smtp = rate_limiter("smtp", SMTP_MAX, per_s=SMTP_PER_S)


def _mail(ctx):
    append(ctx.input["oracle"], "sent", ctx.run_id, repr(time.time()), os.getpid())
    return {"mailed": ctx.input["n"]}


notify_graph = define_workflow(name="notify-graph", start_at="mail",
                               nodes={"mail": action(run=_mail, idempotent=True, rate=smtp)}, edges=[])


@step(effect=True, idempotent=True, rate=smtp)
def mail(oracle: str, run_id: str) -> bool:
    append(oracle, "sent", run_id, repr(time.time()), os.getpid())
    return True


@workflow(name="notify-function")
def notify_function(oracle: str, n: int) -> dict:
    from piwf_actors.durable import current_run

    mail(oracle, current_run().run_id)
    return {"mailed": n}


def _reindex(ctx):
    append(ctx.input["oracle"], "indexed", ctx.run_id, ctx.input["doc"], ctx.input["edit"])
    return {"doc": ctx.input["doc"], "edit": ctx.input["edit"]}


reindex = define_workflow(name="reindex", start_at="index", nodes={"index": compute(run=_reindex)}, edges=[],
                          debounce=debounce(QUIET_S, key=lambda run_input: run_input["doc"]))


def _block(ctx):
    """Hold this worker until the file `gate` exists (polling, at most 120 s): the test keeps the active
    host's one worker busy, so the runner host claims the paced runs meanwhile."""
    append(ctx.input["oracle"], "blocking", ctx.run_id, repr(time.time()), os.getpid())
    deadline = time.monotonic() + 120
    while not os.path.exists(ctx.input["gate"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"blocked": True}


blocker = define_workflow(name="blocker", start_at="block", nodes={"block": compute(run=_block)}, edges=[])
