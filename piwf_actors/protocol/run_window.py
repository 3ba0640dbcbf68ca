"""`RunWindow`: the newest runs and the run counts, kept in memory and patched from change notices.

Owned by the ClientGateway and used from its thread only. It feeds the
`runs` watch, the counts of the `host` watch, and `run.list` whenever the
window holds the answer.

Why it stays equal to a fresh read of the database:

- Every commit that changes a run's row names that run in its change notice.
  `note` only adds those ids to `pending` (a set union: the whole cost of the
  window while nobody looks); `sync` reads just those rows, in one query,
  and patches.
- The window is the newest `capacity` runs by (created_at, run_id). A run's
  created_at never changes, so a run enters the window only as a new run and
  leaves it only when newer ones push it out (or when it is deleted).
- The counts are patched from each read row's previous status. The window
  knows the status of every live (non-terminal) run as last read (at the
  last rebuild or since) and of every run in the window. A run it does not
  know is either new since, and not counted yet, or had ended when it was
  counted; a terminal status is final, so such a run is counted with the
  status it has now. The rowid tells which: SQLite gives a new row
  max(rowid) + 1, so a row above the highest rowid counted so far is new.
  (Only a deletion can make SQLite reuse a rowid; a deletion rebuilds.)
  This holds however far the database is ahead of the notices taken in.
- Whatever it cannot patch exactly — a run deleted (prune), a live run it
  did not know, a notice that touched runs without naming them, a backlog of
  more than MAX_PENDING runs — rebuilds the window from one read transaction.
"""

from __future__ import annotations

import bisect
from typing import Any

import msgpack

from piwf_actors.statuses import RUN_STATUSES, TERMINAL_STATUSES
from piwf_actors.store import queries
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice
from piwf_actors.wire import pack

#: How many of the newest runs the window holds: the `runs` watch shows 50, run.list 100 by default.
CAPACITY = 200
#: The `runs` watch shows this many of the newest runs.
RUNS_VIEW_LIMIT = 50
#: A backlog of more runs than this is cheaper to rebuild than to read row by row.
MAX_PENDING = 2000

_PACKER = msgpack.Packer(use_bin_type=True)
_RUNS_KEY = pack("runs")
_COUNTS_KEY = pack("counts")


def _pack_row(row: dict[str, Any]) -> bytes:
    # A row read from SQLite holds only str, int, float and None: valid wire values by construction
    # (sqlite3 refuses invalid UTF-8, integers are 64-bit), so the codec's checking walk is skipped.
    return _PACKER.pack(row)


