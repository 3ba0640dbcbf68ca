"""The soak's shapes: what a client starts, what it does while it follows the run, and what the end checks.

`soak` is bench/soak_workflows.py's chain of pure nodes, an action and a shell effect (checked in
bench/soak.py). The others (bench/soak_shape_workflows.py) are the waits and flow control:

  fan      a parent maps `soak-fan-child` over `children` items, at most FAN_MAX_PARALLEL children at once.
           Its client resumes children parked `no_progress` while it follows the parent.
  taker    waits for `messages` messages on "go"; its client sends them numbered 0, 1, … in order, each
           under its own key and sent again (also on a connection it hangs up on first) until answered,
           across kills; some before the run waits, some while it waits.
  sleeper  sleeps until `wake_at`, a time its client picks a few seconds ahead.
  limited  at most LIMIT_MAX runs per key (`k`, one of LIMIT_KEYS) at once.

The checks (one problem column each; each counts for the exit status):

  fan-out children wrong       a done parent whose children are not exactly one run per index, or
                               whose output is not every child's output once, in item order
  messages not taken once      a done taker that did not take each acknowledged message exactly once,
                               in send order, or whose mailbox holds a message not consumed once
  sleepers woken early / twice a `woke` line before the run's `wake_at`, or a sleep node that
                               succeeded other than once
  limits exceeded              more runs inside their held node at one moment than the limit of their
                               key (or the fan-out's max_parallel) allows, by the oracle's enter/leave
                               intervals (see soak_shape_workflows.py)
"""

from __future__ import annotations

import collections
import random
import time
from typing import TYPE_CHECKING, Any

import soak_shape_workflows as shapes

if TYPE_CHECKING:
    from soak import Line, Phase

BENCH_FILE = "soak_shape_workflows.py"
SHAPES = ("soak", "fan", "taker", "sleeper", "limited")
WORKFLOW_OF = {"soak": "soak", "fan": "soak-fan", "taker": "soak-taker", "sleeper": "soak-sleeper",
               "limited": "soak-limited"}
LIMIT_KEYS = ("blue", "green")
TAKER_TOPIC = "go"
#: Children per fan-out parent, messages per taker, the latest a sleeper wakes (seconds after its start).
FAN_CHILDREN = 4
TAKER_MESSAGES = 3
SLEEP_MAX_S = 6.0

#: The problem columns these shapes add: (key, label).
PROBLEMS = [
    ("fan_children", "fan-out children wrong"),
    ("messages", "messages not taken once, in order"),
    ("sleepers", "sleepers woken early / twice"),
    ("limits", "limits exceeded"),
]


def workflow_spec(bench: str, shape: str) -> str:
    if shape == "soak":
        return f"{bench}/soak_workflows.py:soak"
    return f"{bench}/{BENCH_FILE}:{shape}"


def start_input(shape: str, rng: random.Random, oracle: str, key: str) -> dict[str, Any]:
    """The run input of a new run of `shape` (every input carries the client's start `key`)."""
    base = {"oracle": oracle, "key": key}
    if shape == "fan":
        return {**base, "children": FAN_CHILDREN, "hold": 0.1}
    if shape == "taker":
        return {**base, "messages": TAKER_MESSAGES}
    if shape == "sleeper":
        return {**base, "wake_at": time.time() + rng.uniform(0.5, SLEEP_MAX_S)}
    if shape == "limited":
        return {**base, "k": rng.choice(LIMIT_KEYS), "hold": rng.uniform(0.1, 0.3)}
    raise ValueError(f"no inputs for shape {shape!r}")


class Driver:
    """What a client does for one run of a shape besides following it (`Phase.follow` calls `step` after
    every `run.get` and `finish` before it stops following)."""

    def __init__(self, phase: Phase, shape: str, run_id: str, key: str, rng: random.Random) -> None:
        self.phase, self.shape, self.run_id, self.key, self.rng = phase, shape, run_id, key, rng
        self.sent = 0  # taker: messages acknowledged so far

    def step(self, client: Any, person: Any, view: dict[str, Any] | None) -> None:
        if self.shape == "taker" and self.sent < TAKER_MESSAGES and self.rng.random() < 0.4:
            self.send_next(client)
        elif self.shape == "fan" and view is not None and view["status"] == "parked":
            self.resume_children(client, person)

    def finish(self, client: Any) -> None:
        """The run's obligations left when the client stops following: a taker's messages are all sent
        (else the run could never end)."""
        while self.shape == "taker" and self.sent < TAKER_MESSAGES and not self.phase.abort.is_set():
            self.send_next(client)

    def send_next(self, client: Any) -> None:
        n = self.sent
        key = f"{self.key}-m{n}"
        payload = {"run_id": self.run_id, "topic": TAKER_TOPIC, "payload": {"n": n}}
        if self.rng.random() < self.phase.args.drop_rate:
            self.phase.send_and_hang_up(client.client_id, "message.send", payload, key)
        answer = self.phase.call(client, "message.send", payload, key=key)
        if answer is None:
            return
        with self.phase.lock:
            self.sent += 1  # a refusal is final too (the check then finds the run short of a message)
            if answer.ok:
                self.phase.result.messages_acked[self.run_id] = self.sent
            else:
                self.phase.result.notes.append(f"message.send {key} answered {answer.outcome}: {answer.error}")

    def resume_children(self, client: Any, person: Any) -> None:
        listing = self.phase.call(client, "run.list", {"parent": self.run_id, "status": "parked", "limit": 100},
                                  patience=2)
        for row in (listing.receipt.get("runs") or ()) if listing is not None and listing.ok else ():
            view = self.phase.get(client, row["run_id"])
            if view is not None and view["status"] == "parked":
                self.phase.play_person(person, view)


