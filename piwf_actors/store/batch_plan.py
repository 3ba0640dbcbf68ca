"""Which write commands share a transaction: every lease command travels alone.

The writer groups what it drained into one transaction (group commit,
store/batch.py). On PostgreSQL a transaction that keeps failing
serialization against other hosts' is given up after `CONFLICT_RETRIES`
and every command in it fails: under contention, a batch of claims. A lease
renewal that rode in such a batch failed with it, and a host or runner lost
its lease for conflicts that were not its own. So each `lease.*` and
`runner_lease.*` command is a transaction of its own (`transactions`), and
a renewal does not even wait for the others: the writer keeps renewals in a
lane of their own and applies them before the next batch and between two
retries of a conflicting one (actors/writer_handle.py, actors/writer.py).

Why a renewal may overtake the commands queued before it without changing
any fence (docs/runners.md, docs/standby.md): it only extends a lease its
holder still has. Had they been applied together, in one transaction, each
would have been checked against the same lease row as the renewal, which
succeeds only while that lease is unexpired and names its holder; applied
after it, they find the same holder and a later expiry (and the time fence
still refuses them should the holder be paused past it). A refused renewal
changes nothing they would see. Every other lease command (acquire,
reacquire, release) keeps its place: the commands queued before a release
are written under the lease, those after it are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: The lease commands that only extend a lease their sender holds: they may overtake other commands.
RENEWALS = frozenset({"lease.renew", "runner_lease.renew"})


def is_lease_command(name: str) -> bool:
    """A command that moves a lease (host or runner): it travels in a transaction of its own."""
    return name.startswith(("lease.", "runner_lease."))


def transactions(items: Sequence[T], name: Callable[[T], str]) -> list[list[T]]:
    """How the writer applies one drained batch: its transactions, in order, each a list of `items`
    (`name(item)` is its command's name). Every lease command is a transaction of its own, in its
    place; the commands between them share one. Without lease commands: the whole batch, as one.
    """
    parts: list[list[T]] = []
    current: list[T] = []
    for item in items:
        if is_lease_command(name(item)):
            if current:
                parts.append(current)
                current = []
            parts.append([item])
        else:
            current.append(item)
    if current:
        parts.append(current)
    return parts
