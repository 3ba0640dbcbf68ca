"""The inbox on a phone and from a keyboard, in a real browser (Debian's headless Chromium, Selenium).

On a phone-sized viewport (390×844, as a phone's browser lays it out: the page's viewport meta tag
applies) the inbox has no horizontal overflow, even with a long unbroken word in a request (a build
id), and every answer button is on screen. A person who uses no pointer answers a decision with Tab
and Enter alone, and sees where the focus is (a `:focus-visible` outline).
"""

from __future__ import annotations

from typing import Any

import pytest
from http_support import Door
from test_console_browser import WORKFLOWS, pending, sign_in, start, text_of
from testsupport import wait_for

pytestmark = pytest.mark.timeout(180)

PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True}
#: A version with a long unbroken build id: the decision's title and summary carry it.
VERSION = "2.0.0+build.20261206.9f8e7d6c5b4a39281706f5e4d3c2b1a0"


def _overflow(browser: Any, width: int = 0) -> dict[str, Any]:
    """The page's width against the viewport's, and the elements that reach past the viewport's edge."""
    return browser.execute_script("""
        const width = arguments[0] || window.innerWidth;
        // An element past the edge, or one whose text spills out of its box (a long unbroken word).
        const wide = Array.from(document.querySelectorAll('body *'))
          .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && (r.right > width + 0.5 || r.left < -0.5
                         || (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible')); })
          .filter(e => !e.closest('.skip'))
          .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + (e.textContent || '').slice(0, 40));
        return {scroll: document.documentElement.scrollWidth, inner: window.innerWidth, wide: wide};""", width)


def _on_screen(browser: Any, css: str) -> list[str]:
    """The buttons `css` matches that are not fully inside the viewport's width, or not shown at all."""
    return browser.execute_script("""
        return Array.from(document.querySelectorAll(arguments[0])).filter(b => {
          const r = b.getBoundingClientRect(), s = getComputedStyle(b);
          return r.width === 0 || r.height === 0 || s.visibility === 'hidden' || r.left < 0 || r.right > window.innerWidth;
        }).map(b => b.textContent.trim());""", css)


def test_the_inbox_is_readable_on_a_phone(door: Door, browser: Any) -> None:
    release = start(door, f"{WORKFLOWS}:release", {"version": VERSION})
    notes = start(door, f"{WORKFLOWS}:notes")
    request = pending(door, release)
    pending(door, notes)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", PHONE)
    sign_in(browser, door, door.tokens["ops"])
    card = f"[id='{request['request_id']}']"
    wait_for(lambda: VERSION in text_of(browser, card) or None, 15, "the decision in the inbox")
    seen = _overflow(browser, PHONE["width"])
    # A phone's browser widens the layout past the device's width when something will not fit: so the
    # viewport must stay the device's width, and nothing may reach past it.
    assert seen["inner"] == PHONE["width"], seen
    assert seen["scroll"] <= seen["inner"], seen
    assert not seen["wide"], seen
    buttons = browser.execute_script("return Array.from(document.querySelectorAll('main button')).map(b => b.textContent.trim())")
    assert {"Ship it", "Stop", "Needs changes", "Answer"} <= set(buttons), buttons  # the choices, the checkpoint's
    assert _on_screen(browser, "main button") == []
    # The runs page too: its table becomes one block per run on a narrow screen.
    browser.get(f"{door.base}/console/runs")
    seen = _overflow(browser)
    assert seen["scroll"] <= seen["inner"], seen


def test_a_decision_is_answered_from_the_keyboard_with_a_visible_focus(door: Door, browser: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    release = start(door, f"{WORKFLOWS}:release", {"version": "3.1.0"})
    request = pending(door, release)
    sign_in(browser, door, door.tokens["ops"])
    target = f"[id='{request['request_id']}'] button[value=ship]"
    # A :focus-visible rule exists in the console's own stylesheet, and it draws an outline.
    rules = browser.execute_script("""
        return Array.from(document.styleSheets).flatMap(s => Array.from(s.cssRules))
          .filter(r => r.selectorText && r.selectorText.includes(':focus-visible')).map(r => r.cssText);""")
    assert rules and any("outline" in rule for rule in rules), rules

    browser.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    keys = ActionChains(browser)
    presses = 0  # the skip link, the menu, sign-out, the run's link, then the choices
    while not browser.execute_script("return document.activeElement.matches(arguments[0])", target):
        presses += 1
        keys.send_keys(Keys.TAB).perform()
        if presses > 40:
            pytest.fail(f"Tab never reached the decision's Ship it button; focus ended on "
                        f"{browser.execute_script('return document.activeElement.outerHTML.slice(0, 200)')}")
    focus = browser.execute_script("""
        const e = document.activeElement, s = getComputedStyle(e);
        return {visible: e.matches(':focus-visible'), style: s.outlineStyle, width: parseFloat(s.outlineWidth)};""")
    assert focus["visible"] and focus["style"] != "none" and focus["width"] >= 2, focus
    assert presses <= 20, presses  # the skip link and the menu come first, not a maze

    keys.send_keys(Keys.ENTER).perform()
    wait_for(lambda: "decision.answer: accepted" in text_of(browser, ".note") or None, 15, "the answer's note")
    view = door.wait_status(release, ("done",))
    assert view["output"] == {"shipped": "3.1.0"}