# --- the checks --------------------------------------------------------------------------------


def check(runs: list[dict[str, Any]], attempts: list[dict[str, Any]], lines: list[Line],
          waits: list[dict[str, Any]], messages: list[dict[str, Any]], acked: dict[str, int],
          problems: dict[str, list[str]], counts: collections.Counter) -> None:
    """Add these shapes' problems (see the module docstring); `counts` gets what the report prints."""
    by_workflow: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in runs:
        by_workflow[run["workflow"]].append(run)
    attempts_of: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for attempt in attempts:
        attempts_of[attempt["run_id"]].append(attempt)
    counts["fan parents"] = len(by_workflow["soak-fan"])
    counts["fan children"] = len(by_workflow["soak-fan-child"])
    counts["takers"] = len(by_workflow["soak-taker"])
    counts["sleepers"] = len(by_workflow["soak-sleeper"])
    counts["limited"] = len(by_workflow["soak-limited"])
    _check_fans(by_workflow, attempts_of, problems)
    _check_takers(by_workflow["soak-taker"], attempts_of, lines, messages, acked, problems, counts)
    _check_sleepers(by_workflow["soak-sleeper"], attempts_of, lines, waits, problems)
    _check_limits(lines, problems, counts)


def _succeeded(attempts: list[dict[str, Any]], node_id: str) -> list[dict[str, Any]]:
    return [a for a in attempts if a["node_id"] == node_id and a["status"] == "succeeded"]


def _check_fans(by_workflow: dict[str, list[dict[str, Any]]], attempts_of: dict[str, list[dict[str, Any]]],
                problems: dict[str, list[str]]) -> None:
    children_of: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for child in by_workflow["soak-fan-child"]:
        children_of[child["parent_run_id"]].append(child)
    for parent in by_workflow["soak-fan"]:
        run_id = parent["run_id"]
        want = int((parent.get("input") or {}).get("children", 0))
        indexes = collections.Counter(int((c.get("input") or {}).get("index", -1)) for c in children_of[run_id])
        if parent["status"] == "done" and (sorted(indexes) != list(range(want)) or any(v != 1 for v in indexes.values())):
            problems["fan_children"].append(f"{run_id}: children by index {dict(sorted(indexes.items()))}, "
                                            f"want one each of 0..{want - 1}")
        if parent["status"] != "done":
            continue
        each = _succeeded(attempts_of[run_id], "each")
        expected = shapes.fan_expected(run_id, want)
        if len(each) != 1 or each[0]["output"] != expected:
            problems["fan_children"].append(f"{run_id}: 'each' committed {len(each)} time(s), output "
                                            f"{each[0]['output'] if each else None!r}, want {expected!r}")
        for child in children_of[run_id]:
            work = _succeeded(attempts_of[child["run_id"]], "work")
            if len(work) != 1:
                problems["fan_children"].append(f"{run_id} child {child['run_id']}: 'work' committed {len(work)} "
                                                "times")


