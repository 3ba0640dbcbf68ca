"""Store-level edge rules, driven through the write commands with a chosen `now`.

- claim order: submissions waiting for validation, then woken runs (answer,
  deadline, resume, effect resolution, requeue), then fresh runs by creation;
- time fence: a fenced write is refused once the host's lease has expired,
  even while no other host took it (same epoch);
- idempotency records outlive prune and are pruned on their own retention;
- restart: terminal only, no unsettled effect, one child per (run, revision).
"""

from __future__ import annotations

import os

import pytest
from test_store_regressions import AGENT, Store

from piwf_actors.errors import Rejected


@pytest.fixture
def store(database):
    s = Store(database)
    yield s
    s.db.close()


def _revision(store: Store, run_id: str) -> int:
    return store.db.execute_sql("SELECT revision FROM run WHERE run_id = ?", (run_id,)).fetchone()[0]


def _park_at_checkpoint(store: Store, run_id: str, now: float) -> str:
    store.claim(now)
    store.worker(run_id, "ready", {"start_at": "cp"}, now)
    asked = store.worker(run_id, "interaction_request", {
        "node_id": "cp", "attempt_id": f"att-{run_id}", "kind": "checkpoint",
        "contract": {"kind": "checkpoint", "prompt": "p"}}, now)
    return asked["value"]["request_id"]


def test_claim_order_validation_then_woken_then_fresh(store):
    store.call("run.create", {"workflow": "w", "run_id": "waiter", "input": {}}, now=1000.0)
    checkpoint = _park_at_checkpoint(store, "waiter", 1000.5)
    store.call("run.create", {"workflow": "w", "run_id": "agent", "input": {}}, now=1001.0)
    store.claim(1001.5)
    store.worker("agent", "ready", {"start_at": "ag"}, 1001.5)
    agent_request = store.worker("agent", "interaction_request", {
        "node_id": "ag", "attempt_id": "att-agent", "kind": "agent", "contract": AGENT}, 1001.5)["value"]["request_id"]
    for index in range(3):
        store.call("run.create", {"workflow": "w", "run_id": f"fresh{index}", "input": {}}, now=1002.0 + index)
    # The waiter is answered first, the agent's submission arrives later: validation still goes first.
    store.call("checkpoint.answer", {"request_id": checkpoint, "input": 1}, now=1010.0)
    store.call("interaction.submit", {"request_id": agent_request, "value": {"x": 1}}, now=1011.0)
    order = [store.claim(1020.0)["run_id"] for _ in range(5)]
    assert order == ["agent", "waiter", "fresh0", "fresh1", "fresh2"]


def test_a_resumed_run_goes_before_older_fresh_runs(store):
    store.call("run.create", {"workflow": "w", "run_id": "paused", "input": {}}, now=1000.0)
    store.call("run.pause", {"run_id": "paused"}, now=1000.1)
    store.call("run.create", {"workflow": "w", "run_id": "fresh", "input": {}}, now=1001.0)
    store.call("run.resume", {"run_id": "paused"}, now=1005.0)
    assert [store.claim(1010.0)["run_id"] for _ in range(2)] == ["paused", "fresh"]


def test_a_write_after_the_lease_expired_is_refused(store):
    # The fixture's lease was taken at t=1000 for 6000 s: it expires at t=7000.
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}}, now=6999.0)
    late = store.raw("run.create", {"workflow": "w", "run_id": "r2", "input": {}}, now=7000.5)
    assert not late.ok and late.error_code == "lease_expired", late
    assert "expired" in late.error
    count = store.db.execute_sql("SELECT count(*) FROM run").fetchone()[0]
    assert count == 1
    # Renewal is refused too once expired (the lease commands check their own identity).
    renew = store.raw("lease.renew", {"epoch": store.epoch, "host_id": "h", "token_hash": "t" * 64,
                                      "pid": os.getpid(), "process_start_identity": "1",
                                      "lease_s": 60}, now=7001.0)
    assert not renew.ok


def test_idempotency_records_outlive_prune(store):
    args = {"spec": {"workflow": "w", "input": {"a": 1}}, "client_id": "cli", "idempotency_key": "k1",
            "client_request_id": "req1", "payload": {"workflow": "w", "input": {"a": 1}}}
    first = store.call("run.start", args, now=1000.0)
    run_id = first["receipt"]["run_id"]
    store.call("run.cancel", {"run_id": run_id}, now=1001.0)
    pruned = store.call("state.prune", {"before": 2000.0, "apply": True}, now=2001.0)
    assert pruned["receipt"]["run_count"] == 1
    replay = store.call("run.start", args, now=2002.0)
    assert replay["outcome"] == "adopted" and replay["receipt"] == first["receipt"]
    assert store.db.execute_sql("SELECT count(*) FROM run").fetchone()[0] == 0
    # Idempotency records go on their own retention.
    store.call("state.prune", {"before": 2000.0, "idempotency_before": 1500.0, "apply": True}, now=2003.0)
    assert store.db.execute_sql("SELECT count(*) FROM host_command").fetchone()[0] == 0


def test_restart_rules(store):
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}}, now=1000.0)
    store.claim(1000.0)
    store.worker("r1", "ready", {"start_at": "a"})
    with pytest.raises(Rejected):
        store.call("run.restart", {"run_id": "r1", "expected_revision": _revision(store, "r1")})
    effect = store.worker("r1", "effect_reserve", {"node_id": "a", "idempotent": False})["value"]["effect_id"]
    store.call("run.cancel", {"run_id": "r1"})
    store.crash("r1")
    assert store.run("r1")[0] == "cancelled"
    revision = _revision(store, "r1")
    with pytest.raises(Rejected, match=effect):
        store.call("run.restart", {"run_id": "r1", "expected_revision": revision})
    store.call("effect.resolve", {"effect_id": effect, "action": "confirm", "output": None})
    revision = _revision(store, "r1")
    one = store.call("run.restart", {"run_id": "r1", "expected_revision": revision})
    two = store.call("run.restart", {"run_id": "r1", "expected_revision": revision, "client_id": "x",
                                     "idempotency_key": "y"})
    assert one["outcome"] == "accepted" and two["outcome"] == "adopted"
    assert one["receipt"] == two["receipt"]
    assert store.db.execute_sql("SELECT count(*) FROM run WHERE parent_run_id = 'r1'").fetchone()[0] == 1
