"""A recorded command's name is written once, in its `@command(...)`: the batch hands it to the
context, and `recorded` files the client's idempotency record under it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import peewee as pw
import pytest

from piwf_actors.store.batch import apply_batch
from piwf_actors.store.commands.idempotency import recorded
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.requests import ChangeSet, WriteCommand

NOW = 1000.0
#: Registered only here: its function never names itself, so its record can only get this name
#: from the registry.
PROBE = "test.recorded_probe"


@command(PROBE)
def _probe(ctx: WriteContext, args: dict[str, Any]) -> Any:
    return recorded(ctx, args, lambda: {"seen_as": ctx.command})


class _Store:
    def __init__(self, path: Path) -> None:
        self.db: pw.Database = open_store(path, StoreOptions(synchronous="OFF"))
        self.epoch = 0
        self.epoch = self.call("lease.acquire", {"host_id": "h", "token_hash": "t" * 64, "pid": os.getpid(),
                                                 "process_start_identity": "1", "lease_s": 6000})["epoch"]

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return apply_batch(self.db, [WriteCommand(name, args, self.epoch)], NOW).results[0].unwrap()

    def operations(self, key: str) -> list[str]:
        return [row[0] for row in self.db.execute_sql(
            "SELECT operation FROM host_command WHERE idempotency_key = ?", (key,)).fetchall()]


@pytest.fixture
def store(state_dir: Path) -> Iterator[_Store]:
    s = _Store(state_dir / "state.db")
    yield s
    s.db.close()


def test_the_running_command_name_reaches_the_context_and_the_record(store: _Store) -> None:
    answer = store.call(PROBE, {"client_id": "cli", "idempotency_key": "k1"})
    assert answer["outcome"] == "accepted" and answer["receipt"] == {"seen_as": PROBE}
    assert store.operations("k1") == [PROBE]
    assert store.call(PROBE, {"client_id": "cli", "idempotency_key": "k1"})["outcome"] == "adopted"


@pytest.mark.parametrize("name, args", [
    ("run.cancel", {"run_id": "r1"}),
    ("run.pause", {"run_id": "r1"}),
    ("state.prune", {"before": 1.0, "apply": True}),
    ("state.backup", {"refusal": {"code": "rejected", "message": "destination exists"}}),
])
def test_package_commands_record_under_their_registered_name(store: _Store, name: str, args: dict[str, Any]) -> None:
    store.call("run.create", {"workflow": "w", "run_id": "r1", "input": {}})
    apply_batch(store.db, [WriteCommand(name, {**args, "client_id": "cli", "idempotency_key": "k"}, store.epoch)],
                NOW)
    assert store.operations("k") == [name]


def test_recorded_outside_a_registered_command(state_dir: Path) -> None:
    """A context the batch did not build has no command name: unkeyed it still runs, keyed it refuses
    to file a record under no name."""
    db = open_store(state_dir / "state.db", StoreOptions(synchronous="OFF"))
    try:
        ctx = WriteContext(db.connection(), NOW, 1, ChangeSet())
        assert recorded(ctx, {}, lambda: {"ran": True})["receipt"] == {"ran": True}
        with pytest.raises(ValueError, match="ctx.command"):
            recorded(ctx, {"client_id": "cli", "idempotency_key": "k"}, lambda: {"ran": True})
    finally:
        db.close()
