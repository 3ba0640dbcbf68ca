"""`bin/piwf-top` in a real 80×24 terminal (tmux) on a durable function run (piwf_actors.durable)
parked at a decision: the run list, its detail (the steps it took, each a node of the run's picture,
the decision marked where the run is) and the pending decision, answered from the console as for a
graph run. The tmux helpers and fixtures are tests/top/test_top_tmux.py's."""

from __future__ import annotations

import re
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_top_tmux import _keys, _open, _screen_until, host_dir, tmux  # noqa: F401 (fixtures)

from piwf_actors import HostHandle
from piwf_actors.client import Client

pytestmark = [pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
              pytest.mark.timeout(120, method="thread")]

SHIPPER = textwrap.dedent('''
    from piwf_actors.durable import decide, step, workflow


    @step
    def build(version: str) -> str:
        return f"build-{version}"


    @step(effect=True)
    def ship(artifact: str) -> dict:
        return {"shipped": artifact}


    @workflow(name="shipper")
    def shipper(version: str) -> dict:
        artifact = build(version)
        check = build.named("check")(version)
        answer = decide("approve", title=f"Ship {version}?", choices={"ship": "Ship it", "hold": "Hold"})
        if answer.choice == "ship":
            return ship(artifact) | {"check": check}
        return {"held": True}
''')


@pytest.fixture
def shipper() -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="pt-fn-", dir="/tmp"))
    (folder / "shipper.py").write_text(SHIPPER)
    try:
        yield f"{folder / 'shipper.py'}:shipper"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_top_shows_a_function_runs_steps_and_answers_its_decision(
        host_dir: tuple[HostHandle, Path], tmux: list[str], shipper: str) -> None:  # noqa: F811
    host, state = host_dir
    with Client(state) as client:
        run_id = client.start(shipper, {"version": "4.2"})["run_id"]
        host.wait_for_run(run_id, ("parked",), timeout=30)

    _open(tmux, "top", state)
    screen = _screen_until(tmux, "top", lambda s: "shipper" in s and "Ship 4.2?" in s, "the run and its decision")
    assert "parked (waiting)" in screen

    _keys(tmux, "top", "Enter")  # the only run: open its detail
    screen = _screen_until(tmux, "top", lambda s: f"detail  {run_id}" in s and "approve  human_decision" in s,
                           "the detail of the function run, with its steps")
    assert "├── build  compute   ✓ succeeded  \"build-4.2\"" in screen, screen
    assert "├── check  compute   ✓ succeeded  \"build-4.2\"" in screen, screen  # step.named: an id of its own
    assert re.search(r"└── approve  human_decision\s+⏳ waiting\s+◀ here", screen), screen
    assert "waiting for an answer (decision, no deadline)" in screen, screen

    _keys(tmux, "top", "Escape")
    screen = _screen_until(tmux, "top", lambda s: " decisions " in s and "Ship 4.2?" in s, "the run list again")
    match = re.search(r"(\d) ship\b", screen)
    assert match, f"no numbered ship choice:\n{screen}"
    _keys(tmux, "top", match.group(1))
    _screen_until(tmux, "top", lambda s: "answer ship to Ship 4.2? y/n" in s, "the answer confirmation")
    with Client(state) as client:
        assert client.get(run_id)["status"] == "parked"
    _keys(tmux, "top", "y")
    view = host.wait_for_run(run_id, timeout=30)
    assert view["status"] == "done" and view["output"] == {"shipped": "build-4.2", "check": "build-4.2"}, view
    _screen_until(tmux, "top", lambda s: "answer ship to Ship 4.2: accepted" in s and "nothing to decide" in s,
                  "the answer's outcome")
    _keys(tmux, "top", "q")
    _screen_until(tmux, "top", lambda s: "EXITED 0" in s, "exit status 0 after q")
