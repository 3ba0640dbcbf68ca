"""The run events a subscription tells an application's actor (`HostHandle.subscribe`).

Frozen dataclasses, one per kind of change, each with the run event's `seq`
it comes from: `RunStarted`, `NodeFinished`, `RunParked`, `RunFinished`
(the last one a subscriber is told about a run). All are importable from
the front door, `piwf_actors`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from piwf_actors.results import RunError


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A worker took the run up: for the first time (`resumed` False) or again after it was
    parked, re-queued or recovered (`resumed` True). `seq` is the run event it comes from."""

    kind: ClassVar[str] = "run_started"

    run_id: str
    workflow: str
    seq: int = 0
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class NodeFinished:
    """A node's attempt ended and its result is committed: `outcome` is `ok` or the failure's
    outcome (then `error` is its one-line message). A failed attempt may be retried."""

    kind: ClassVar[str] = "node_finished"

    run_id: str
    node_id: str
    outcome: str
    attempt_id: str | None
    seq: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunParked:
    """The run stopped without finishing. `reason`: waiting (for an answer to the request
    `detail`: see `HostHandle.pending_interactions`), paused, ambiguous_effect (`detail` is the
    effect id: `HostHandle.resolve_effect`) or no_progress (`detail` says why)."""

    kind: ClassVar[str] = "run_parked"

    run_id: str
    reason: str
    detail: str | None
    seq: int = 0


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended for good: `status` done, failed (with `error`) or cancelled. It is the last
    event a subscriber is told about that run."""

    kind: ClassVar[str] = "run_finished"

    run_id: str
    status: str
    error: RunError | None
    seq: int = 0


RunNotice = RunStarted | NodeFinished | RunParked | RunFinished


__all__ = ["NodeFinished", "RunFinished", "RunNotice", "RunParked", "RunStarted"]
