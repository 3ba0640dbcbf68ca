"""How the scheduler shares its worker slots between runs and reconciles (the seed's
`preferResourceManager`): after it launched a run it prefers a reconcile next, after a reconcile a run,
so neither kind can starve the other, whatever `max_workers` is."""

from __future__ import annotations

from typing import Literal

ClaimKind = Literal["run", "reconcile"]


def next_claim(idle_slots: int, *, prefer_reconcile: bool, runs_waiting: bool,
               reconciles_waiting: bool) -> tuple[ClaimKind, int] | None:
    """What to claim for the idle slots now: (kind, how many slots), or None.

    A reconcile is claimed one at a time; runs are claimed for several slots in one command, but while
    reconciles wait they take at most half the idle slots (at least one), leaving room for the next
    reconcile. `prefer_reconcile` is True after a run was launched and False after a reconcile."""
    if idle_slots <= 0 or not (runs_waiting or reconciles_waiting):
        return None
    if reconciles_waiting and (prefer_reconcile or not runs_waiting):
        return "reconcile", 1
    return "run", (max(1, idle_slots // 2) if reconciles_waiting else idle_slots)


def after_launch(kind: ClaimKind) -> bool:
    """The new `prefer_reconcile` once a launch of `kind` happened."""
    return kind == "run"
