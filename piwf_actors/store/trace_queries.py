"""Named read queries for the run tracer (`piwf_actors.actors.tracing`): the facts of a run and of
its node attempts that its events do not carry. Each costs a primary-key lookup (or one per chunk
of attempts), whatever the history."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from piwf_actors.store.reader import StoreReader, chunked


def run_facts(reader: StoreReader, run_id: str) -> dict[str, Any] | None:
    """{workflow, parent_run_id, parent_wait_id, error_message} of a run; None when it is gone."""
    row = reader.one("SELECT workflow, parent_run_id, parent_wait_id, error_message FROM run WHERE run_id = ?",
                     (run_id,))
    if row is None:
        return None
    workflow, parent_run_id, parent_wait_id, error_message = row
    return {"workflow": workflow, "parent_run_id": parent_run_id, "parent_wait_id": parent_wait_id,
            "error_message": error_message}


def attempt_facts(reader: StoreReader, attempt_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    """attempt id → {attempt_no, error_code, error_message, executed_by} of the attempts that exist."""
    facts: dict[str, dict[str, Any]] = {}
    for chunk in chunked(dict.fromkeys(attempt_ids)):
        marks = ", ".join("?" for _ in chunk)
        for attempt_id, attempt_no, error_code, error_message, executed_by in reader.all(
                f"SELECT attempt_id, attempt_no, error_code, error_message, executed_by FROM node_attempt "
                f"WHERE attempt_id IN ({marks})", tuple(chunk)):
            facts[attempt_id] = {"attempt_no": attempt_no, "error_code": error_code,
                                 "error_message": error_message, "executed_by": executed_by}
    return facts
