"""A person at the console in a real browser: signs in with a token, answers a waiting decision from the
inbox, watches the run finish on its page, and settles an ambiguous effect (a non-idempotent shell step
cut off by a SIGKILL of its worker).

The inbox's screenshot is written to the test's tmp dir; with PIWF_UPDATE_SCREENSHOTS=1 it also
replaces docs/images/console-inbox.png, the picture the README shows.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
from pathlib import Path
from typing import Any

import pytest
from http_support import Door, flow
from testsupport import wait_for

WORKFLOWS = Path(__file__).resolve().parent / "console_flows.py"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "console-inbox.png"

pytestmark = pytest.mark.timeout(180)


def start(door: Door, spec: str, run_input: Any = None) -> str:
    answer = door.operator.post("/api/v1/runs", json={"workflow": spec, "input": run_input})
    assert answer.status_code == 201, answer.text
    return answer.json()["receipt"]["run_id"]


def pending(door: Door, run_id: str) -> dict:
    def found() -> dict | None:
        listed = door.viewer.get("/api/v1/interactions").json()["receipt"]["requests"]
        return next((r for r in listed if r["run_id"] == run_id), None)

    return wait_for(found, 30, f"the request of run {run_id}")


def sign_in(browser: Any, door: Door, token: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{door.base}/console/inbox")
    assert "/console/signin" in browser.current_url  # no session: the sign-in page
    field = browser.find_element(By.ID, "token")
    field.send_keys(token)
    field.submit()
    wait_for(lambda: browser.current_url.endswith("/console/inbox") or None, 15, "the inbox after signing in")


def text_of(browser: Any, css: str) -> str:
    """The text of every element `css` matches, read in one script: a live page replaces its content
    when its stream says it changed, and an element found before that and read after is stale."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent).join(' ')", css)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_sign_in_answer_a_decision_from_the_inbox_and_see_the_run_finish(door: Door, browser: Any,
                                                                         tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    release = start(door, f"{WORKFLOWS}:release", {"version": "1.4.0"})
    notes = start(door, f"{WORKFLOWS}:notes")
    request = pending(door, release)
    pending(door, notes)
    sign_in(browser, door, door.tokens["ops"])

    card = f"[id='{request['request_id']}']"
    assert "Ship 1.4.0?" in text_of(browser, card) and "Needs changes" in text_of(browser, card)
    # The deadline counts down in the page (console.js): `in 59m…`.
    wait_for(lambda: "(in 59m" in text_of(browser, f"{card} [data-deadline]") or None, 10, "the deadline's countdown")
    shot = tmp_path / "console-inbox.png"
    assert browser.save_screenshot(str(shot))
    width, height = png_size(shot)
    assert width >= 800 and height >= 600
    if os.environ.get("PIWF_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(shot, SCREENSHOT)

    browser.find_element(By.CSS_SELECTOR, f"{card} button[value=ship]").click()
    wait_for(lambda: "decision.answer: accepted" in text_of(browser, ".note") or None, 15, "the answer's note")
    assert request["request_id"] not in browser.page_source or "Ship 1.4.0?" not in text_of(browser, "article h2")

    browser.find_element(By.LINK_TEXT, "Runs").click()
    browser.find_element(By.LINK_TEXT, release).click()
    # The page follows the run's stream: it shows `done` without a reload once the run ends.
    wait_for(lambda: "done" in text_of(browser, ".facts .status") or None, 30, "the run page to say done")
    assert "person via http (token ops)" in browser.page_source
    assert '"shipped": "1.4.0"' in browser.page_source
    view = door.operator.get(f"/api/v1/runs/{release}").json()["receipt"]
    by = next(n for n in view["nodes"] if n["node_id"] == "approve")["answer"]["by"]
    assert (view["status"], by["via"], by["token"]) == ("done", "http", "ops")


def test_an_ambiguous_effect_is_retried_from_the_effects_page(door: Door, browser: Any, state_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    marker = state_dir / "effect-marker"
    run_id = start(door, flow("effectful"), {"oracle": str(marker)})
    wait_for(marker.exists, 15, "the shell step to start")

    def worker_pid() -> int | None:
        for active in door.host.status()["scheduler"]["active"]:
            if active["run_id"] == run_id and active.get("pid"):
                return int(active["pid"])
        return None

    os.kill(wait_for(worker_pid, 10, "the run's worker"), signal.SIGKILL)
    parked = door.wait_status(run_id, ("parked",))
    assert parked["park_reason"] == "ambiguous_effect", parked
    (effect,) = [e for e in parked["effects"] if e["status"] == "ambiguous"]

    sign_in(browser, door, door.tokens["ops"])
    browser.find_element(By.LINK_TEXT, "Effects").click()
    assert effect["effect_id"] in browser.page_source and run_id in browser.page_source
    browser.find_element(By.XPATH, "//button[contains(., 'Retry')]").click()
    wait_for(lambda: "effect.resolve: accepted" in text_of(browser, ".note") or None, 15, "the resolution's note")
    assert effect["effect_id"] not in browser.page_source  # settled: no longer listed
    browser.get(f"{door.base}/console/runs/{run_id}")
    wait_for(lambda: "done" in text_of(browser, ".facts .status") or None, 30, "the run page to say done")
    output = next(n for n in door.operator.get(f"/api/v1/runs/{run_id}").json()["receipt"]["nodes"]
                  if n["node_id"] == "act")["output"]
    assert output["stdout"].strip() == "again"  # retried: the step ran again and found its marker
