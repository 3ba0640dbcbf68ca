"""Events under real SIGKILLs (DESIGN.md "Flow control by rate and by event"), with real
`bin/piwf-host` processes serving a project whose workflows start on events, and an oracle file
outside the database that the runs append to:

1. one emit starts each subscriber once: 60 events of `order.created`, emitted while the host is
   SIGKILLed twice and every one emitted again afterwards (half under an event key, half under the
   same client id and idempotency key): one event row each, and per (event, subscriber) one run — a
   graph workflow with a filter and a function workflow — and the oracle names one run id per pair;
2. a waiting run takes its matching event once: 16 runs (graph and function) started by events wait
   for the `payment` of their own order; payments are emitted around a SIGKILL (one before its run
   reaches the wait, one repeated under its key, a second payment for one order, one for no order),
   and every run takes exactly the first payment of its order, once;
3. batches cover every event exactly once: 90 `item` events in three keys into batches of at most 7
   (graph and function subscribers), emitted around a SIGKILL and emitted again: every event is in
   exactly one batch run of each subscriber, of its own key.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from testsupport import dead_host_settled
from wf import harness
from wf.harness import rows, wait_for
from wf.piwf_hosts import oracle_lines, piwf_host, sigkill

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning
from piwf_actors.errors import PiwfError

guard = harness.guard

HEAD = '''
import os

from piwf_actors import durable
from piwf_actors.workflows import batch, compute, define_workflow, edge, on_event, wait_event

ORACLE = {oracle!r}


def note(*words):
    # One line per execution, outside the database.
    with open(ORACLE, "a") as oracle:
        oracle.write(" ".join(str(word) for word in words) + "\\n")
'''

ORDERS = '''
def _ship(ctx):
    note("ship", ctx.input["event_id"], ctx.run_id)
    return {"n": ctx.input["n"]}


ship = define_workflow(name="ship", start_at="a", nodes={"a": compute(run=_ship)}, edges=[],
                       on_event=on_event("order.created", filter=lambda event: event["data"]["n"] % 5 != 0,
                                         input=lambda event: {"event_id": event["event_id"], "n": event["data"]["n"]}))


@durable.step
def _bill(event_id: str) -> str:
    note("bill", event_id, durable.current_run().run_id)
    return event_id


@durable.workflow(on_event=on_event("order.created", input=lambda event: {"event_id": event["event_id"]}))
def bill(event_id: str) -> str:
    return _bill(event_id)
'''

PAYMENTS = '''
def _paid(ctx):
    payment = ctx.outputs["pay"]
    note("order", ctx.input["order_id"], payment["event_id"], ctx.run_id)
    return {"paid": payment["data"]["amount"]}


order = define_workflow(
    name="order", start_at="pay",
    nodes={"pay": wait_event("payment", match=lambda ctx: {"order_id": ctx.input["order_id"]}, timeout_s=600),
           "paid": compute(run=_paid)},
    edges=[edge("pay", "paid")], on_event=on_event("order.created"))


@durable.step
def _note_paid(order_id: str, event_id: str) -> None:
    note("fn_order", order_id, event_id, durable.current_run().run_id)


@durable.workflow(on_event=on_event("fn.order.created"))
def fn_order(order_id: str) -> int:
    payment = durable.wait_event("payment", match={"order_id": order_id}, timeout_s=600)
    _note_paid(order_id, payment["event_id"])
    return payment["data"]["amount"]
'''

ITEMS = '''
def _collect(ctx):
    events = ctx.input["events"]
    note("collect", ctx.run_id, ctx.input["key"], ",".join(event["event_id"] for event in events))
    return {"n": len(events)}


collect = define_workflow(name="collect", start_at="a", nodes={"a": compute(run=_collect)}, edges=[],
                          on_event=on_event("item"),
                          batch=batch(max_items=7, max_wait_s=0.5, key=lambda event: event["data"]["k"]))


@durable.step
def _fn_note(key: str, ids: str) -> None:
    note("fn_collect", durable.current_run().run_id, key, ids)


@durable.workflow(on_event=on_event("item"), batch=batch(max_items=7, max_wait_s=0.5, key=lambda e: e["data"]["k"]))
def fn_collect(events: list, key: str) -> int:
    _fn_note(key, ",".join(event["event_id"] for event in events))
    return len(events)
'''


def _project(base: Path, body: str) -> tuple[Path, Path]:
    project = base / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    oracle = base / "oracle.txt"
    (project / ".piwf" / "workflows" / "subscribers.py").write_text(HEAD.format(oracle=str(oracle)) + body)
    return project, oracle


def _host(guard: Any, state_dir: Path, project: Path) -> Any:
    script = piwf_host(guard, state_dir, "--project", str(project), workers=3)
    # The keeper has recorded its subscriptions (they start at the newest event then).
    wait_for(lambda: len(rows(state_dir, "SELECT name FROM event_subscription")) >= 2, 30,
             lambda: f"the event keeper to record its subscriptions; log:\n{script.log()[-4000:]}")
    return script


class Emitter:
    """Emits events through the socket, each retried (same client id, same idempotency key) until the
    host that answers has recorded it: a host SIGKILLed mid-request loses only an answer."""

    def __init__(self, state_dir: Path, client_id: str = "emitter") -> None:
        self.state_dir = state_dir
        self.client_id = client_id
        self.receipts: dict[str, dict[str, Any]] = {}
        self.outcomes: Counter[str] = Counter()

    def emit(self, label: str, name: str, data: Any, key: str | None = None, deadline_s: float = 90) -> dict[str, Any]:
        payload: dict[str, Any] = {"name": name, "data": data}
        if key is not None:
            payload["key"] = key
        until = time.monotonic() + deadline_s
        while True:
            try:
                with Client(self.state_dir, client_id=self.client_id, timeout=5, retries=0) as client:
                    answer = client.request("event.emit", payload, idempotency_key=f"emit-{label}")
                if answer.ok:
                    self.receipts[label] = answer.receipt
                    self.outcomes[answer.outcome] += 1
                    return answer.receipt
                if answer.outcome != "unavailable":  # (a new host on PostgreSQL is a standby until the lease expires)
                    raise AssertionError(f"emit {label} refused: {answer.outcome} {answer.error}")
                if time.monotonic() > until:
                    raise AssertionError(f"emit {label} still unavailable: {answer.error}")
                time.sleep(0.05)
            except (HostNotRunning, OSError, TimeoutError, PiwfError):
                if time.monotonic() > until:
                    raise
                time.sleep(0.05)  # the host is down: poll until the next one serves


def _in_thread(work: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _all_done(state_dir: Path, workflow: str, count: int, timeout: float = 90) -> list[dict[str, Any]]:
    def done() -> bool:
        return len(rows(state_dir, "SELECT run_id FROM run WHERE workflow = ? AND status = 'done'",
                        (workflow,))) >= count

    wait_for(done, timeout, lambda: f"{count} {workflow} runs done: "
             f"{rows(state_dir, 'SELECT status, count(*) AS n FROM run WHERE workflow = ? GROUP BY status', (workflow,))}",
             poll=0.1)
    return rows(state_dir, "SELECT run_id, status, error_code FROM run WHERE workflow = ?", (workflow,))


def test_one_emit_starts_each_subscriber_once_across_kills_and_resends(guard: Any, state_dir: Path, tmp_path: Path) -> None:
    project, oracle = _project(tmp_path, ORDERS)
    host = _host(guard, state_dir, project)
    emitter = Emitter(state_dir)
    total = 60

    def emit_all() -> None:
        for n in range(total):
            emitter.emit(f"o{n}", "order.created", {"n": n}, key=f"order-{n}" if n % 2 == 0 else None)

    thread, errors = _in_thread(emit_all)
    for kill_after in (8, 30):  # SIGKILL twice while events are being emitted and runs started
        wait_for(lambda n=kill_after: len(oracle_lines(oracle)) >= n or not thread.is_alive(), 60,
                 lambda n=kill_after: f"{n} oracle lines (have {len(oracle_lines(oracle))})")
        sigkill(guard, host)
        dead_host_settled(state_dir)
        host = _host(guard, state_dir, project)
    thread.join(120)
    assert not thread.is_alive() and not errors, errors
    resent = Emitter(state_dir)
    for n in range(total):  # every emit again: by its event key, or by its request's key
        receipt = resent.emit(f"o{n}", "order.created", {"n": n}, key=f"order-{n}" if n % 2 == 0 else None)
        assert receipt["event_id"] == emitter.receipts[f"o{n}"]["event_id"]
    assert resent.outcomes["adopted"] >= total // 2, resent.outcomes  # the keyless ones answer `adopted`

    events = rows(state_dir, "SELECT event_id, key, data FROM event WHERE name = 'order.created'")
    assert len(events) == total, f"{len(events)} events recorded for {total} emits"
    shipped = [e for e in events if int(e["data"].split(":")[1].rstrip("}")) % 5 != 0]
    _all_done(state_dir, "ship", len(shipped))
    _all_done(state_dir, "bill", total)
    host_rows = rows(state_dir, "SELECT workflow, count(*) AS n FROM run GROUP BY workflow")
    assert {row["workflow"]: row["n"] for row in host_rows} == {"ship": len(shipped), "bill": total}
    runs_of: dict[tuple[str, str], set[str]] = defaultdict(set)
    for words in oracle_lines(oracle):
        runs_of[(words[0], words[1])].add(words[2])
    expected = {("bill", e["event_id"]) for e in events} | {("ship", e["event_id"]) for e in shipped}
    assert set(runs_of) == expected, set(runs_of) ^ expected
    twice = {pair: ids for pair, ids in runs_of.items() if len(ids) != 1}
    assert not twice, f"an event started a subscriber more than once: {twice}"
    deliveries = Counter((row["subscription"], row["outcome"]) for row in rows(
        state_dir, "SELECT subscription, outcome FROM event_delivery"))
    assert deliveries == {("bill", "started"): total, ("ship", "started"): len(shipped),
                          ("ship", "filtered"): total - len(shipped)}, deliveries


def test_a_waiting_run_takes_its_matching_event_once(guard: Any, state_dir: Path, tmp_path: Path) -> None:
    project, oracle = _project(tmp_path, PAYMENTS)
    host = _host(guard, state_dir, project)
    emitter = Emitter(state_dir)
    orders = [f"g{i}" for i in range(8)] + [f"f{i}" for i in range(8)]
    # g0's payment comes right after its order, before its run can reach the wait: it still counts
    # (a run an event started looks back to that event's emit time).
    for order_id in orders:
        emitter.emit(f"order-{order_id}", "order.created" if order_id.startswith("g") else "fn.order.created",
                     {"order_id": order_id}, key=order_id)
        if order_id == "g0":
            emitter.emit("pay-g0", "payment", {"order_id": "g0", "amount": 100}, key="pay-g0")
    wait_for(lambda: len(rows(state_dir, "SELECT wait_id FROM run_wait WHERE kind = 'event' AND status = "
                                         "'pending'")) >= len(orders) - 1, 60,
             lambda: f"the runs to wait: {rows(state_dir, 'SELECT run_id, status FROM run')}")
    for order_id in orders[1:8]:
        emitter.emit(f"pay-{order_id}", "payment", {"order_id": order_id, "amount": 1}, key=f"pay-{order_id}")
    sigkill(guard, host)  # while woken runs may be executing
    dead_host_settled(state_dir)
    host = _host(guard, state_dir, project)
    for order_id in orders[8:]:
        emitter.emit(f"pay-{order_id}", "payment", {"order_id": order_id, "amount": 2}, key=f"pay-{order_id}")
    emitter.emit("pay-g1-again", "payment", {"order_id": "g1", "amount": 999}, key="pay-g1-second")
    emitter.emit("pay-nobody", "payment", {"order_id": "nobody", "amount": 5})
    resent = Emitter(state_dir, client_id="another")  # another client: the event key alone keeps it one event
    for order_id in orders:  # every payment again, under its key (other data: the first recorded stays)
        resent.emit(f"pay-{order_id}", "payment", {"order_id": order_id, "amount": 3}, key=f"pay-{order_id}")
    runs = _all_done(state_dir, "order", 8) + _all_done(state_dir, "fn_order", 8)
    assert all(run["status"] == "done" for run in runs), runs

    payments = {row["key"]: row["event_id"] for row in rows(state_dir, "SELECT key, event_id FROM event "
                                                                         "WHERE name = 'payment'")}
    assert len(payments) == len(orders) + 2, payments  # the resends added none
    takes = rows(state_dir, "SELECT t.run_id, t.event_id, r.input_json FROM event_take t JOIN run r "
                            "ON r.run_id = t.run_id")
    taken_by = Counter(take["run_id"] for take in takes)
    assert set(taken_by.values()) == {1} and len(taken_by) == len(orders), taken_by
    event_of_order = {}
    for take in takes:
        order_id = take["input_json"].split('"order_id":"')[1].split('"')[0]
        event_of_order[order_id] = take["event_id"]
    assert event_of_order == {order_id: payments[f"pay-{order_id}"] for order_id in orders}
    assert payments["pay-g1-second"] not in event_of_order.values()  # its run had taken the first one
    noted: dict[str, set[str]] = defaultdict(set)
    for words in oracle_lines(oracle):
        noted[words[1]].add(words[2])
    assert noted == {order_id: {payments[f"pay-{order_id}"]} for order_id in orders}, noted


def test_batches_cover_every_event_exactly_once(guard: Any, state_dir: Path, tmp_path: Path) -> None:
    project, oracle = _project(tmp_path, ITEMS)
    host = _host(guard, state_dir, project)
    emitter = Emitter(state_dir)
    total = 90

    def emit_all() -> None:
        for n in range(total):
            emitter.emit(f"i{n}", "item", {"k": "abc"[n % 3], "n": n}, key=f"item-{n}" if n % 2 else None)

    thread, errors = _in_thread(emit_all)
    wait_for(lambda: len(oracle_lines(oracle)) >= 4 or not thread.is_alive(), 60, lambda: "a few batches ran")
    sigkill(guard, host)
    dead_host_settled(state_dir)
    host = _host(guard, state_dir, project)
    thread.join(120)
    assert not thread.is_alive() and not errors, errors
    for n in range(total):
        Emitter(state_dir).emit(f"i{n}", "item", {"k": "abc"[n % 3], "n": n}, key=f"item-{n}" if n % 2 else None)

    key_of = {row["event_id"]: row["data"].split('"k":"')[1][0] for row in rows(
        state_dir, "SELECT event_id, data FROM event WHERE name = 'item'")}
    assert len(key_of) == total
    # Every event in a batch of each subscriber, every batch started, every run ended.
    wait_for(lambda: rows(state_dir, "SELECT count(*) AS n FROM event_delivery WHERE outcome = 'batched'")[0]["n"]
             == 2 * total and not rows(state_dir, "SELECT batch_id FROM event_batch WHERE status = 'open'") and
             not rows(state_dir, "SELECT run_id FROM run WHERE status NOT IN ('done', 'failed', 'cancelled')"),
             60, lambda: f"every batch started and done: {rows(state_dir, 'SELECT status, count(*) FROM run GROUP BY status')}")
    ended = rows(state_dir, "SELECT workflow, status, error_code, error_message FROM run WHERE status != 'done'")
    assert not ended, f"batch runs that did not end done: {ended}"
    for subscriber in ("collect", "fn_collect"):
        batches = rows(state_dir, "SELECT run_id FROM run WHERE workflow = ? AND status = 'done'", (subscriber,))
        in_runs: dict[str, set[str]] = defaultdict(set)
        for words in oracle_lines(oracle):
            if words[0] != subscriber:
                continue
            run_id, key, ids = words[1], words[2], words[3].split(",")
            assert len(ids) <= 7, words
            assert {key_of[event_id] for event_id in ids} == {key}, f"a batch of key {key} holds {ids}"
            for event_id in ids:
                in_runs[event_id].add(run_id)
        assert set(in_runs) == set(key_of), f"{subscriber}: events in no batch: {set(key_of) - set(in_runs)}"
        more = {event_id: runs for event_id, runs in in_runs.items() if len(runs) != 1}
        assert not more, f"{subscriber}: events in more than one batch run: {more}"
        assert {run for runs in in_runs.values() for run in runs} == {row["run_id"] for row in batches}
