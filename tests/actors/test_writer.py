from __future__ import annotations

import os
import threading
import time

import pykka
import pytest
from testsupport import fill_up, small_filesystem

from piwf_actors.actors.writer import Subscribe, start_writer
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import open_store
from piwf_actors.store.requests import ChangeNotice, WriteCommand


def _lease_args(**extra):
    return {"host_id": "h1", "token_hash": "t" * 64, "pid": os.getpid(),
            "process_start_identity": "1.0", "lease_s": 60, **extra}


@pytest.fixture
def writer(database):
    """A writer on each engine (`database`), holding the lease."""
    open_store(database).close()
    handle = start_writer(database)
    epoch = handle.call("lease.acquire", _lease_args())["epoch"]
    yield handle.with_epoch(epoch)
    handle.ref.stop()


def _count(database, sql: str) -> int:
    db = open_store(database)
    try:
        return db.execute_sql(sql).fetchone()[0]
    finally:
        db.close()


def test_concurrent_senders_all_get_their_own_result(writer, database):
    run_id = writer.call("run.create", {"workflow": "w", "input": {}})["run_id"]
    senders, per_sender = 16, 200
    seen: dict[int, list[int]] = {}

    def send(sender: int) -> None:
        seen[sender] = [writer.call("run.append_note", {"run_id": run_id, "payload": {"s": sender, "i": i}})
                        for i in range(per_sender)]

    threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_seqs = sorted(s for seqs in seen.values() for s in seqs)
    # run_created took seq 1; every note got a distinct, gap-free sequence.
    assert all_seqs == list(range(2, 2 + senders * per_sender))
    for seqs in seen.values():
        assert seqs == sorted(seqs)  # one sender's writes are applied in order
    assert _count(database, "SELECT count(*) FROM run_event") == 1 + senders * per_sender
    stats = writer.stats()
    assert stats.commands >= senders * per_sender
    assert stats.commits < stats.commands  # batches really held many commands


def test_failing_command_does_not_undo_batch_mates(database):
    db = open_store(database)
    try:
        epoch = apply_batch(db, [WriteCommand("lease.acquire", _lease_args())], time.time()).results[0].value["epoch"]
        outcome = apply_batch(db, [
            WriteCommand("run.create", {"workflow": "a", "run_id": "run_a"}, epoch),
            WriteCommand("run.create", {"workflow": "dup", "run_id": "run_a"}, epoch),  # refused: exists
            WriteCommand("run.append_note", {"run_id": "run_missing"}, epoch),  # refused: no such run
            WriteCommand("run.append_note", {"run_id": "run_a", "kind": "bogus"}, epoch),  # refused
            WriteCommand("no.such.command", {}, epoch),
            WriteCommand("run.create", {"workflow": "b", "run_id": "run_b"}, epoch),
            WriteCommand("run.append_note", {"run_id": "run_b", "payload": 1}, epoch),
        ], time.time())
        assert outcome.committed
        assert [r.ok for r in outcome.results] == [True, False, False, False, False, True, True]
        assert [r.error_code for r in outcome.results] == [
            None, "rejected", "not_found", "rejected", "unknown_command", None, None]
        assert sorted(r[0] for r in db.execute_sql("SELECT run_id FROM run")) == ["run_a", "run_b"]
        assert db.execute_sql("SELECT workflow FROM run WHERE run_id='run_a'").fetchone()[0] == "a"
        # The refused duplicate's run_created event was rolled back with its savepoint.
        assert db.execute_sql("SELECT count(*) FROM run_event WHERE run_id='run_a'").fetchone()[0] == 1
    finally:
        db.close()


def test_stale_epoch_is_refused_and_changes_nothing(writer, database):
    stale = writer.host_epoch
    # Another host takes over: release and re-acquire moves the epoch on.
    writer.call("lease.release", {"epoch": stale, "host_id": "h1", "token_hash": "t" * 64,
                                  "pid": os.getpid(), "process_start_identity": "1.0"})
    new_epoch = writer.call("lease.acquire", _lease_args(host_id="h2"))["epoch"]
    assert new_epoch == stale + 1
    before = _count(database, "SELECT count(*) FROM run")
    result = writer.execute("run.create", {"workflow": "w"}, host_epoch=stale)
    assert not result.ok and result.error_code == "stale_epoch"
    assert _count(database, "SELECT count(*) FROM run") == before
    assert writer.execute("run.create", {"workflow": "w"}, host_epoch=new_epoch).ok


def test_unleased_host_cannot_write(writer):
    writer.call("lease.release", {"epoch": writer.host_epoch, "host_id": "h1", "token_hash": "t" * 64,
                                  "pid": os.getpid(), "process_start_identity": "1.0"})
    assert writer.execute("run.create", {"workflow": "w"}).error_code == "stale_epoch"


class _Collector(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.notices: list[ChangeNotice] = []
        self.got = threading.Event()

    def on_receive(self, message):
        if isinstance(message, ChangeNotice):
            self.notices.append(message)
            self.got.set()
        return list(self.notices)


def test_change_notices_follow_commits(writer):
    collector = _Collector.start()
    try:
        writer.ref.tell(Subscribe(collector))
        run_id = writer.call("run.create", {"workflow": "w"})["run_id"]
        deadline = time.time() + 5
        notices = []
        while time.time() < deadline:
            notices = collector.ask("get")
            if any(run_id in n.runs for n in notices):
                break
            time.sleep(0.01)
        notice = next(n for n in notices if run_id in n.runs)
        assert "run" in notice.tables and notice.commit_seq >= 1
    finally:
        collector.stop()


def test_writer_stop_answers_queued_commands(database):
    open_store(database).close()
    handle = start_writer(database)
    handle.ref.stop()
    result = handle.execute("run.create", {"workflow": "w"}, host_epoch=1)
    assert not result.ok and result.error_code == "writer_stopped"


@pytest.fixture
def tiny_fs():
    with small_filesystem("3m") as mount:
        yield mount


def test_disk_full_is_a_typed_error_and_the_writer_recovers(tiny_fs):
    db_path = tiny_fs / "state.db"
    open_store(db_path).close()
    handle = start_writer(db_path)
    try:
        epoch = handle.call("lease.acquire", _lease_args())["epoch"]
        writer = handle.with_epoch(epoch)
        run_id = writer.call("run.create", {"workflow": "w"})["run_id"]
        filler = tiny_fs / "filler"
        fill_up(filler)
        errors = []
        for i in range(200):
            result = writer.execute("run.append_note", {"run_id": run_id, "payload": "x" * 20000 + str(i)})
            if not result.ok:
                errors.append(result.error_code)
                break
        assert errors == ["disk_full"], errors
        assert handle.ref.is_alive()
        filler.unlink()
        ok = writer.execute("run.append_note", {"run_id": run_id, "payload": "after"})
        assert ok.ok, ok.error
    finally:
        handle.ref.stop()
