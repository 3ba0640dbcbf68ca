"""Several real processes race for the host lease on one state database.

Each racer opens the same `state.db` with `open_store` and loops: try
`lease.acquire` through `apply_batch` (a refusal means someone else holds
it), record (epoch, pid), release, until it has held the lease N times. The
lease is long (an hour), so only a release frees it: every success must
follow the previous holder's release, inside SQLite's write lock.

Mutual exclusion is checked twice: by the epochs (unique, gap-free, final
epoch = number of acquisitions) and by an oracle outside the database — a
holder file each racer creates with O_EXCL right after acquiring and removes
right before releasing; a racer that finds it already there has overlapped
with another holder.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from piwf_actors.store.database import open_store

REPO = Path(__file__).resolve().parents[2]
RACERS = 6
ACQUISITIONS_EACH = 25

RACER = r"""
import json, os, random, sys, time
from pathlib import Path

from piwf_actors.actors.hostlock import process_start_identity
from piwf_actors.store.batch import apply_batch
from piwf_actors.store.database import open_store
from piwf_actors.store.requests import WriteCommand

db_path, run_dir, wanted = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
me = os.getpid()
identity = process_start_identity(me)
db = open_store(db_path)
(run_dir / f"ready-{me}").touch()
deadline = time.monotonic() + 30
while not (run_dir / "go").exists():
    if time.monotonic() > deadline:
        sys.exit("racer: no go signal within 30 s")
    time.sleep(0.001)

def apply(name, args):
    return apply_batch(db, [WriteCommand(name, args)], time.time()).results[0]

holder = run_dir / "holder"
stats = {"attempts": 0, "refused": 0, "store_errors": [], "overlaps": 0, "row_mismatches": 0,
         "release_retries": 0}
with open(run_dir / f"result-{me}.txt", "w") as out:
    held = 0
    while held < wanted:
        stats["attempts"] += 1
        token_hash = f"{me:016x}{held:048x}"
        claim = {"host_id": f"racer-{me}", "token_hash": token_hash, "pid": me,
                 "process_start_identity": identity}
        result = apply("lease.acquire", {**claim, "lease_s": 3600, "state_dir": str(run_dir)})
        if not result.ok:
            if result.error_code == "host_already_running":
                stats["refused"] += 1
            else:
                stats["store_errors"].append(f"{result.error_code}: {result.error}")
            time.sleep(random.random() * 0.002)  # back off a little; not synchronisation
            continue
        epoch = result.value["epoch"]
        try:
            os.close(os.open(holder, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            mine = True
        except FileExistsError:
            stats["overlaps"] += 1
            mine = False
        row = db.connection().execute("SELECT epoch, pid, token_hash FROM host_state WHERE id = 1").fetchone()
        if tuple(row) != (epoch, me, token_hash):
            stats["row_mismatches"] += 1
        out.write(f"{epoch} {me}\n")
        out.flush()
        time.sleep(random.random() * 0.002)  # "work" while holding, so others find the lease held
        if mine:
            os.unlink(holder)
        while True:  # a release lost to a storage error would block every racer for an hour
            released = apply("lease.release", {**claim, "epoch": epoch})
            if released.ok:
                if released.value is not True:
                    stats["row_mismatches"] += 1
                break
            stats["release_retries"] += 1
        held += 1
db.close()
(run_dir / f"stats-{me}.json").write_text(json.dumps(stats))
"""


@pytest.fixture
def racers():
    """The racer processes started by a test; any still running are SIGKILLed in teardown."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def test_racing_processes_never_share_an_epoch(state_dir, racers) -> None:
    database = state_dir / "state.db"
    open_store(database).close()
    run_dir = state_dir / "race"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(RACERS):
        racers.append(subprocess.Popen(
            [sys.executable, "-c", RACER, str(database), str(run_dir), str(ACQUISITIONS_EACH)],
            env=env, cwd=str(REPO), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        ))

    def all_ready() -> bool:
        for proc in racers:
            if proc.poll() is not None:
                pytest.fail(f"racer {proc.pid} exited early:\n{proc.communicate()[0].decode()}")
        return len(list(run_dir.glob("ready-*"))) == RACERS

    _wait_for(all_ready, 30, "every racer to open the database")
    (run_dir / "go").touch()
    for proc in racers:
        output, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, f"racer {proc.pid} failed:\n{output.decode()}"

    per_process: dict[int, list[int]] = {}
    for proc in racers:
        lines = (run_dir / f"result-{proc.pid}.txt").read_text().split()
        epochs = [int(e) for e, pid in zip(lines[::2], lines[1::2], strict=True) if int(pid) == proc.pid]
        assert len(epochs) * 2 == len(lines)
        per_process[proc.pid] = epochs
    stats = {pid: json.loads((run_dir / f"stats-{pid}.json").read_text()) for pid in per_process}

    total = RACERS * ACQUISITIONS_EACH
    all_epochs = [e for epochs in per_process.values() for e in epochs]
    assert all(len(epochs) == ACQUISITIONS_EACH for epochs in per_process.values())
    assert len(set(all_epochs)) == len(all_epochs), "two holders were given the same epoch"
    for pid, epochs in per_process.items():
        assert all(a < b for a, b in zip(epochs, epochs[1:], strict=False)), f"epochs of {pid} not increasing: {epochs}"
    # Every acquisition moved the epoch by exactly one; refused ones moved nothing.
    assert sorted(all_epochs) == list(range(1, total + 1))
    assert all(s["overlaps"] == 0 for s in stats.values()), stats
    assert all(s["row_mismatches"] == 0 for s in stats.values()), stats
    # The race was real: racers found the lease held by someone else.
    assert sum(s["refused"] for s in stats.values()) > 0, stats

    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        epoch, host_id, pid = conn.execute("SELECT epoch, host_id, pid FROM host_state WHERE id = 1").fetchone()
    finally:
        conn.close()
    assert epoch == total
    assert (host_id, pid) == (None, None)
