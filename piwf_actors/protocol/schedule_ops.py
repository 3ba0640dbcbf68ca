"""The schedule operations of the client gateway, and the view `schedule.list` answers with.

`ScheduleOperations` is mixed into `ClientGateway` (it uses the gateway's
reader, board, writer and reply helpers):

- `schedule.list` (read-only): the definitions the keeper loaded (from the
  host board) joined with their rows (pause flag, cursor, counts), plus
  schedules recorded earlier whose file no longer defines them, and the
  schedule files that failed to load.
- `schedule.pause` / `schedule.resume` (recorded): write commands, like run control.
- `schedule.trigger` (recorded): handed to the schedule keeper, which builds
  the manual fire (resolving the workflow and calling the input function is
  its work, not the gateway's) and submits it to the writer with the gateway
  as the one answered, under the token registered here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from piwf_actors.actors.base import safe_tell
from piwf_actors.actors.schedules import TriggerSchedule
from piwf_actors.board import Section
from piwf_actors.protocol.envelope import Request
from piwf_actors.store.requests import WriteCommand
from piwf_actors.store.schedule_queries import schedule_rows

if TYPE_CHECKING:
    import pykka

    from piwf_actors.board import HostBoard
    from piwf_actors.store.reader import StoreReader


def schedule_list_view(rows: Mapping[str, Mapping[str, Any]], section: Mapping[str, Any]) -> dict[str, Any]:
    """{schedules: [...], failures: [{path, error}], clashes: [str]} (a pure function).

    Each schedule: name, loaded (its file defines it now), paused, workflow, timing, cron, every_s,
    timezone, catch_up, max_catch_up, description, path, attr, project_path, next_fire_at (None
    while paused, or before the keeper recorded it), last_fire_at, fire_count, skipped_count,
    last_error; sorted by name.
    """
    loaded: Mapping[str, Any] = section.get("loaded") or {}
    items = []
    for name in sorted(set(loaded) | set(rows)):
        row = rows.get(name) or {}
        definition = loaded.get(name) or row.get("summary") or {}
        paused = bool(row.get("paused"))
        items.append({
            "name": name, "loaded": name in loaded, "paused": paused, **definition,
            "next_fire_at": None if paused or name not in loaded else row.get("next_fire_at"),
            "last_fire_at": row.get("last_fire_at"), "fire_count": row.get("fire_count", 0),
            "skipped_count": row.get("skipped_count", 0), "last_error": row.get("last_error"),
        })
    return {"schedules": items, "failures": list(section.get("failures") or []),
            "clashes": list(section.get("clashes") or []), "dirs": list(section.get("dirs") or [])}


class ScheduleOperations:
    """`schedule.*` handlers of the ClientGateway (see the module docstring)."""

    _reader: StoreReader | None
    _board: HostBoard
    _schedules: pykka.ActorRef[Any] | None
    _reply: Callable[..., None]
    _send_write: Callable[..., None]
    _client_args: Callable[[Request], dict[str, Any]]
    _expect: Callable[..., str]
    _pending: dict[str, Any]
    actor_ref: pykka.ActorRef[Any]

    def _schedule_list(self, conn_id: int, request: Request, _payload: dict[str, Any]) -> None:
        assert self._reader is not None
        view = schedule_list_view(schedule_rows(self._reader), self._board.snapshot(Section.SCHEDULES))
        view["running"] = self._schedules is not None
        self._reply(conn_id, request, "accepted", receipt=view)

    def _schedule_control(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        """schedule.pause / schedule.resume: straight to the writer."""
        self._send_write(conn_id, request, WriteCommand(request.operation,
                                                        {**self._client_args(request), "name": payload["name"]}))

    def _schedule_trigger(self, conn_id: int, request: Request, payload: dict[str, Any]) -> None:
        if self._schedules is None:
            self._reply(conn_id, request, "unavailable", error="schedules are not running in this host")
            return
        token = self._expect(conn_id, request)
        if not safe_tell(self._schedules, TriggerSchedule(payload["name"], token, self._client_args(request),
                                                          self.actor_ref)):
            self._pending.pop(token, None)
            self._reply(conn_id, request, "unavailable", error="the schedule keeper has stopped")
