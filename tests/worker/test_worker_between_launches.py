"""A warm worker between launches: a `hold` meant for the launch that just ended is not a broken protocol.

The supervisor tells its worker `hold` when a pause is requested for the run it serves; the request can
be handled just after the worker ended that launch (its `run_over` is on the way), so the frame reaches
an idle worker. The worker must ignore it and serve the next launch, not exit (which would report that
next launch as crashed).
"""

from __future__ import annotations

from piwf_actors.worker.process import WorkerProcess


def test_a_hold_between_launches_is_ignored() -> None:
    worker = WorkerProcess.spawn()
    try:
        assert worker.recv()["kind"] == "hello"
        worker.send({"kind": "hold"})
        assert worker.alive() or worker.process.poll() == 0
        assert worker.shutdown(timeout_s=10) == 0
    finally:
        if worker.alive():
            worker.kill()