class RunWindow:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        #: Runs named by change notices and not read yet.
        self.pending: set[str] = set()
        #: The commit sequence of the last notice noted (the gateway compares it with the writes it answered).
        self.seq = 0
        #: Grows whenever a row of the window or a count changes.
        self.version = 0
        self.rebuilds = 0
        self._stale = True
        self._keys: list[tuple[float, str]] = []  # (created_at, run_id) of the window's runs, oldest first
        self._rows: dict[str, dict[str, Any]] = {}
        self._packed: dict[str, bytes] = {}
        self._complete = False  # the window holds every run there is
        self._known: dict[str, str] = {}  # run_id → status: every live run and every run in the window
        self._counts: dict[str, int] = {}
        self._top_rowid = 0  # every run with a rowid up to this one is counted
        self._payload: tuple[int, int, bytes] | None = None  # (version, limit, runs view packed)

    # --- keeping up ----------------------------------------------------------------------------

    def note(self, notice: ChangeNotice) -> None:
        """Remember which runs `notice` changed (cheap: nothing is read until someone looks)."""
        self.seq = max(self.seq, notice.commit_seq)
        if notice.runs:
            self.pending.update(notice.runs)
        elif "run" in notice.tables:
            self._stale = True  # runs changed and nobody said which
        if len(self.pending) > MAX_PENDING:
            self._stale = True
            self.pending.clear()

    def invalidate(self) -> None:
        """Read everything again at the next sync."""
        self._stale = True

    def sync(self, reader: StoreReader) -> None:
        """Read the pending runs and patch the window and the counts (or rebuild them)."""
        if self._stale:
            self._rebuild(reader)
            return
        if not self.pending:
            return
        run_ids, self.pending = list(self.pending), set()
        found = queries.run_summaries(reader, run_ids)
        if len(found) < len(run_ids):
            self._rebuild(reader)  # a run was deleted: its count and maybe a window slot must go
            return
        # In rowid order, i.e. creation order: a new run is counted before any newer one.
        for rowid, row in sorted(found, key=lambda item: item[0]):
            if not self._observe(rowid, row):
                self._rebuild(reader)
                return

    def _rebuild(self, reader: StoreReader) -> None:
        with reader.snapshot():
            counts = queries.run_counts(reader)
            live = queries.live_run_statuses(reader)
            newest = queries.newest_runs(reader, self.capacity + 1)
            top_rowid = queries.max_run_rowid(reader)
        self.rebuilds += 1
        self._stale = False
        self.pending.clear()
        self._complete = len(newest) <= self.capacity
        newest = newest[: self.capacity]
        self._keys = sorted((row["created_at"], row["run_id"]) for _, row in newest)
        self._rows = {row["run_id"]: row for _, row in newest}
        self._packed = {run_id: _pack_row(row) for run_id, row in self._rows.items()}
        self._known = {**live, **{run_id: row["status"] for run_id, row in self._rows.items()}}
        self._counts = counts
        self._top_rowid = top_rowid
        self.version += 1

    def _observe(self, rowid: int, row: dict[str, Any]) -> bool:
        """Patch the counts and the window with one run's current row; False if only a rebuild can."""
        run_id, status = row["run_id"], row["status"]
        previous = self._known.get(run_id)
        if previous is None:
            if rowid > self._top_rowid:
                self._count(status, 1)  # new since the last rebuild
            elif status not in TERMINAL_STATUSES:
                return False  # a live run the window should have known
            # else: it ended before, so it is counted, with this very status
        elif previous != status:
            self._count(previous, -1)
            self._count(status, 1)
        self._top_rowid = max(self._top_rowid, rowid)
        self._place(run_id, row)
        if status in TERMINAL_STATUSES and run_id not in self._rows:
            self._known.pop(run_id, None)  # final: nothing more to patch for it
        else:
            self._known[run_id] = status
        return True

    def _count(self, status: str, delta: int) -> None:
        self._counts[status] = self._counts.get(status, 0) + delta
        if status not in RUN_STATUSES and not self._counts[status]:
            del self._counts[status]  # as run_counts: a status nobody has is listed only if it is a known one
        self.version += 1

    def _place(self, run_id: str, row: dict[str, Any]) -> None:
        if run_id in self._rows:
            if self._rows[run_id] != row:
                self._rows[run_id] = row
                self._packed[run_id] = _pack_row(row)
                self.version += 1
            return
        key = (row["created_at"], run_id)
        if not self._complete and (not self._keys or key < self._keys[0]):
            return  # older than the whole window: a fresh read would not show it either
        bisect.insort(self._keys, key)
        self._rows[run_id] = row
        self._packed[run_id] = _pack_row(row)
        self.version += 1
        if len(self._keys) > self.capacity:
            _, dropped = self._keys.pop(0)
            del self._rows[dropped], self._packed[dropped]
            self._complete = False
            if self._known.get(dropped) in TERMINAL_STATUSES:
                del self._known[dropped]

    # --- answers ----------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def _newest(self, limit: int) -> list[tuple[float, str]]:
        return self._keys[-limit:][::-1] if limit > 0 else []

    def runs_view(self, limit: int = RUNS_VIEW_LIMIT) -> dict[str, Any]:
        """The `runs` watch's view, as `views.runs_view` reads it from the database."""
        return {"runs": [self._rows[run_id] for _, run_id in self._newest(limit)], "counts": self.counts()}

    def runs_payload(self, limit: int = RUNS_VIEW_LIMIT) -> bytes:
        """`runs_view(limit)` packed, from the rows packed when they changed (no walk over the view)."""
        if self._payload is not None and self._payload[:2] == (self.version, limit):
            return self._payload[2]
        newest = self._newest(limit)
        body = b"".join((b"\x82", _RUNS_KEY, _PACKER.pack_array_header(len(newest)),
                         *(self._packed[run_id] for _, run_id in newest), _COUNTS_KEY, pack(self._counts)))
        self._payload = (self.version, limit, body)
        return body

    def list_runs(self, status: str | None, limit: int, workflow: str | None,
                  since: float | None) -> list[dict[str, Any]] | None:
        """What `queries.run_list` would answer, or None when the answer may lie beyond the window."""
        found: list[dict[str, Any]] = []
        for created_at, run_id in reversed(self._keys):
            if since is not None and created_at < since:
                return found  # every run further down is older still
            row = self._rows[run_id]
            if (not status or row["status"] == status) and (not workflow or row["workflow"] == workflow):
                found.append(row)
                if len(found) >= limit:
                    return found
        return found if self._complete else None
