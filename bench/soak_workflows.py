"""The workflow of bench/soak.py: pure nodes, a non-idempotent action and a shell effect, in a loop.

One round is `c1 → c2 → act → c3 → sh → c4 → loop`; `loop` goes back to `c1`
until the run's input `rounds` is reached, then ends the run. A node's
*step* is the round it runs in (0, 1, …): `(run, node, step)` names one
node execution that must be committed exactly once.

Every output carries a chain `link`: a digest of the previous node's link,
the node id and the step, starting from a digest of the run id. An output
computed from a stale or missing predecessor therefore differs from a clean
run's (`clean_outputs`, which the soak compares every finished run with).

Every node appends lines to the ORACLE FILE outside the database
(`ctx.input["oracle"]`), each with one `O_APPEND` write, so they survive a
SIGKILL right after:

    exec    <run> <node> <step> <attempt> <pid> <create_time> <time>   a node starts executing (worker pid,
                                                                        its start time, the clock now)
    shstart <run> <node> <step> <attempt> <pid>                 the shell command started (its sh pid)
    effect  <run> <node> <step> <attempt> <output json>         the side effect happened, and the node
                                                                 returns that output

`act` is an `action` and `sh` a `shell` node, both non-idempotent (the
default): when their worker dies between the reservation and the commit
the run parks `ambiguous_effect`, and the soak, playing the person, reads
the oracle: with an `effect` line for that attempt it confirms with the
line's output, without one it retries (and writes a `resolve` line first).

Input keys: `oracle` (required), `rounds` (default 2), `sleep` (seconds a
pure node sleeps, default 0.02), `act_sleep` (seconds the action sleeps
before and again after its effect, default 0.05), `sh_sleep` (the shell
command's sleep before its effect, default 0.05).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time

from piwf_actors.workflows import END, action, compute, define_workflow, edge, shell, switch

#: One round, in order; `loop` routes back to the first node or ends the run.
ORDER = ["c1", "c2", "act", "c3", "sh", "c4", "loop"]
#: The nodes with a side effect (non-idempotent).
EFFECT_NODES = ("act", "sh")


def start_link(run_id: str) -> str:
    return hashlib.sha256(f"start/{run_id}".encode()).hexdigest()[:16]


def next_link(previous: str, node_id: str, step: int) -> str:
    return hashlib.sha256(f"{previous}/{node_id}/{step}".encode()).hexdigest()[:16]


def shell_stdout(link: str, step: int) -> str:
    return f"{link} {step}\n"


def shell_output(link: str, step: int) -> dict:
    """What `sh` returns, and what a person confirms for it (duration 0: the person cannot know it)."""
    return {"stdout": shell_stdout(link, step), "stderr": "", "exit_code": 0, "duration_ms": 0}


def link_of(node_id: str, output: dict) -> tuple[str, int]:
    """(link, step) of a node's output."""
    if node_id == "sh":
        link, step = output["stdout"].split()
        return link, int(step)
    return output["link"], int(output["step"])


def clean_outputs(run_id: str, rounds: int) -> dict[tuple[str, int], dict]:
    """Every (node, step) → output of a run of `rounds` rounds that nothing disturbed."""
    outputs: dict[tuple[str, int], dict] = {}
    previous = start_link(run_id)
    for step in range(rounds):
        for node_id in ORDER:
            link = next_link(previous, node_id, step)
            if node_id == "sh":
                outputs[(node_id, step)] = {"stdout": shell_stdout(link, step)}
            elif node_id == "loop":
                more = "yes" if step + 1 < rounds else "no"
                outputs[(node_id, step)] = {"node": node_id, "step": step, "link": link, "next_step": step + 1,
                                            "more": more}
            else:
                outputs[(node_id, step)] = {"node": node_id, "step": step, "link": link}
            previous = link
    return outputs


# --- in the worker ---------------------------------------------------------------------------


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def _step(ctx) -> int:
    loop = ctx.outputs.get("loop")
    return int(loop["next_step"]) if loop else 0


def _previous(ctx) -> str:
    index = ORDER.index(ctx.node_id)
    if index == 0:
        loop = ctx.outputs.get("loop")
        return loop["link"] if loop else start_link(ctx.run_id)
    before = ORDER[index - 1]
    return link_of(before, ctx.outputs[before])[0]


def _record(ctx, step: int) -> None:
    try:
        import psutil

        started = f"{psutil.Process().create_time():.3f}"
    except Exception:  # the oracle line matters more than the start time
        started = "0"
    _append(ctx.input["oracle"],
            f"exec {ctx.run_id} {ctx.node_id} {step} {ctx.attempt_id} {os.getpid()} {started} {time.time():.6f}")


def _pure(ctx):
    step = _step(ctx)
    _record(ctx, step)
    time.sleep(float(ctx.input.get("sleep", 0.02)))
    link = next_link(_previous(ctx), ctx.node_id, step)
    if ctx.node_id == "loop":
        more = "yes" if step + 1 < int(ctx.input.get("rounds", 2)) else "no"
        return {"node": "loop", "step": step, "link": link, "next_step": step + 1, "more": more}
    return {"node": ctx.node_id, "step": step, "link": link}


def _act(ctx):
    step = _step(ctx)
    _record(ctx, step)
    output = {"node": ctx.node_id, "step": step, "link": next_link(_previous(ctx), ctx.node_id, step)}
    pause = float(ctx.input.get("act_sleep", 0.05))
    time.sleep(pause)  # a kill here: no effect yet (the person retries)
    _append(ctx.input["oracle"], f"effect {ctx.run_id} {ctx.node_id} {step} {ctx.attempt_id} "
                                 f"{json.dumps(output, sort_keys=True, separators=(',', ':'))}")
    time.sleep(pause)  # a kill here: the effect happened, its result is not committed (the person confirms)
    return output


def _sh_command(ctx) -> str:
    """Evaluated in the worker when the node starts: records the execution, returns the command,
    which records its own start (with its pid) and its effect in the oracle."""
    step = _step(ctx)
    _record(ctx, step)
    link = next_link(_previous(ctx), ctx.node_id, step)
    oracle = shlex.quote(ctx.input["oracle"])
    tag = f"{ctx.run_id} {ctx.node_id} {step} {ctx.attempt_id}"
    effect = f"effect {tag} {json.dumps(shell_output(link, step), sort_keys=True, separators=(',', ':'))}"
    pause = float(ctx.input.get("sh_sleep", 0.05))
    return (f'echo "shstart {tag} $$" >> {oracle}; sleep {pause:g}; '
            f"printf '%s\\n' {shlex.quote(effect)} >> {oracle}; printf '%s\\n' {shlex.quote(f'{link} {step}')}")


soak = define_workflow(
    name="soak",
    start_at="c1",
    max_steps=1000,
    nodes={
        "c1": compute(run=_pure),
        "c2": compute(run=_pure),
        "act": action(run=_act),
        "c3": compute(run=_pure),
        "sh": shell(command=_sh_command, shell=True, timeout_s=60),
        "c4": compute(run=_pure),
        "loop": compute(run=_pure),
    },
    edges=[
        edge("c1", "c2"), edge("c2", "act"), edge("act", "c3"), edge("c3", "sh"), edge("sh", "c4"),
        edge("c4", "loop"),
        switch("loop", on="$.more", cases={"yes": "c1", "no": END}),
    ],
)
