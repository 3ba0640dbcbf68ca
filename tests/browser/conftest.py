"""The console in a real browser: Debian's headless Chromium driven by Selenium, against a real host
with its HTTP door on 127.0.0.1 (an ephemeral port).

Without `chromium` and `chromedriver` on PATH the tests skip with a reason that .ci/expected-skips
does not list, so CI (which installs both, .ci/run) fails rather than skip them. Selenium is given
both paths, so Selenium Manager never downloads a driver or a browser.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "http"))

from http_support import Door, add_token, start_door  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

BROWSER_MISSING = ("the console's browser tests need Debian's chromium and chromium-driver "
                   "(apt-get install chromium chromium-driver; .ci/run installs them)")


@pytest.fixture
def door(state_dir: Path) -> Iterator[Door]:
    import httpx

    host, base = start_door(state_dir)
    socket = Client(state_dir, client_id=f"browser-tests-{uuid.uuid4().hex[:6]}")
    made: list[httpx.Client] = []
    try:
        tokens = {"ops": add_token(socket, "ops", "operator"), "eye": add_token(socket, "eye", "viewer")}
        d = Door(host, base, socket, httpx.Client(), httpx.Client(), tokens, made)
        d.operator = d.client(tokens["ops"])
        d.viewer = d.client(tokens["eye"])
        yield d
    finally:
        for client in made:
            client.close()
        socket.close()
        host.stop("test teardown")


@pytest.fixture
def browser() -> Iterator[object]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(BROWSER_MISSING)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("the console's browser tests need selenium (the test extra: pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,900", "--no-first-run", "--disable-extensions", "--lang=en-US"):
        options.add_argument(argument)
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    session.set_page_load_timeout(30)
    try:
        yield session
    finally:
        session.quit()  # ends chromedriver and every browser process it started
