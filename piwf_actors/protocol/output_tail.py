"""`OutputTail`: what the running shell nodes printed so far, so that `piwf logs -f` starts with it.

A node's live output is not stored while it runs (its full output is stored
with its result); the gateway passes each `node_output` chunk to the `run`
watches of its run. A watch that asks for `output_so_far` first gets what
this tail holds for the run: the chunks of the run's current attempt, in the
order they came. A worker runs one node of a run at a time, so a chunk of
another attempt starts the run's tail afresh.

Bounded: at most `max_bytes_per_run` characters per run (past that the oldest
chunks go, and a first line says so) and `max_runs` runs (the run written to
least recently goes; a tail is not dropped when its node ends, since a run's
next node or those bounds replace it, and `piwf logs -f` skips the output of
attempts that had ended when it read the run). Used from the gateway's thread
only, like `LiveViews`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

#: The tail of one run: enough for a screenful of history many times over, a fraction of the
#: worker's 1 MiB live-output budget per node.
MAX_BYTES_PER_RUN = 256 * 1024
#: Runs with a tail at once: more than a host runs nodes at a time.
MAX_RUNS = 64
#: A replayed chunk is at most this long (consecutive chunks of a stream are merged up to it).
PIECE = 64 * 1024
CUT_NOTE = "…[earlier output cut; `piwf logs RUN NODE` shows all of it once the node ends]\n"
KEYS = ("run_id", "node_id", "attempt_id", "stream", "data")


class _RunTail:
    __slots__ = ("attempt_id", "chunks", "size", "cut")

    def __init__(self, attempt_id: Any) -> None:
        self.attempt_id = attempt_id
        self.chunks: list[dict[str, Any]] = []
        self.size = 0
        self.cut = False


class OutputTail:
    def __init__(self, *, max_runs: int = MAX_RUNS, max_bytes_per_run: int = MAX_BYTES_PER_RUN) -> None:
        self._max_runs = max_runs
        self._max_bytes = max_bytes_per_run
        self._runs: OrderedDict[str, _RunTail] = OrderedDict()

    def add(self, payload: dict[str, Any]) -> None:
        """Keep one `node_output` chunk ({run_id, node_id, attempt_id, stream, data})."""
        run_id = str(payload.get("run_id"))
        data = str(payload.get("data") or "")
        if not data:
            return
        tail = self._runs.get(run_id)
        if tail is None or tail.attempt_id != payload.get("attempt_id"):
            tail = _RunTail(payload.get("attempt_id"))
            self._runs[run_id] = tail
        self._runs.move_to_end(run_id)
        last = tail.chunks[-1] if tail.chunks else None
        if last is not None and last["stream"] == payload.get("stream") and len(last["data"]) + len(data) <= PIECE:
            last["data"] += data
        else:
            tail.chunks.append({key: payload.get(key) for key in KEYS} | {"data": data})
        tail.size += len(data)
        while tail.size > self._max_bytes and len(tail.chunks) > 1:  # the newest chunk always stays
            tail.size -= len(tail.chunks.pop(0)["data"])
            tail.cut = True
        while len(self._runs) > self._max_runs:
            self._runs.popitem(last=False)

    def so_far(self, run_id: str) -> list[dict[str, Any]]:
        """The run's current attempt's output so far, as `node_output` payloads (a note first if cut)."""
        tail = self._runs.get(run_id)
        if tail is None or not tail.chunks:
            return []
        chunks = [dict(chunk) for chunk in tail.chunks]
        if tail.cut:
            chunks.insert(0, {**chunks[0], "stream": "stderr", "data": CUT_NOTE})
        return chunks
