"""`LocalStore`: the CLI's read-only operations answered from a state database directly, when no host listens.

`piwf list`, `show`, `events`, `logs` and `graph RUN` use it to read the state database
of a stopped host: `<state-dir>/state.db`, or the database `--database` /
`$PIWF_DATABASE_URL` names (a read-only connection either way: it can never
change the database; SQLite's WAL, or PostgreSQL's MVCC, lets it read beside
a host that starts meanwhile). It
answers `run.list`, `run.get`, `run.source`, `run.graph`, `run.events`, `content.read` and `ids.match`
with the host's own query functions and the same outcomes and receipts as
the socket protocol; anything else is `unavailable`.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.client.connection import ContentReader, Response
from piwf_actors.paths import DatabaseLocation
from piwf_actors.statuses import RUN_STATUSES
from piwf_actors.store import id_queries, queries
from piwf_actors.store.engines.registry import driver_errors
from piwf_actors.store.reader import StoreReader

#: What a host answers for run.events without a limit, and at most (docs/protocol.md).
_EVENTS_DEFAULT, _EVENTS_MAX = 500, 5000


class LocalStore(ContentReader):
    def __init__(self, database: DatabaseLocation) -> None:
        self.path = database
        self._reader: StoreReader | None = None

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __enter__(self) -> LocalStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(self, operation: str, payload: dict[str, Any] | None = None, *, run_id: str | None = None,
                expected_revision: int | None = None, idempotency_key: str | None = None) -> Response:
        """Answer like the host would; a database that cannot be read is `unavailable` with the reason."""
        handler = {"run.list": self._run_list, "run.get": self._run_get, "run.events": self._run_events,
                   "run.source": self._run_source, "run.graph": self._run_graph, "content.read": self._content_read,
                   "ids.match": self._ids_match}.get(operation)
        if handler is None:
            return Response(None, "unavailable", error=f"{operation} needs a running host")
        try:
            if self._reader is None:
                self._reader = StoreReader(self.path)
            return handler(self._reader, payload or {}, run_id)
        except driver_errors() as exc:
            return Response(None, "unavailable", error=f"cannot read {self.path}: {' '.join(str(exc).split())}")

    @staticmethod
    def _run_list(reader: StoreReader, payload: dict[str, Any], _run_id: str | None) -> Response:
        status = payload.get("status")
        if status is not None and status not in RUN_STATUSES:
            return Response(None, "rejected", error=f"run.list: unknown status {status!r}")
        runs = queries.run_list(reader, status, min(payload.get("limit") or 100, 1000),
                                workflow=payload.get("workflow"), since=payload.get("since"),
                                parent=payload.get("parent"))
        return Response(None, "accepted", receipt={"runs": runs})

    @staticmethod
    def _run_get(reader: StoreReader, _payload: dict[str, Any], run_id: str | None) -> Response:
        view = None if run_id is None else queries.run_view(reader, run_id)
        if view is None:
            return Response(None, "notFound", error=f"run {run_id} not found")
        return Response(None, "accepted", receipt=view, revision=view["revision"])

    @staticmethod
    def _run_source(reader: StoreReader, _payload: dict[str, Any], run_id: str | None) -> Response:
        from piwf_actors.protocol.catalog.runs import source_receipt  # a client that reads the snapshot

        receipt = None if run_id is None else source_receipt(reader, run_id)
        if receipt is None:
            return Response(None, "notFound", error=f"run {run_id} not found")
        return Response(None, "accepted", receipt=receipt)

    @staticmethod
    def _run_graph(reader: StoreReader, _payload: dict[str, Any], run_id: str | None) -> Response:
        from piwf_actors.protocol.catalog.runs import graph_receipt  # `piwf graph RUN` only

        receipt = None if run_id is None else graph_receipt(reader, run_id)
        if receipt is None:
            return Response(None, "notFound", error=f"run {run_id} not found")
        return Response(None, "accepted", receipt=receipt)

    @staticmethod
    def _run_events(reader: StoreReader, payload: dict[str, Any], run_id: str | None) -> Response:
        status = None if run_id is None else queries.run_status(reader, run_id)
        if status is None:
            return Response(None, "notFound", error=f"run {run_id} not found")
        after = payload.get("after") or 0
        limit = min(payload.get("limit") or _EVENTS_DEFAULT, _EVENTS_MAX)
        events = queries.run_events(reader, str(run_id), after, limit)
        return Response(None, "accepted", revision=status[1], receipt={
            "events": events, "next_after": events[-1]["seq"] if events else after, "more": len(events) == limit})

    @staticmethod
    def _content_read(reader: StoreReader, payload: dict[str, Any], _run_id: str | None) -> Response:
        length = payload.get("length")
        chunk = queries.content_chunk(reader, payload["digest"], payload.get("offset") or 0,
                                      queries.CONTENT_CHUNK_BYTES if length is None else length)
        if chunk is None:
            return Response(None, "notFound", error=f"no content {payload['digest'][:64]}")
        return Response(None, "accepted", receipt=chunk)

    @staticmethod
    def _ids_match(reader: StoreReader, payload: dict[str, Any], _run_id: str | None) -> Response:
        kind, prefix, suffix = payload.get("kind"), payload.get("prefix"), payload.get("suffix")
        if kind not in id_queries.ID_KINDS or not (prefix or suffix):
            return Response(None, "rejected", error=f"ids.match: unknown kind {kind!r} or empty prefix")
        limit = min(payload.get("limit") or id_queries.ID_MATCH_DEFAULT, id_queries.ID_MATCH_MAX)
        matches, more = (id_queries.match_id_ends(reader, str(kind), str(suffix), limit) if suffix else
                         id_queries.match_ids(reader, str(kind), str(prefix), limit))
        return Response(None, "accepted", receipt={"matches": matches, "more": more})