def _check_takers(takers: list[dict[str, Any]], attempts_of: dict[str, list[dict[str, Any]]], lines: list[Line],
                  messages: list[dict[str, Any]], acked: dict[str, int], problems: dict[str, list[str]],
                  counts: collections.Counter) -> None:
    mailbox: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for message in messages:
        mailbox[message["run_id"]].append(message)
    took: dict[str, list[Line]] = collections.defaultdict(list)
    for line in lines:
        if line.kind == "took":
            took[line.run_id].append(line)
    for run in takers:
        run_id = run["run_id"]
        want = int((run.get("input") or {}).get("messages", 0))
        rows = sorted(mailbox[run_id], key=lambda m: m["seq"])
        counts["messages sent"] += len(rows)
        numbers = [(m.get("payload") or {}).get("n") for m in rows]
        if numbers != list(range(len(rows))):
            problems["messages"].append(f"{run_id}: mailbox in send order holds {numbers}, want 0..{len(rows) - 1} "
                                        "once each")
        if acked.get(run_id, 0) > len(rows):
            problems["messages"].append(f"{run_id}: {acked[run_id]} sends acknowledged, {len(rows)} in the mailbox")
        if run["status"] != "done":
            continue
        not_once = [m["message_id"] for m in rows if m["status"] != "consumed" or not m.get("wait_id")]
        if not_once:
            problems["messages"].append(f"{run_id}: done with messages not consumed: {not_once}")
        takes = sorted(_succeeded(attempts_of[run_id], "take"), key=lambda a: a["started_at"])
        taken = [(a["output"] or {}).get("n") for a in takes]
        notes = sorted(_succeeded(attempts_of[run_id], "note"), key=lambda a: a["started_at"])
        final = (notes[-1]["output"] or {}).get("taken") if notes else None
        if taken != list(range(want)) or final != list(range(want)):
            problems["messages"].append(f"{run_id}: took {taken} (final output {final}), want {list(range(want))}")
        # The oracle: a committed note step took the number its step names (the n-th message at step n).
        for line in took[run_id]:
            if line.rest and int(line.rest[0]) != line.step:
                problems["messages"].append(f"{run_id}: attempt {line.attempt_id} at step {line.step} took "
                                            f"message {line.rest[0]}")


def _check_sleepers(sleepers: list[dict[str, Any]], attempts_of: dict[str, list[dict[str, Any]]],
                    lines: list[Line], waits: list[dict[str, Any]], problems: dict[str, list[str]]) -> None:
    wait_rows: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for wait in waits:
        if wait["kind"] == "sleep" and wait["status"] != "cancelled":
            wait_rows[wait["run_id"]].append(wait)
    wake_at = {run["run_id"]: float((run.get("input") or {}).get("wake_at", 0)) for run in sleepers}
    for line in lines:
        if line.kind == "woke" and line.run_id in wake_at and float(line.rest[0]) < wake_at[line.run_id]:
            problems["sleepers"].append(f"{line.run_id}: attempt {line.attempt_id} ran 'after' at {line.rest[0]}, "
                                        f"before its wake-up {wake_at[line.run_id]!r}")
    for run in sleepers:
        if run["status"] != "done":
            continue
        run_id = run["run_id"]
        naps = _succeeded(attempts_of[run_id], "nap")
        if len(naps) != 1 or abs(float((naps[0]["output"] or {}).get("slept_until", 0)) - wake_at[run_id]) > 1e-3:
            problems["sleepers"].append(f"{run_id}: 'nap' committed {len(naps)} time(s) "
                                        f"({[a['output'] for a in naps]}), want once until {wake_at[run_id]!r}")
        rows = wait_rows[run_id]
        if len(rows) != 1 or rows[0]["status"] != "consumed":
            problems["sleepers"].append(f"{run_id}: sleep waits {[(w['wait_id'], w['status']) for w in rows]}, "
                                        "want one, consumed")


def _check_limits(lines: list[Line], problems: dict[str, list[str]], counts: collections.Counter) -> None:
    """At no moment more runs of one slot between their first `enter` and their last `leave` than its limit."""
    first: dict[tuple[str, str], float] = {}
    last: dict[tuple[str, str], float] = {}
    for line in lines:
        if line.kind not in ("enter", "leave") or len(line.rest) < 2:
            continue
        slot, at = line.rest[0], float(line.rest[1])
        key = (slot, line.run_id)
        if line.kind == "enter":
            first[key] = min(first.get(key, at), at)
        else:
            last[key] = max(last.get(key, at), at)
    events: dict[str, list[tuple[float, int, str]]] = collections.defaultdict(list)
    for (slot, run_id), began in first.items():
        ended = last.get((slot, run_id), float("inf"))  # never left: holds the slot to the end
        events[slot].append((began, 1, run_id))
        events[slot].append((ended, -1, run_id))
    for slot, timeline in sorted(events.items()):
        allowed = shapes.FAN_MAX_PARALLEL if slot.startswith("fan:") else shapes.LIMIT_MAX
        inside: set[str] = set()
        peak = 0
        # At equal times a leave comes first: a run that left as another entered did not overlap it.
        for at, change, run_id in sorted(timeline, key=lambda e: (e[0], e[1])):
            if change > 0:
                inside.add(run_id)
            else:
                inside.discard(run_id)
            peak = max(peak, len(inside))
            if len(inside) > allowed:
                problems["limits"].append(f"{slot}: {len(inside)} runs inside at {at:.6f} (limit {allowed}): "
                                          f"{sorted(inside)}")
                break
        counts["limit peak " + ("fan" if slot.startswith("fan:") else "key")] = max(
            counts["limit peak " + ("fan" if slot.startswith("fan:") else "key")], peak)


def step_of(workflow: str, node_id: str, output: Any) -> int | None:
    """The step of a recorded node's committed output (None: the node writes no `exec` lines)."""
    if node_id not in shapes.RECORDED.get(workflow, ()) or not isinstance(output, dict):
        return None
    step = output.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None
