"""`RunTracer`: turns what the writer commits into OpenTelemetry spans (docs/tracing.md).

Runs outlive processes, so spans are not held open in a worker or kept in
memory across restarts: they are emitted by the host, from committed facts,
when they end. The tracer subscribes to the writer's `ChangeNotice`s (told
after every commit, naming the runs that changed), reads the new events of
those runs through its own read-only `StoreReader` (after a per-run `seq`
cursor), feeds them to the run's `RunTrace` (piwf_actors/tracing/spans.py,
a pure step function) and emits the spans each event ends, with the times
the events carry and ids derived from run, attempt and wait ids
(piwf_actors/tracing/ids.py). A resumed run, on this host or the next one,
continues its trace; the worker needs no help to know the span of the node
it runs (it derives the same ids for `TRACEPARENT` and `ctx.traceparent`).

What it emits, and when:
- Spans that end after the tracer started, which is when its host became
  active (a standby's at its takeover, not at its process start). A run
  first seen mid-way (after a host restart or a takeover) is read from its
  first event, so its open spans start when they really began; spans that
  ended before this host became active were the previous host's to emit and
  are not emitted again.
- Each span once per host: a run's state is dropped when its run span has
  ended, and the run is then remembered as finished (bounded), so a later
  note on it (a restart) emits nothing. The noticed runs, cursors and
  finished runs are a `RunEventFollower` (actors/event_follower.py), the
  bookkeeping it shares with `RunEventsSubscription`.
- A run's own span when the run ends; a run parked for a week has emitted
  its node and wait spans as they ended, its run span comes at its end.

It never blocks another actor: it only `tell`s (the writer, itself). A read
that fails is logged and tried again on the next commit; any other error
while following a run (an event the step function does not expect) is
logged once with the run's id and ends that run's trace (it is remembered as
finished); the other runs are traced on. It is not a core
actor: its failure stops only tracing, never the host. `on_stop` flushes
the provider (the host's own is shut down), waiting a bounded time
(`SpanEmitter.close`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.event_follower import PAGE, RunEventFollower
from piwf_actors.actors.writer import Subscribe, Unsubscribe
from piwf_actors.errors import PiwfError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import trace_queries
from piwf_actors.store.engines.registry import driver_errors
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice
from piwf_actors.tracing.spans import Event, RunFacts, RunTrace, SpanRecord

log = logging.getLogger(__name__)

class Emitter(Protocol):
    """Where finished spans go: `piwf_actors.tracing.otel.SpanEmitter`, or a test's double."""

    def emit(self, records: Iterable[SpanRecord]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Flush:
    """Read the runs noticed since the last flush (told to itself once per burst of notices)."""


@dataclass(frozen=True, slots=True)
class TracerState:
    """Asked: {"following": runs with a trace in memory, "finished": runs remembered as finished}."""


class RunTracer(CoreActor):
    """The host's tracer (see the module docstring)."""

    actor_name = "tracer"

    def __init__(self, writer_ref: pykka.ActorRef[Any], database: DatabaseLocation, emitter: Emitter, *,
                 since: float | None = None) -> None:
        """Runs in the caller's thread: stores arguments only. Spans that ended before `since`
        (default: now; the host starts its tracer when it becomes active) are not emitted."""
        super().__init__(None)  # tracing's failure is not the host's
        self._writer_ref = writer_ref
        self._database = database
        self._emitter = emitter
        # Finished runs are remembered up to a bound; a forgotten one raises the floor, which keeps a
        # later note on it from emitting its spans again.
        self._follower = RunEventFollower(floor=time.time() if since is None else since)
        self._reader: StoreReader | None = None
        self._traces: dict[str, RunTrace] = {}
        self._closed = False

    def on_start(self) -> None:
        """Runs in the tracer's thread: opens its reader and subscribes to the writer's notices."""
        self._reader = StoreReader(self._database)
        safe_tell(self._writer_ref, Subscribe(self.actor_ref))

    def release_resources(self) -> None:
        """Runs in the tracer's thread (on_stop, on_failure): unsubscribes, closes the reader, flushes."""
        safe_tell(self._writer_ref, Unsubscribe(self.actor_ref))
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if not self._closed:  # (safe twice: a provider is shut down once)
            self._closed = True
            self._emitter.close()

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {ChangeNotice: self._noticed, _Flush: self._flush, TracerState: self._state}

    def _state(self, _message: TracerState) -> dict[str, int]:
        return {"following": len(self._traces), "finished": len(self._follower.finished)}

    def _noticed(self, notice: ChangeNotice) -> None:
        self._follower.notice(notice.runs, lambda: safe_tell(self.actor_ref, _Flush()))

    def _flush(self, _message: _Flush) -> None:
        self._follower.flush(self._follow_or_drop, what="tracing: events")

    def _follow_or_drop(self, run_id: str) -> None:
        try:
            self._follow(run_id)
        except driver_errors() + (PiwfError,):
            raise  # a read that failed: the follower keeps the run noticed for the next commit
        except Exception:  # a fact the step function does not expect: this run's trace ends, not the tracer
            log.exception("tracing: run %s is not traced any more: reading its events failed", run_id)
            self._finish(run_id)

    def _follow(self, run_id: str) -> None:
        assert self._reader is not None
        run_trace = self._traces.get(run_id)
        if run_trace is None:
            facts = trace_queries.run_facts(self._reader, run_id)
            if facts is None:
                return  # pruned meanwhile
            run_trace = RunTrace(RunFacts(run_id, facts["workflow"], facts["parent_run_id"], facts["parent_wait_id"]))
            self._traces[run_id] = run_trace
        ended: list[SpanRecord] = []
        follower = self._follower
        while not run_trace.finished:
            page = follower.page(self._reader, run_id)
            for row in page:
                event = Event(int(row["seq"]), str(row["kind"]), float(row["created_at"]), row["node_id"],
                              row["attempt_id"], row["payload"])
                ended += [record for record in run_trace.feed(event) if record.end >= follower.floor]
            if page:
                follower.advance(run_id, int(page[-1]["seq"]))
            if len(page) < PAGE:
                break
        if ended:
            records = self._with_facts(run_id, ended)
            try:
                self._emitter.emit(records)
            except Exception:  # an exporter's bug loses these spans, not the tracer (nor the next spans)
                log.warning("tracing: %d span(s) of run %s not emitted", len(records), run_id, exc_info=True)
        if run_trace.finished:
            self._finish(run_id)

    def _with_facts(self, run_id: str, records: list[SpanRecord]) -> list[SpanRecord]:
        """Fill in what the events do not carry: attempt numbers and errors, the run's error."""
        assert self._reader is not None
        attempts = trace_queries.attempt_facts(self._reader, [r.attempt_id for r in records if r.attempt_id])
        filled = []
        for record in records:
            if record.attempt_id and record.attempt_id in attempts:
                facts = attempts[record.attempt_id]
                record = record.with_attempt(facts["attempt_no"], facts["error_code"], facts["error_message"],
                                             facts["executed_by"])
            elif record.parent_span_id is None and record.error is not None:
                run = trace_queries.run_facts(self._reader, run_id)
                record = record.with_run_error(run["error_message"] if run else None)
            filled.append(record)
        return filled

    def _finish(self, run_id: str) -> None:
        self._traces.pop(run_id, None)
        self._follower.finish(run_id, time.time())


def check_tracer_setting(setting: Any) -> None:
    """Raise HostError for a `HostConfig.tracer_provider` the tracer could not start with (imports
    opentelemetry: only for a host that traces). What a standby checks when it starts."""
    from piwf_actors.tracing.otel import check_setting

    check_setting(setting)


def start_run_tracer(writer_ref: pykka.ActorRef[Any], database: DatabaseLocation, setting: Any) -> pykka.ActorRef[Any]:
    """Start the tracer for `HostConfig.tracer_provider` = `setting` (imports opentelemetry here,
    only when a host traces). Raises HostError for a setting that is not a provider."""
    from piwf_actors.tracing.otel import SpanEmitter, provider_for

    provider, owned = provider_for(setting)
    return RunTracer.start(writer_ref, database, SpanEmitter(provider, owned=owned))
