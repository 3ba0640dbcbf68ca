"""`RunEventFollower`: the bookkeeping of an actor that follows runs' committed events.

Two actors read runs' events as the writer commits them: `RunEventsSubscription`
(actors/run_events.py: notices for an application) and `RunTracer`
(actors/tracing.py: spans). Both subscribe to the writer's `ChangeNotice`s and
keep, per run, what this plain object holds (it is not an actor: it lives in
its owner's thread and is used by its handlers only):

- the runs noticed since the last flush (an insertion-ordered set), and
  whether a flush is already told: many commits touching one run cost one
  read (`notice`, `flush`);
- a `seq` cursor per run: its events are read after it, a page at a time
  (`page`, `advance`);
- the runs remembered as finished (their later events, e.g. a restart's
  note, are ignored), bounded when asked: forgetting the oldest raises the
  floor to its end, so a later event of it is not mistaken for a new run's
  history (`finish`, `floor`).

A read that fails (a locked or full disk: the driver's errors, PiwfError)
leaves the run noticed: the next commit's notice tries it again.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from piwf_actors.errors import PiwfError
from piwf_actors.store import queries
from piwf_actors.store.engines.registry import driver_errors
from piwf_actors.store.reader import StoreReader

log = logging.getLogger(__name__)

#: Events read per query; a longer history is read in several.
PAGE = 500
#: Finished runs remembered by default (bounded followers); beyond it the oldest is forgotten.
FINISHED_REMEMBERED = 10_000


class RunEventFollower:
    """Noticed runs, cursors and finished runs of one follower (see the module docstring)."""

    def __init__(self, *, floor: float, remembered: int | None = FINISHED_REMEMBERED) -> None:
        """`floor`: the owner ignores what ended before it (raised as finished runs are forgotten);
        `remembered`: finished runs kept (None: all, for a follower of named runs only)."""
        self.floor = floor
        self.cursors: dict[str, int] = {}
        self.finished: OrderedDict[str, float] = OrderedDict()
        self._remembered = remembered
        self._noticed: dict[str, None] = {}  # insertion-ordered set
        self._flush_told = False

    def notice(self, runs: Iterable[str], tell_flush: Callable[[], bool]) -> None:
        """Note `runs` (not those finished) and, once per burst, `tell_flush()` (the owner tells itself
        its flush message; False: it could not, and the next notice tries again)."""
        for run_id in runs:
            if run_id not in self.finished:
                self._noticed[run_id] = None
        if self._noticed and not self._flush_told:
            self._flush_told = tell_flush()

    def flush(self, follow: Callable[[str], None], *, what: str, stop: Callable[[], bool] = lambda: False) -> None:
        """Call `follow(run_id)` for every run noticed, in order; `what` names the reads in the warning of
        one that failed (kept noticed). `stop()` true: the rest are left."""
        self._flush_told = False
        for run_id in list(self._noticed):
            if stop():
                return
            try:
                follow(run_id)
            except driver_errors() + (PiwfError,) as exc:
                log.warning("%s of run %s not read (tried again on the next commit): %s", what, run_id, exc)
                continue
            self._noticed.pop(run_id, None)

    def page(self, reader: StoreReader, run_id: str) -> list[dict[str, Any]]:
        """The run's next events after its cursor (at most PAGE; fewer: there are no more now)."""
        return queries.run_events(reader, run_id, self.cursors.get(run_id, 0), PAGE)

    def advance(self, run_id: str, seq: int) -> None:
        self.cursors[run_id] = seq

    def finish(self, run_id: str, finished_at: float) -> None:
        """Remember the run as finished (its cursor is dropped); past the bound, forget the oldest."""
        self.cursors.pop(run_id, None)
        self.finished[run_id] = finished_at
        if self._remembered is not None and len(self.finished) > self._remembered:
            _forgotten, oldest_at = self.finished.popitem(last=False)
            self.floor = max(self.floor, oldest_at)
