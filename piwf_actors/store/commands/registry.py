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
from piwf_actors.store.dialect import Connection
from piwf_actors.store.requests import ChangeSet


@dataclass(slots=True)
class WriteContext:
    conn: Connection
    now: float
    host_epoch: int
    changes: ChangeSet
    #: The command runs in its own savepoint (the batch's second pass, see store/batch.py).
    savepoints: bool = False


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
    try:
        return _COMMANDS[name]
    except KeyError:
        raise UnknownCommand(name) from None


def command_names() -> list[str]:
    return sorted(_COMMANDS)
