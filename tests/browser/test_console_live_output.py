"""A running shell node's output in a real browser: the run page's log fills as the node prints (what it
printed before the page opened first), over the run's Server-Sent Events stream, without a reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from http_support import Door
from test_console_browser import sign_in, text_of
from testsupport import wait_for

pytestmark = pytest.mark.timeout(180)

PRINTS = '''
import shlex

from piwf_actors.workflows import define_workflow, shell


def _command(ctx):
    gate, started = shlex.quote(ctx.input["gate"]), shlex.quote(ctx.input["started"])
    return (f"echo 'first line'; echo 'to stderr' >&2; touch {started}; "
            f"while [ ! -e {gate} ]; do sleep 0.05; done; echo 'second line'; "
            f"while [ ! -e {gate}.2 ]; do sleep 0.05; done")


prints = define_workflow(name="prints", start_at="talk", edges=[],
                         nodes={"talk": shell(command=_command, shell=True)})
'''


def test_the_run_page_shows_a_running_nodes_output_as_it_is_printed(door: Door, browser: Any,
                                                                    state_dir: Path) -> None:
    flows = state_dir / "prints.py"
    flows.write_text(PRINTS)
    gate, started = state_dir / "gate", state_dir / "started"
    answer = door.operator.post("/api/v1/runs", json={"workflow": f"{flows}:prints",
                                                      "input": {"gate": str(gate), "started": str(started)}})
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["receipt"]["run_id"]
    wait_for(started.exists, 30, "the shell node to print its first lines")
    sign_in(browser, door, door.tokens["eye"])
    browser.get(f"{door.base}/console/runs/{run_id}")
    # Printed before the page opened: replayed by the stream; stderr in its own colour.
    wait_for(lambda: "first line" in text_of(browser, "#node-output") or None, 20, "the output so far")
    assert "to stderr" in text_of(browser, "#node-output .stderr")
    marker = browser.execute_script("window.piwfMarker = 1; return window.piwfMarker")
    gate.touch()
    wait_for(lambda: "second line" in text_of(browser, "#node-output") or None, 20, "the line printed live")
    assert browser.execute_script("return window.piwfMarker") == marker  # the same page: no reload
    (state_dir / "gate.2").touch()
    # The run ends: the page draws its last state, the node's stored output in place of the live log.
    wait_for(lambda: "done" in text_of(browser, ".facts .status") or None, 30, "the run page to say done")
    wait_for(lambda: not text_of(browser, "#node-output") or None, 10, "the live log to go")
    assert "second line" in browser.page_source
