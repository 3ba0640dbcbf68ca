"""What the store commands of a trivial run cost the writer's thread, without the host around them.

Applies, in this one thread through `store.batch.apply_batch` (the writer's own function), the
commands a burst of trivial 3-node runs sends, batched as a burst shapes them: K `run.start`s
(with a client id and idempotency key, as clients send them) in one transaction, one
`scheduler.claim_next` for K slots, then K `ready`, K results of node a, K of b and K of c (the
last one ends each run), each kind a transaction of K worker messages. Prints the process CPU
(time.process_time) and the SQL statements (store/statement_count.py) per run, for --rounds
rounds of K runs on a fresh SQLite file (synchronous OFF unless told: the fsync is the disk's,
not the commands'). No actor, socket or worker: the figure is the commands' and SQL's share of
the writer thread's CPU, and it is the same script for any version of the commands (it speaks
only the command names and their arguments), so two checkouts compare in one sitting.

Run: .venv/bin/python bench/run_cost.py [--runs-per-batch 16] [--rounds 40] [--synchronous OFF]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piwf_actors.store.batch import apply_batch  # noqa: E402
from piwf_actors.store.database import StoreOptions, open_store  # noqa: E402
from piwf_actors.store.requests import WriteCommand  # noqa: E402

SOURCE = b"from piwf_actors.workflows import compute, define_workflow\n# a workflow snapshot of some size\n" * 20
GRAPH = b'{"nodes": {"a": {}, "b": {}, "c": {}}}'
TOKEN = "f" * 64


class Rounds:
    def __init__(self, db: Any, per_batch: int) -> None:
        self.db = db
        self.per_batch = per_batch
        self.ids = itertools.count(1)
        self.now = 1000.0
        self.statements = 0
        self.epoch = None
        self.epoch = self.one("lease.acquire", {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(),
                                                "process_start_identity": "1", "lease_s": 10 ** 9})["epoch"]

    def batch(self, commands: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        self.now += 0.001
        outcome = apply_batch(self.db, [WriteCommand(name, args, self.epoch) for name, args in commands], self.now)
        assert outcome.committed
        self.statements += getattr(outcome, "statements", 0)
        return [result.unwrap() for result in outcome.results]

    def one(self, name: str, args: dict[str, Any]) -> Any:
        return self.batch([(name, args)])[0]

    def round(self) -> None:
        k = self.per_batch
        starts = []
        for _ in range(k):
            n = next(self.ids)
            spec = {"workflow": "trivial3", "workflow_path": "/tmp/trivial3.py", "workflow_attr": "trivial",
                    "definition_digest": "d" * 64, "source": SOURCE, "graph": GRAPH, "input": {"i": n}}
            starts.append(("run.start", {"client_id": "bench", "idempotency_key": f"k{n}", "spec": spec,
                                         "payload": {"workflow": "trivial3", "input": {"i": n}}}))
        self.batch(starts)
        slots = [{"token_hash": TOKEN, "launch_id": f"l{next(self.ids)}"} for _ in range(k)]
        claims = self.one("scheduler.claim_next", {"slots": slots, "claim_lease_s": 60.0})
        assert len(claims) == k, len(claims)

        def message(claim: dict[str, Any], op: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            return ("worker.message", {"run_id": claim["run_id"], "launch_id": claim["launch_id"],
                                       "message_id": f"m{next(self.ids)}", "generation": claim["generation"],
                                       "token_hash": TOKEN, "op": op, "payload": payload, "expected_revision": None})

        self.batch([message(c, "ready", {"start_at": "a"}) for c in claims])
        for node, nxt in (("a", {"node": "b"}), ("b", {"node": "c"}), ("c", {"finish": True})):
            self.batch([message(c, "node_finished", {"node_id": node, "attempt_id": f"att{next(self.ids)}",
                                                     "new_attempt": True, "attempt_no": 1, "outcome": "ok",
                                                     "output": {"n": 1}, "next": nxt}) for c in claims])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-per-batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--synchronous", default="OFF", choices=["OFF", "NORMAL", "FULL"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="piwf-rc-", dir="/tmp") as tmp:
        db = open_store(Path(tmp) / "state.db", StoreOptions(synchronous=args.synchronous))
        try:
            rounds = Rounds(db, args.runs_per_batch)
            for _ in range(3):  # warm-up: statement caches, the blob rows
                rounds.round()
            rounds.statements = 0
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(args.rounds):
                rounds.round()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        finally:
            db.close()
    runs = args.rounds * args.runs_per_batch
    print(f"{runs} trivial 3-node runs, {args.runs_per_batch} per batch, synchronous={args.synchronous}: "
          f"CPU {cpu * 1000 / runs:.3f} ms per run (wall {wall * 1000 / runs:.3f}), "
          f"{rounds.statements / runs:.1f} statements per run")


if __name__ == "__main__":
    main()
