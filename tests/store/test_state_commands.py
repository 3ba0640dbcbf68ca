"""The `state` commands: status and verify (store/state_report.py), backup (store/backup.py), the
prune plan (store/prune_plan.py) and the `state.prune` command (store/commands/state.py).

The database is built with the real write commands (run.create, the
scheduler's claim, worker messages, run.cancel, run.pause, run.restart);
raw SQL only adds rows no command writes yet (interactive requests) and
breaks invariants on purpose.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import peewee as pw
import pytest

from piwf_actors.canonical import canonical_json
from piwf_actors.errors import Rejected
from piwf_actors.store import backup, prune_plan, state_report
from piwf_actors.store.batch import BatchOutcome, apply_batch
from piwf_actors.store.blobs import put_blob
from piwf_actors.store.database import StoreOptions, open_store
from piwf_actors.store.engines.postgresql import PostgresDatabase
from piwf_actors.store.migrations import LATEST_VERSION
from piwf_actors.store.requests import WriteCommand

T_OLD = 1_000_000.0
T_NEW = 2_000_000.0
BEFORE = 1_500_000.0

def blob_sized(value: dict[str, Any]) -> dict[str, Any]:
    """`value` padded past store/values.py's INLINE_VALUE_BYTES, so it is stored as a blob (small
    values are kept inline in their rows and have no blob to prune or verify)."""
    return {**value, "pad": "x" * 1100}


SHARED_INPUT = blob_sized({"shared": True})
FAILED_INPUT = blob_sized({"x": 2})
CANCEL_INPUT = blob_sized({"c": 3})
NEW_INPUT = blob_sized({"n": 4})
PARKED_INPUT = blob_sized({"p": 5})
BIG_OUTPUT = {"report": "x" * 200_000}  # big enough that pruning frees whole pages

PRUNED = ("run_done_old", "run_failed_old", "run_cancel_old")
SURVIVORS = ("run_done_new", "run_queued", "run_parked")
# host_command is not among them: idempotency records outlive their runs (pruned on their own retention).
RUN_TABLES = ("run_event", "node_attempt", "effect", "run_claim", "run_worker",
              "worker_message", "session_message", "interactive_request", "child_process")


def _sha(value: Any) -> str:
    import hashlib

    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


@dataclass
class Store:
    path: Any  # the database location: a SQLite file or a PostgresDatabase (the `database` fixture)
    db: pw.Database
    epoch: int = 0
    runner: dict[str, dict[str, Any]] = field(default_factory=dict)

    def batch(self, name: str, args: dict[str, Any], now: float) -> BatchOutcome:
        return apply_batch(self.db, [WriteCommand(name, args, self.epoch)], now)

    def call(self, name: str, args: dict[str, Any], now: float) -> Any:
        return self.batch(name, args, now).results[0].unwrap()

    @property
    def postgres(self) -> bool:
        return isinstance(self.path, PostgresDatabase)

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cursor = self.db.execute_sql(statement, params)
        return [] if cursor.description is None else cursor.fetchall()

    def count(self, table: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> int:
        return self.sql(f"SELECT count(*) FROM {table} WHERE {where}", params)[0][0]

    # --- building runs with the real commands ---------------------------------

    def claim(self, run_id: str, now: float) -> None:
        claim = self.call("scheduler.claim_next", {"token_hash": "c" * 64, "launch_id": f"re-{run_id}",
                                                   "claim_lease_s": 60}, now)
        assert claim["run_id"] == run_id
        self.runner[run_id] = {"generation": claim["generation"], "messages": 0}

    def worker(self, run_id: str, op: str, payload: dict[str, Any], now: float) -> Any:
        state = self.runner[run_id]
        state["messages"] += 1
        answer = self.call("worker.message", {
            "run_id": run_id, "launch_id": f"re-{run_id}", "message_id": f"m{state['messages']}",
            "generation": state["generation"], "token_hash": "c" * 64, "op": op, "payload": payload}, now)
        assert answer["outcome"] == "accepted", answer
        return answer["value"]

    def finish(self, run_id: str, now: float, input: Any, output: Any = None, fail: bool = False) -> None:
        self.call("run.create", {"workflow": "w", "run_id": run_id, "input": input}, now)
        self.claim(run_id, now)
        self.worker(run_id, "ready", {}, now)
        self.worker(run_id, "register_child", {"pid": 4242, "create_time": now, "kind": "shell"}, now)
        self.worker(run_id, "release_child", {"pid": 4242, "create_time": now}, now)
        if fail:
            self.worker(run_id, "node_finished", {"node_id": "a", "outcome": "error", "error": "boom",
                                                  "next": {"fail": {"code": "boom", "message": "it broke"}}}, now)
        else:
            self.worker(run_id, "node_finished", {"node_id": "a", "outcome": "ok", "output": output,
                                                  "notification": "finished", "next": {"finish": True}}, now)


def _interactive_request(store: Store, run_id: str, request_id: str, now: float) -> None:
    """No command writes interactive requests yet: insert one settled request with two submissions."""
    conn = store.db.connection()
    contract = put_blob(conn, canonical_json({"contract": request_id}).encode(), now)
    store.sql(
        """INSERT INTO interactive_request (request_id, run_id, node_id, attempt_id, kind, contract_sha256, digest,
               revision, status, accepted_submission_id, rejected_count, created_at, updated_at, settled_at)
           VALUES (?, ?, 'a', 'att', 'checkpoint', ?, 'd', 2, 'settled', ?, 1, ?, ?, ?)""",
        (request_id, run_id, contract, f"{request_id}-s1", now, now, now))
    for n, outcome in ((1, "accepted"), (2, "rejected")):
        store.sql(
            """INSERT INTO interactive_submission (submission_id, request_id, idempotency_key, payload_hash, payload,
                   outcome, provenance, submitted_at, decided_at) VALUES (?, ?, ?, 'h', '{}', ?, 'test', ?, ?)""",
            (f"{request_id}-s{n}", request_id, f"k{n}", outcome, now, now))


@pytest.fixture
def store(database: Any) -> Iterator[Store]:
    """Six runs: three old terminal ones (to prune), a recent done one, an old queued and an old parked one
    (on each engine: `database`)."""
    path = database
    db = open_store(path, StoreOptions(synchronous="OFF"))  # no fsync per batch: nothing here tests durability
    s = Store(path, db)
    s.epoch = s.call("lease.acquire", {"host_id": "h1", "token_hash": "t" * 64, "pid": os.getpid(),
                                       "process_start_identity": "1.0", "lease_s": 10_000_000}, T_OLD)["epoch"]
    s.finish("run_done_old", T_OLD, SHARED_INPUT, BIG_OUTPUT)
    _interactive_request(s, "run_done_old", "req_old", T_OLD)
    s.finish("run_failed_old", T_OLD + 1, FAILED_INPUT, fail=True)
    s.call("run.create", {"workflow": "w", "run_id": "run_cancel_old", "input": CANCEL_INPUT}, T_OLD + 2)
    s.call("run.cancel", {"run_id": "run_cancel_old", "client_id": "cli", "idempotency_key": "k-cancel"}, T_OLD + 2)
    s.finish("run_done_new", T_NEW, NEW_INPUT, {"result": "new"})
    s.call("run.create", {"workflow": "w", "run_id": "run_queued", "input": SHARED_INPUT}, T_OLD + 3)
    s.call("run.create", {"workflow": "w", "run_id": "run_parked", "input": PARKED_INPUT}, T_OLD + 4)
    s.call("run.pause", {"run_id": "run_parked"}, T_OLD + 4)
    try:
        yield s
    finally:
        db.close()


def _statuses(store: Store) -> dict[str, str]:
    return dict(store.sql("SELECT run_id, status FROM run"))


def test_fixture_states(store: Store) -> None:
    assert _statuses(store) == {"run_done_old": "done", "run_failed_old": "failed", "run_cancel_old": "cancelled",
                                "run_done_new": "done", "run_queued": "queued", "run_parked": "parked"}


# --- status -------------------------------------------------------------------


def test_state_status_numbers(store: Store) -> None:
    status = state_report.state_status(store.path)
    assert status["runs"] == {"queued": 1, "starting": 0, "running": 0, "parked": 1, "done": 2, "failed": 1,
                              "cancelled": 1}
    assert status["schema_version"] == LATEST_VERSION
    assert status["tables"]["run"] == 6
    assert status["tables"]["host_state"] == 1
    assert status["tables"]["run_event"] == store.count("run_event")
    assert set(status["tables"]) >= {"run", "blob", "run_event", "node_attempt", "interactive_submission"}
    assert status["blob_count"] == store.count("blob")
    assert status["blob_bytes"] == store.sql("SELECT sum(size) FROM blob")[0][0] > 200_000
    if store.postgres:
        assert status["engine"] == "postgresql" and status["db_bytes"] > status["blob_bytes"]
        assert status["page_count"] is None and status["wal_bytes"] is None
        return
    assert status["engine"] == "sqlite" and status["auto_vacuum"] == "incremental"
    assert status["page_size"] * status["page_count"] >= status["blob_bytes"]
    assert status["db_bytes"] == os.path.getsize(store.path)
    assert status["wal_bytes"] == os.path.getsize(f"{store.path}-wal") > 0
    assert 0 <= status["freelist_count"] < status["page_count"]


def test_missing_database_is_not_found(state_dir: Path) -> None:
    from piwf_actors.errors import NotFound

    with pytest.raises(NotFound):
        state_report.state_status(state_dir / "absent.db")
    assert not (state_dir / "absent.db").exists()


# --- verify -------------------------------------------------------------------


def test_verify_clean_database_is_ok(store: Store) -> None:
    report = state_report.verify(store.path, T_NEW)
    assert report["integrity"] == ["ok"]
    assert report["violations"] == []
    assert report["ok"] is True
    assert report["truncated"] == []


def test_expired_unreleased_lease_is_not_a_violation(store: Store) -> None:
    # The fixture's lease (10,000,000 s from T_OLD) expired long before T_OLD + 20,000,000 and was never
    # released: a crashed host.
    report = state_report.verify(store.path, T_OLD + 20_000_000)
    assert report["ok"] is True
    assert report["lease_live"] is False
    assert state_report.verify(store.path, T_OLD + 1)["lease_live"] is True


def _output_sha(store: Store, run_id: str) -> str:
    return store.sql("SELECT output_sha256 FROM run WHERE run_id = ?", (run_id,))[0][0]


def _event_seq(store: Store, run_id: str, kind: str) -> int:
    return store.sql("SELECT seq FROM run_event WHERE run_id = ? AND kind = ?", (run_id, kind))[0][0]


# Each case: a mutation that breaks invariants, and exactly the (code, run_id) pairs verify must report.
VIOLATIONS = {
    "blob_deleted": (
        lambda s: s.sql("DELETE FROM blob WHERE sha256 = ?", (_output_sha(s, "run_done_old"),)),
        {("missing_blob", "run_done_old")}),
    "terminal_event_deleted": (
        lambda s: s.sql("DELETE FROM run_event WHERE run_id = 'run_cancel_old' AND kind = 'run_cancelled'"),
        {("terminal_run_without_event", "run_cancel_old")}),
    "claim_on_done_run": (
        lambda s: s.sql("INSERT INTO run_claim (run_id, claim_token_hash, generation, launch_id, host_epoch, "
                        "claimed_at, expires_at, progress_at_claim) VALUES ('run_done_old', 'x', 9, 're', 1, 0, 0, 0)"),
        {("claim_on_inactive_run", "run_done_old")}),
    "parked_without_reason": (
        lambda s: s.sql("UPDATE run SET park_reason = NULL WHERE run_id = 'run_parked'"),
        {("parked_without_reason", "run_parked")}),
    "running_without_claim": (
        lambda s: s.sql("UPDATE run SET status = 'running' WHERE run_id = 'run_queued'"),
        {("active_run_without_claim", "run_queued")}),
    "event_gap": (
        lambda s: s.sql("DELETE FROM run_event WHERE run_id = 'run_done_new' AND seq = ?",
                        (_event_seq(s, "run_done_new", "run_started"),)),
        {("event_sequence_gap", "run_done_new")}),
    "output_on_interrupted_attempt": (
        # (A failed attempt may keep its output: a shell's exit code and stderr, for routing.)
        lambda s: s.sql("UPDATE node_attempt SET output_json = '{\"x\":2}', status = 'interrupted' "
                        "WHERE run_id = 'run_failed_old'"),
        {("output_without_success", "run_failed_old")}),
    "output_inline_and_blob": (
        lambda s: s.sql("UPDATE node_attempt SET output_json = '{}' WHERE run_id = 'run_done_old'"),
        {("value_stored_twice", "run_done_old")}),
    "two_accepted": (
        lambda s: s.sql("UPDATE interactive_submission SET outcome = 'accepted' WHERE request_id = 'req_old'"),
        {("two_accepted_submissions", "run_done_old")}),
    "run_row_deleted": (
        lambda s: s.sql("DELETE FROM run WHERE run_id = 'run_failed_old'"),
        {("attempt_of_missing_run", "run_failed_old"), ("event_of_missing_run", "run_failed_old")}),
    "lease_row_deleted": (
        lambda s: s.sql("DELETE FROM host_state"),
        {("lease_row_missing", None)}),
    "second_lease_row": (
        lambda s: s.sql("INSERT INTO host_state (id, epoch) VALUES (2, 0)"),
        {("lease_multiple_rows", None)}),
    "blob_bit_rot": (
        lambda s: s.sql("UPDATE blob SET data = ? WHERE sha256 = ?", (b'{"p":6}', _sha(PARKED_INPUT))),
        {("blob_digest_mismatch", None)}),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_verify_reports_broken_invariant(store: Store, case: str) -> None:
    mutate, expected = VIOLATIONS[case]
    mutate(store)
    report = state_report.verify(store.path, T_NEW)
    assert report["ok"] is False
    assert report["integrity"] == ["ok"]
    assert {(v["code"], v.get("run_id")) for v in report["violations"]} == expected
    for violation in report["violations"]:
        assert violation["detail"] and "\n" not in violation["detail"]


def test_verify_caps_findings_per_code(store: Store) -> None:
    for n in range(5):
        store.sql("INSERT INTO run_event (run_id, seq, kind, created_at) VALUES (?, 1, 'x', 0)", (f"ghost{n}",))
    report = state_report.verify(store.path, T_NEW, limit_per_code=3)
    assert [v["code"] for v in report["violations"]] == ["event_of_missing_run"] * 3
    assert report["truncated"] == ["event_of_missing_run"]


def test_verify_reports_a_corrupt_file_instead_of_raising(state_dir: Path) -> None:
    path = state_dir / "state.db"
    db = open_store(path)
    for n in range(300):
        put_blob(db.connection(), f"payload {n}".encode() * 100, 0.0)
    db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for page in (10, 20, 30):
        data[page * page_size:page * page_size + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    report = state_report.verify(path, T_NEW)
    assert report["ok"] is False
    assert report["integrity"] != ["ok"]


# --- backup -------------------------------------------------------------------


def _sqlite_only(store: Store) -> None:
    if store.postgres:
        pytest.skip("state.backup copies SQLite files (PostgreSQL: test_backup_of_postgres_points_to_pg_dump)")


def test_backup_of_postgres_points_to_pg_dump(store: Store, state_dir: Path) -> None:
    if not store.postgres:
        pytest.skip("PostgreSQL's refusal")
    with pytest.raises(Rejected, match="pg_dump"):
        backup.backup(store.path, str(state_dir / "copy.db"))
    assert not (state_dir / "copy.db").exists()


def test_backup_copies_verifies_and_is_private(store: Store, state_dir: Path) -> None:
    _sqlite_only(store)
    seen: list[tuple[int, int]] = []
    target = state_dir / "copy.db"
    result = backup.backup(store.path, str(target), lambda done, total: seen.append((done, total)),
                                pages_per_step=8)
    assert result["verified"] is True
    assert result["destination"] == str(target)
    assert result["runs"] == 6
    assert result["bytes"] == os.path.getsize(target) > 0
    assert result["pages"] > 8
    assert len(seen) > 1 and seen[-1][0] == seen[-1][1] == result["pages"]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    copy = sqlite3.connect(target)
    try:
        assert copy.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        assert copy.execute("SELECT count(*) FROM run").fetchone()[0] == 6
        assert copy.execute("SELECT count(*) FROM blob").fetchone()[0] == store.count("blob")
        assert copy.execute("PRAGMA user_version").fetchone()[0] == LATEST_VERSION
    finally:
        copy.close()
    assert state_report.verify(target, T_NEW)["ok"] is True


def test_backup_is_one_snapshot_while_the_writer_commits(store: Store, state_dir: Path) -> None:
    _sqlite_only(store)
    created: list[str] = []

    def write_between_steps(done: int, total: int) -> None:
        run_id = f"run_during_{len(created)}"
        store.call("run.create", {"workflow": "w", "run_id": run_id, "input": {"during": len(created)}}, T_NEW)
        created.append(run_id)

    result = backup.backup(store.path, str(state_dir / "copy.db"), write_between_steps, pages_per_step=4)
    assert len(created) > 2
    assert result["runs"] == 6 and result["verified"] is True
    copy = sqlite3.connect(state_dir / "copy.db")
    try:
        assert copy.execute("SELECT count(*) FROM run").fetchone()[0] == 6
    finally:
        copy.close()
    assert store.count("run") == 6 + len(created)


@pytest.mark.parametrize("destination, reason", [
    ("copy.db", "absolute"),
    ("", "non-empty"),
    ("/nonexistent-dir-piwf/copy.db", "does not exist"),
])
def test_backup_refuses_bad_destinations(store: Store, destination: str, reason: str) -> None:
    _sqlite_only(store)
    with pytest.raises(Rejected, match=reason):
        backup.backup(store.path, destination)
    assert not Path("copy.db").exists()


def test_backup_refuses_an_existing_destination(store: Store, state_dir: Path) -> None:
    _sqlite_only(store)
    target = state_dir / "copy.db"
    target.write_bytes(b"precious")
    with pytest.raises(Rejected, match="already exists"):
        backup.backup(store.path, str(target))
    assert target.read_bytes() == b"precious"
    (state_dir / "other.db-wal").write_bytes(b"left over")
    with pytest.raises(Rejected, match="already exists"):
        backup.backup(store.path, str(state_dir / "other.db"))
    assert not (state_dir / "other.db").exists()


def test_failed_backup_removes_the_partial_copy(store: Store, state_dir: Path) -> None:
    _sqlite_only(store)
    def explode(done: int, total: int) -> None:
        raise RuntimeError("disk pulled")

    with pytest.raises(RuntimeError, match="disk pulled"):
        backup.backup(store.path, str(state_dir / "copy.db"), explode, pages_per_step=1)
    assert sorted(p.name for p in state_dir.iterdir() if p.name.startswith("copy")) == []


# --- prune plan (read side) ---------------------------------------------------


def _exclusive_blobs() -> set[str]:
    """The blobs only the three old terminal runs reference."""
    return {_sha(BIG_OUTPUT), _sha({"contract": "req_old"}), _sha(FAILED_INPUT), _sha(CANCEL_INPUT)}


def _pruned_event_count(store: Store) -> int:
    return store.count("run_event", "run_id IN (?, ?, ?)", PRUNED)


def test_prune_plan_selects_old_terminal_runs_only(store: Store) -> None:
    before_status = state_report.state_status(store.path)
    plan = prune_plan.prune_plan(store.path, BEFORE)
    assert plan["runs"] == list(PRUNED)  # oldest finished first
    assert plan["run_count"] == 3 and plan["remaining"] == 0
    assert plan["event_count"] == _pruned_event_count(store)
    assert plan["blob_count"] == len(_exclusive_blobs())
    exclusive = tuple(_exclusive_blobs())
    assert plan["bytes"] == store.sql(f"SELECT sum(size) FROM blob WHERE sha256 IN ({','.join('?' * 4)})",
                                      exclusive)[0][0]
    assert plan["bytes_freed_estimate"] > plan["bytes"] > 200_000
    assert state_report.state_status(store.path)["tables"] == before_status["tables"]


def test_prune_plan_limit_and_cutoff(store: Store) -> None:
    plan = prune_plan.prune_plan(store.path, BEFORE, limit=1)
    assert plan["runs"] == ["run_done_old"] and plan["remaining"] == 2
    assert prune_plan.prune_plan(store.path, T_OLD)["runs"] == []  # finished_at == T_OLD is not < T_OLD
    everything = prune_plan.prune_plan(store.path, T_NEW + 1)
    assert set(everything["runs"]) == {*PRUNED, "run_done_new"}


@pytest.mark.parametrize("before, limit", [(float("nan"), 10), ("yesterday", 10), (True, 10), (BEFORE, 0),
                                           (BEFORE, 1.5)])
def test_prune_plan_refuses_bad_arguments(store: Store, before: Any, limit: Any) -> None:
    with pytest.raises(Rejected):
        prune_plan.prune_plan(store.path, before, limit)


def test_prune_never_selects_unfinished_claimed_or_parent_runs(store: Store) -> None:
    # An old queued and parked run, even with a finished_at, are not terminal.
    store.sql("UPDATE run SET finished_at = ? WHERE run_id IN ('run_queued', 'run_parked')", (T_OLD,))
    # A terminal run that still carries a claim (verify flags it) is left alone.
    store.sql("INSERT INTO run_claim (run_id, claim_token_hash, generation, launch_id, host_epoch, claimed_at, "
              "expires_at, progress_at_claim) VALUES ('run_failed_old', 'x', 9, 're', 1, 0, 0, 0)")
    # A terminal run whose restarted child has not ended yet is kept for the child.
    revision = store.sql("SELECT revision FROM run WHERE run_id = 'run_cancel_old'")[0][0]
    store.call("run.restart", {"run_id": "run_cancel_old", "expected_revision": revision}, T_NEW)
    assert prune_plan.prune_plan(store.path, T_NEW + 1)["runs"] == ["run_done_old", "run_done_new"]


# --- state.prune (write command) ------------------------------------------------


def test_dry_run_changes_nothing(store: Store) -> None:
    tables = state_report.state_status(store.path)["tables"]
    changes_before = store.db.connection().total_changes
    outcome = store.batch("state.prune", {"before": BEFORE}, T_NEW)
    assert outcome.committed
    answer = outcome.results[0].unwrap()
    assert answer["outcome"] == "accepted"
    receipt = answer["receipt"]
    plan = prune_plan.prune_plan(store.path, BEFORE)
    assert receipt == {"applied": False, "before": BEFORE, "run_count": 3, "remaining": 0,
                       "event_count": plan["event_count"], "blob_count": 4,
                       "bytes_freed_estimate": plan["bytes_freed_estimate"], "idempotency_records": 0,
                       "runs": list(PRUNED)}
    assert store.db.connection().total_changes == changes_before
    assert state_report.state_status(store.path)["tables"] == tables
    assert store.count("host_command", "operation = 'state.prune'") == 0


def test_apply_removes_exactly_the_selected_runs_and_their_blobs(store: Store) -> None:
    status_before = state_report.state_status(store.path)
    blobs_before = {row[0] for row in store.sql("SELECT sha256 FROM blob")}
    events_pruned = _pruned_event_count(store)
    assert store.count("host_command", "run_id = 'run_cancel_old'") == 1
    assert store.count("child_process", "run_id = 'run_done_old'") == 1
    assert store.count("session_message", "run_id = 'run_done_old'") == 1

    outcome = store.batch("state.prune", {"before": BEFORE, "apply": True}, T_NEW + 10)
    receipt = outcome.results[0].unwrap()["receipt"]
    assert receipt["applied"] is True
    assert receipt["run_count"] == 3 and receipt["runs"] == list(PRUNED)
    assert receipt["event_count"] == events_pruned
    assert receipt["blob_count"] == 4
    if store.postgres:  # autovacuum reclaims the rows after the commit
        assert receipt["vacuumed_pages"] == 0 and receipt["bytes_returned"] == 0
    else:
        assert receipt["vacuumed_pages"] > 0 and receipt["bytes_returned"] > 200_000
    assert outcome.changes.runs >= set(PRUNED)

    assert set(_statuses(store)) == set(SURVIVORS)
    marks = ",".join("?" * len(PRUNED))
    for table in RUN_TABLES:
        assert store.count(table, f"run_id IN ({marks})", PRUNED) == 0, table
    assert store.count("interactive_submission") == 0
    blobs_after = {row[0] for row in store.sql("SELECT sha256 FROM blob")}
    assert blobs_before - blobs_after == _exclusive_blobs()
    assert _sha(SHARED_INPUT) in blobs_after  # still the queued run's input
    # Survivors keep every row of theirs.
    assert store.count("run_event", "run_id = 'run_done_new'") > 0
    assert store.count("node_attempt", "run_id = 'run_done_new'") == 1

    status_after = state_report.state_status(store.path)
    if not store.postgres:
        assert status_after["freelist_count"] == 0
        assert status_after["page_count"] < status_before["page_count"]
    assert state_report.verify(store.path, T_NEW + 10)["ok"] is True
    # The idempotency record of the pruned cancel stays until its own retention passes.
    assert store.count("host_command", "run_id = 'run_cancel_old'") == 1
    # Nothing left to prune.
    again = store.call("state.prune", {"before": BEFORE, "apply": True}, T_NEW + 11)["receipt"]
    assert again["run_count"] == 0 and again["runs"] == [] and again["idempotency_records"] == 0
    expired = store.call("state.prune", {"before": BEFORE, "apply": True, "idempotency_before": BEFORE},
                         T_NEW + 12)["receipt"]
    assert expired["idempotency_records"] == 1
    assert store.count("host_command", "run_id = 'run_cancel_old'") == 0


def test_apply_respects_max_runs(store: Store) -> None:
    receipt = store.call("state.prune", {"before": BEFORE, "apply": True, "max_runs": 2}, T_NEW)["receipt"]
    assert receipt["runs"] == ["run_done_old", "run_failed_old"] and receipt["remaining"] == 1
    assert set(_statuses(store)) == {"run_cancel_old", *SURVIVORS}


def test_apply_is_recorded_for_idempotency(store: Store) -> None:
    args = {"before": BEFORE, "apply": True, "client_id": "cli", "idempotency_key": "prune-1"}
    first = store.call("state.prune", args, T_NEW)
    assert first["outcome"] == "accepted" and first["receipt"]["run_count"] == 3
    replay = store.call("state.prune", args, T_NEW + 1)
    assert replay["outcome"] == "adopted"
    assert replay["receipt"] == json.loads(json.dumps(first["receipt"]))
    other = store.batch("state.prune", {**args, "before": T_NEW + 5}, T_NEW + 2).results[0]
    assert not other.ok and other.error_code == "conflict"
    assert set(_statuses(store)) == set(SURVIVORS)  # the conflicting request pruned nothing


def test_prune_refuses_bad_arguments_and_stale_epochs(store: Store) -> None:
    bad = store.batch("state.prune", {"before": "soon", "apply": True}, T_NEW).results[0]
    assert not bad.ok and bad.error_code == "rejected"
    bad = store.batch("state.prune", {"before": BEFORE, "apply": "yes"}, T_NEW).results[0]
    assert not bad.ok and bad.error_code == "rejected"
    stale = apply_batch(store.db, [WriteCommand("state.prune", {"before": BEFORE, "apply": True},
                                                store.epoch - 1)], T_NEW).results[0]
    assert not stale.ok and stale.error_code == "stale_epoch"
    assert store.count("run") == 6


def test_prune_and_its_vacuum_work_inside_a_savepoint(store: Store) -> None:
    """With per-command savepoints (the writer's replay mode) the vacuum runs inside SAVEPOINT cmd."""
    outcome = apply_batch(store.db, [
        WriteCommand("state.prune", {"before": BEFORE, "apply": True}, store.epoch),
        WriteCommand("run.restart", {"run_id": "run_done_new", "expected_revision": 1}, store.epoch),  # conflict
    ], T_NEW, savepoints=True)
    assert outcome.committed
    assert outcome.results[0].ok, outcome.results[0]
    receipt = outcome.results[0].value["receipt"]
    assert receipt["run_count"] == 3 and (receipt["vacuumed_pages"] > 0) is not store.postgres
    assert outcome.results[1].error_code == "conflict"
    assert set(_statuses(store)) == set(SURVIVORS)
    assert state_report.verify(store.path, T_NEW)["ok"] is True


def test_a_graph_blob_stays_while_a_run_draws_with_it_and_verify_misses_none(store: Store) -> None:
    """Runs of one definition share one stored graph (run.graph_sha256): prune frees it with the last run
    that references it, never before; verify reports a run whose graph blob is gone."""
    from piwf_actors.workflows import compute, define_workflow
    from piwf_actors.workflows.graph_data import graph_blob

    graph = graph_blob(define_workflow(name="w", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[]))
    for run_id, at in (("run_graph_old", T_OLD), ("run_graph_new", T_NEW)):
        store.call("run.create", {"workflow": "w", "run_id": run_id, "graph": graph}, at)
        store.call("run.cancel", {"run_id": run_id}, at)
    key = _sha_bytes(graph)
    assert store.sql("SELECT DISTINCT graph_sha256 FROM run WHERE run_id LIKE 'run_graph_%'") == [(key,)]
    assert store.count("blob", "sha256 = ?", (key,)) == 1
    store.call("state.prune", {"before": BEFORE, "apply": True}, T_NEW + 1)
    assert store.count("run", "run_id = 'run_graph_old'") == 0
    assert store.count("blob", "sha256 = ?", (key,)) == 1  # run_graph_new still draws with it
    store.sql("DELETE FROM blob WHERE sha256 = ?", (key,))
    found = state_report.verify(store.path, T_NEW + 2)
    assert {(v["code"], v.get("run_id")) for v in found["violations"]} == {("missing_blob", "run_graph_new")}
    put_blob(store.db.connection(), graph, T_NEW)  # back, so the last prune has it to free
    store.call("state.prune", {"before": T_NEW + 10, "apply": True}, T_NEW + 20)
    assert store.count("run", "run_id = 'run_graph_new'") == 0 and store.count("blob", "sha256 = ?", (key,)) == 0


def _sha_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
