"""A run events subscription following every run keeps no state for runs that ended before it began.

A note (`run.append_note`) appended to a run that finished before the subscription began names
that run in the writer's change notice. The subscription tells nothing of it — and must not keep a
cursor for it either: one per old run touched again would grow for as long as the host serves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pykka
from testsupport import wait_for

from piwf_actors.actors.base import Ping
from piwf_actors.actors.run_events import Tracked
from piwf_actors.run_notices import RunFinished

FLOWS = '''
from piwf_actors.workflows import compute, define_workflow
quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": True})}, edges=[])
'''


class Probe(pykka.ThreadingActor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "seen":
            return list(self.seen)
        self.seen.append(message)
        return None


def test_old_runs_touched_again_leave_no_state_behind(hosts, state_dir: Path) -> None:
    flows = state_dir / "flows.py"
    flows.write_text(FLOWS)
    host = hosts(state_dir, max_workers=1)
    old = [host.start_run(f"{flows}:quick", {"n": n}).run_id for n in range(3)]
    for run_id in old:
        host.wait_for_run(run_id, timeout=20)

    probe = Probe.start()
    try:
        subscription = host.subscribe(probe)
        ref = subscription.actor_ref
        for run_id in old:
            host.writer.call("run.append_note", {"run_id": run_id, "payload": {"text": "audited"}})
        new = host.start_run(f"{flows}:quick", {"n": 9}).run_id
        wait_for(lambda: [n for n in probe.ask("seen", timeout=5) if isinstance(n, RunFinished)], 20,
                 f"RunFinished of {new}")
        ref.ask(Ping(), timeout=5)
        ref.ask(Ping(), timeout=5)  # the flush the last notice scheduled has run

        assert {n.run_id for n in probe.ask("seen", timeout=5)} == {new}  # nothing of the old runs
        assert ref.ask(Tracked(), timeout=5) == {"following": 0, "named": 0, "finished": 4}
    finally:
        probe.stop()
