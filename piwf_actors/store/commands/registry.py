"""The table of named write commands and the context they run in.

A command is a function `(ctx, args) -> wire value` that reads and writes
through `ctx.conn` inside the writer's transaction and its own savepoint. It
checks its own fences (claim token, generation, revision) and raises a
`PiwfError` to refuse; the savepoint is then rolled back and only that
command is undone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from piwf_actors.errors import UnknownCommand
from piwf_actors.store.engines.base import Connection
from piwf_actors.store.requests import ChangeSet


@dataclass(slots=True)
class WriteContext:
    """What a command runs with. `host_epoch` is the host lease's epoch as this transaction read it.
    A command a runner host sent (docs/runners.md) also has `runner_id` and `runner_lease_epoch`: the
    lease that fenced it, and that owns the claims, workers and children it records."""

    conn: Connection
    now: float
    host_epoch: int
    changes: ChangeSet
    #: The command runs in its own savepoint (the batch's second pass, see store/batch.py).
    savepoints: bool = False
    runner_id: str | None = None
    runner_lease_epoch: int | None = None
    #: The active host's id (the lease row's holder), for `executed_by` of a host's own attempts.
    host_id: str | None = None
    #: The name the running command is registered under (set by the batch from `lookup`), so a
    #: command's name is written once, in its `@command(...)`; `recorded` keys its record with it.
    command: str = ""
    #: How far timer time is ahead of `now` (piwf_actors/clock.py): 0 but under a test's clock.
    timer_offset: float = 0.0

    @property
    def timer_now(self) -> float:
        """The time workflow timers are set and compared by (sleeps, message timeouts, request deadlines);
        `now` stays the time of fences, claims and records."""
        return self.now + self.timer_offset

    @property
    def executed_by(self) -> str | None:
        """Who executes what this command records: the runner host, else the active host."""
        return self.runner_id if self.runner_id is not None else self.host_id

    def owns_claim(self, host_epoch: Any, runner_id: Any, runner_lease_epoch: Any) -> bool:
        """Whether a claim (its host epoch, runner id and runner lease epoch) is this sender's: a runner's
        own claims under its current lease, or the host's claims (no runner) of its current epoch."""
        if self.runner_id is None:
            return runner_id is None and host_epoch == self.host_epoch
        return runner_id == self.runner_id and runner_lease_epoch == self.runner_lease_epoch

    def owner_condition(self, prefix: str = "") -> tuple[str, tuple[Any, ...]]:
        """`owns_claim` as SQL over a run_claim row (columns under `prefix`), with its parameters."""
        if self.runner_id is None:
            return f"{prefix}runner_id IS NULL AND {prefix}host_epoch = ?", (self.host_epoch,)
        return (f"{prefix}runner_id = ? AND {prefix}runner_lease_epoch = ?",
                (self.runner_id, self.runner_lease_epoch))


class NeedsSavepoints(Exception):
    """Raised by a command that must refuse after it already wrote: the batch is rolled back and
    applied again with a savepoint around every command (commands are pure functions of the
    database, the message and `now`, so the second pass decides the same way)."""


CommandFn = Callable[[WriteContext, dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class CommandSpec:
    name: str
    fn: CommandFn
    fenced: bool


_COMMANDS: dict[str, CommandSpec] = {}


def command(name: str, *, fenced: bool = True) -> Callable[[CommandFn], CommandFn]:
    """Register `fn` under `name`. Unfenced commands (the lease's) check their own identity."""

    def register(fn: CommandFn) -> CommandFn:
        if name in _COMMANDS:
            raise ValueError(f"write command {name!r} registered twice")
        _COMMANDS[name] = CommandSpec(name, fn, fenced)
        return fn

    return register


def lookup(name: str) -> CommandSpec:
    """The command registered under `name`; raises UnknownCommand."""
    try:
        return _COMMANDS[name]
    except KeyError:
        raise UnknownCommand(name) from None


def command_names() -> list[str]:
    """Every registered command's name, sorted."""
    return sorted(_COMMANDS)


#: What a door says of the sender, kept with what it did: the kernel's pid and uid (the socket, the
#: embedding process), or the HTTP door's token name and remote address.
_PEER_KEYS = ("pid", "uid", "token", "remote")


def peer_provenance(peer: Any) -> dict[str, Any]:
    """The fields of a request's `peer` (set by the door, never by the client) that provenance keeps:
    `via` (socket, embedded, http) and the door's own words for who sent it (docs/security.md)."""
    if not isinstance(peer, dict):
        return {}
    return {"via": peer.get("via", "socket"), **{key: peer[key] for key in _PEER_KEYS if peer.get(key) is not None}}
