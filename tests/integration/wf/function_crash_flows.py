"""Function workflows for the durable-function crash tests (test_function_crashes.py): every step
execution appends lines to an oracle file outside the database, so a test counts what actually ran,
whatever the database says.

Every oracle line is one `O_APPEND` write of `"<label> <word> <pid> <time>"` (atomic for lines this
short, also when the process is SIGKILLed right after): `label` is the node id the engine gives the
call (the function computes it by the engine's rule: the name, then `name#2`, `name#3`…; the tests
check that the two agree), `word` what the step is doing (`start`, `end`; an effect also writes
`applied` between the two, once the outside world has changed), `pid` the worker's, `time`
`time.time()` of this machine (hosts and workers all run here).

- `ledger` (test 1): 20 step calls — two loops with local state, pure steps, non-idempotent and
  idempotent effect steps, a step that fails after its retries inside a try/except — and the return.
- `waiter` (test 2): a pure step before a durable sleep, before a message wait and before a
  decision, and one after it.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from piwf_actors.durable import StepFailed, decide, sleep, step, wait_message, workflow

#: A pure step holds this long between its `start` and `end` lines (the run input may change it),
#: so a kill on a `start` line lands inside the step.
PURE_HOLD_S = 0.1
#: An effect step holds this long before it acts and again after (between `start`, `applied` and
#: `end`), so a kill can land before the effect, or after it and before its result is committed.
EFFECT_HOLD_S = 0.15
#: What the steps a test names in `slow` hold instead (at each of their waits).
SLOW_HOLD_S = 1.0
#: `fragile` fails on every attempt: one call, `FRAGILE_RETRIES + 1` executions.
FRAGILE_RETRIES = 2


def append(oracle: str, label: str, word: str, *fields: object) -> None:
    """One oracle line, in a single write."""
    line = " ".join(str(f) for f in (label, word, os.getpid(), repr(time.time()), *fields))
    fd = os.open(oracle, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def node_id(name: str, occurrence: int) -> str:
    """The engine's id of the `occurrence`-th call of `name` in one execution."""
    return name if occurrence == 1 else f"{name}#{occurrence}"


class Labels:
    """Local state of the function: the node id each step call is going to get, passed to the step
    so its oracle lines name it (the same on every replay: the function counts as the engine does)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def next(self, name: str) -> str:
        self.calls[name] += 1
        return node_id(name, self.calls[name])


# --- 1. twenty steps ------------------------------------------------------------------------------


@dataclass
class Tally:
    count: int
    total: int


@step
def add(oracle: str, label: str, hold_s: float, acc: int, value: int) -> int:
    append(oracle, label, "start")
    time.sleep(hold_s)
    append(oracle, label, "end")
    return acc + value


@step
def count(oracle: str, label: str, hold_s: float, tally: Tally, value: int) -> Tally:
    """A dataclass in and out: replayed, it must come back as one (the next call reads its fields)."""
    append(oracle, label, "start")
    time.sleep(hold_s)
    append(oracle, label, "end")
    return Tally(count=tally.count + 1, total=tally.total + value)


@step(effect=True, idempotent=False)
def charge(oracle: str, label: str, hold_s: float, amount: int) -> dict[str, Any]:
    """A side effect that must not happen twice: a cut-off one parks the run `ambiguous_effect`."""
    append(oracle, label, "start")
    time.sleep(hold_s)
    append(oracle, label, "applied", amount)  # the outside world changed here
    time.sleep(hold_s)
    append(oracle, label, "end")
    return charged(label, amount)


def charged(label: str, amount: int) -> dict[str, Any]:
    """What `charge` returns (what a person confirming the effect says it returned)."""
    return {"charge": label, "amount": amount}


@step(effect=True, idempotent=True)
def publish(oracle: str, label: str, hold_s: float, total: int) -> str:
    """A side effect that may be repeated (an upsert): a crash runs it again."""
    append(oracle, label, "start")
    time.sleep(hold_s)
    append(oracle, label, "applied", total)
    time.sleep(hold_s)
    append(oracle, label, "end")
    return f"published {total}"


@step(retries=FRAGILE_RETRIES)
def fragile(oracle: str, label: str, hold_s: float) -> int:
    append(oracle, label, "start")
    time.sleep(hold_s)
    append(oracle, label, "end")
    raise RuntimeError("the remote end refuses")


@workflow(name="ledger")
def ledger(oracle: str, hold_s: float = PURE_HOLD_S, effect_hold_s: float = EFFECT_HOLD_S,
           slow: tuple[str, ...] = (), slow_s: float = SLOW_HOLD_S) -> dict[str, Any]:
    """Twenty step calls: 4 rounds of add, count and an effect (alternately non-idempotent and
    idempotent); a failing step caught; 3 more adds; a charge and a publish of the total; a count.
    The steps named in `slow` hold `slow_s` instead (a test's kill inside them cannot come late)."""
    labels = Labels()

    def held(name: str, hold: float) -> tuple[str, float]:
        label = labels.next(name)
        return label, slow_s if label in slow else hold

    total, tally, receipts, published = 0, Tally(count=0, total=0), [], []
    for round_no in range(4):
        total = add(oracle, *held("add", hold_s), total, round_no + 1)
        tally = count(oracle, *held("count", hold_s), tally, total)
        if round_no % 2 == 0:
            receipts.append(charge(oracle, *held("charge", effect_hold_s), total))
        else:
            published.append(publish(oracle, *held("publish", effect_hold_s), tally.total))
    try:
        fragile(oracle, *held("fragile", hold_s))
        caught = None
    except StepFailed as failure:
        caught = {"code": failure.code, "message": failure.message, "step": failure.step}
        total = add(oracle, *held("add", hold_s), total, 100)
    for extra in range(3):
        total = add(oracle, *held("add", hold_s), total, extra * 10)
    receipts.append(charge(oracle, *held("charge", effect_hold_s), total))
    published.append(publish(oracle, *held("publish", effect_hold_s), total))
    tally = count(oracle, *held("count", hold_s), tally, total)
    return {"total": total, "tally": [tally.count, tally.total], "receipts": receipts, "published": published,
            "caught": caught, "calls": sum(labels.calls.values())}


# --- 2. waits -------------------------------------------------------------------------------------


@step
def mark(oracle: str, label: str) -> str:
    append(oracle, label, "start")
    return label


@workflow(name="waiter")
def waiter(oracle: str, nap_s: float) -> dict[str, Any]:
    """A step before each wait (a sleep, a message, a decision) and one after the last."""
    steps = [mark.named("before_sleep")(oracle, "before_sleep")]
    sleep(nap_s, name="nap")
    steps.append(mark.named("before_message")(oracle, "before_message"))
    message = wait_message("go", name="message")
    steps.append(mark.named("before_decision")(oracle, "before_decision"))
    answer = decide("approve", title="Ship it?", choices={"yes": "Ship", "no": "Hold"})
    steps.append(mark.named("after_decision")(oracle, "after_decision"))
    return {"steps": steps, "message": message, "choice": answer.choice,
            "answered_by_a_person": answer.answered_by is not None}
