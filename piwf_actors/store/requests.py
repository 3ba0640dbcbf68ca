"""The records that travel to and from the database writer.

They are plain wire values (str, int, float, dict, list) so that any of them
round-trips through msgpack unchanged and could cross a process boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from piwf_actors import errors


@dataclass(frozen=True, slots=True)
class WriteCommand:
    """One named write: `name` selects a function in `store.commands`.

    `host_epoch` fences the write: a fenced command whose epoch is not the
    lease's current epoch is refused inside the transaction. A runner host's
    commands carry its runner identity instead (`runner_id` and the epoch of
    its runner lease, docs/runners.md): they are fenced by that lease, and
    `host_epoch` is then ignored.
    """

    name: str
    args: dict[str, Any]
    host_epoch: int | None = None
    correlation_id: str | None = None
    runner_id: str | None = None
    runner_lease_epoch: int | None = None
    #: The sender does not wait for this answer (a worker's pipelined result, worker/supervisor_link.py)
    #: and is likely to send more at once: the writer may hold such a batch a moment to take the
    #: next ones into the same commit (DatabaseWriter._gather).
    pipelined: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "write_command", "name": self.name, "args": self.args,
                "host_epoch": self.host_epoch, "correlation_id": self.correlation_id,
                "runner_id": self.runner_id, "runner_lease_epoch": self.runner_lease_epoch,
                "pipelined": self.pipelined}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> WriteCommand:
        try:
            if data.get("kind") != "write_command" or set(data) != {
                "kind", "name", "args", "host_epoch", "correlation_id", "runner_id", "runner_lease_epoch",
                "pipelined"}:
                raise errors.DecodeError("not a write_command record")
            name, args, epoch, corr = data["name"], data["args"], data["host_epoch"], data["correlation_id"]
            runner_id, runner_lease_epoch = data["runner_id"], data["runner_lease_epoch"]
            if (runner_id is None) != (runner_lease_epoch is None):
                raise errors.DecodeError("write_command runner_id and runner_lease_epoch go together")
            if runner_id is not None and (not isinstance(runner_id, str) or isinstance(runner_lease_epoch, bool)
                                          or not isinstance(runner_lease_epoch, int)):
                raise errors.DecodeError("write_command runner_id must be a str and runner_lease_epoch an int")
            if not isinstance(name, str) or not isinstance(args, dict):
                raise errors.DecodeError("write_command needs a str name and a map of args")
            if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
                raise errors.DecodeError("write_command host_epoch must be an int")
            if corr is not None and not isinstance(corr, str):
                raise errors.DecodeError("write_command correlation_id must be a str")
            if not isinstance(data["pipelined"], bool):
                raise errors.DecodeError("write_command pipelined must be a bool")
        except (AttributeError, TypeError) as exc:
            raise errors.DecodeError("not a write_command record") from exc
        return cls(name, args, epoch, corr, runner_id, runner_lease_epoch, data["pipelined"])


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The writer's answer to one command, sent only after the commit (or refusal)."""

    ok: bool
    value: Any = None
    error_code: str | None = None
    error: str | None = None
    correlation_id: str | None = None
    commit_seq: int | None = None

    def unwrap(self) -> Any:
        """The value, or the typed error this result stands for."""
        if self.ok:
            return self.value
        raise error_from_code(self.error_code or "error", self.error or "")

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "write_result", "ok": self.ok, "value": self.value,
                "error_code": self.error_code, "error": self.error,
                "correlation_id": self.correlation_id, "commit_seq": self.commit_seq}


@dataclass(frozen=True, slots=True)
class WriteResults:
    """Several results for one actor from one batch, told as one message (one thread hand-off
    instead of one per command: a worker's pipelined results often commit together). An actor
    handles it as its WriteResults, in order (`actors/base.py`)."""

    results: tuple[WriteResult, ...]


@dataclass(frozen=True, slots=True)
class ChangeNotice:
    """Published after each commit: what changed, under which commit sequence."""

    commit_seq: int
    tables: tuple[str, ...]
    runs: tuple[str, ...]
    committed_at: float

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "change_notice", "commit_seq": self.commit_seq,
                "tables": list(self.tables), "runs": list(self.runs),
                "committed_at": self.committed_at}


@dataclass(slots=True)
class ChangeSet:
    tables: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)
    # Runs that ended in this transaction: (run_id, workflow, status, error_code, error_message).
    finished: list[tuple[str, str, str, str | None, str | None]] = field(default_factory=list)

    def touch(self, table: str, run_id: str | None = None) -> None:
        self.tables.add(table)
        if run_id is not None:
            self.runs.add(run_id)

    def merge(self, other: ChangeSet) -> None:
        self.tables |= other.tables
        self.runs |= other.runs
        self.finished += other.finished


class _CodedError(errors.PiwfError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_CODE_TO_CLASS: dict[str, type[errors.PiwfError]] = {
    cls.code: cls
    for cls in (
        errors.DiskFull, errors.ReadOnlyDatabase, errors.StaleEpoch, errors.LeaseExpired, errors.AdapterReplaced, errors.ClaimLost,
        errors.Conflict, errors.NotFound, errors.Rejected, errors.UnknownCommand,
        errors.WriterStopped, errors.LeaseLost, errors.StoreError, errors.CommandFailed, errors.HostAlreadyRunning,
        errors.RunnerLeaseLost, errors.RunnerAlreadyRunning, errors.RunnerHostRefusal,
    )
}


def error_from_code(code: str, message: str) -> errors.PiwfError:
    """Rebuild a typed error from (code, message) without calling its constructor."""
    cls = _CODE_TO_CLASS.get(code)
    if cls is None:
        return _CodedError(code, message)
    err = cls.__new__(cls)
    errors.PiwfError.__init__(err, message)
    # The typed constructor arguments did not travel; leave them defined but unknown.
    for attribute in ("pid", "epoch", "current_epoch", "run_id", "kind", "key", "name", "path", "reason",
                      "runner_id", "active_host_id"):
        if not hasattr(err, attribute):
            setattr(err, attribute, None)
    return err
