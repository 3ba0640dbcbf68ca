"""Write commands that only the tests register (imported by conftest.py).

The package's commands are what clients and workers can ask for; these two
let a store or writer test set up a state directly:

- `run.create`: insert a queued run from a spec (what `run.start` does, with
  no client idempotency record around it);
- `run.append_note`: append one `note`/`log` event to a run (a one-row
  command, for tests of batching, savepoints and event sequences).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import Rejected
from piwf_actors.store.commands.registry import WriteContext, command
from piwf_actors.store.commands.runs import start_run
from piwf_actors.store.events import append_event

NOTE_KINDS = frozenset({"note", "log"})


@command("run.create")
def create_run(ctx: WriteContext, args: dict[str, Any]) -> dict[str, Any]:
    return start_run(ctx, {"spec": args})["receipt"]


@command("run.append_note")
def append_note(ctx: WriteContext, args: dict[str, Any]) -> int | None:
    kind = args.get("kind", "note")
    if kind not in NOTE_KINDS:
        raise Rejected(f"event kind {kind!r} cannot be appended as a note")
    run_id = args["run_id"]
    seq = append_event(ctx.conn, run_id, kind, ctx.now, node_id=args.get("node_id"), payload=args.get("payload"),
                       want_seq=True)
    ctx.changes.touch("run_event", run_id)
    return seq
