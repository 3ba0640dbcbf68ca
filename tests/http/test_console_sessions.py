"""Console sessions live in the state database (`http_session`, hashed): a browser signed in on one
`piwf-host --http` process is still signed in on the next one (a restart, or a host taking over from a
SIGKILLed holder); signing out, or revoking the token the session came from, ends it on every host."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from http_support import add_token
from test_console import csrf
from testsupport import BIN_PIWF_HOST, ProcessGuard, guarded, host_database, wait_for

from piwf_actors.client import Client
from piwf_actors.store import http_queries
from piwf_actors.store.engines.registry import parse_database_url
from piwf_actors.store.reader import StoreReader

TAG_VAR = "PIWF_HTTP_SESSION_TAG"


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ProcessGuard]:
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: ProcessGuard(TAG_VAR, tag, tmp_path))


class HostProcess:
    """One `piwf-host --http 127.0.0.1:0` process of `state_dir` and the base URL its log names."""

    def __init__(self, guard: ProcessGuard, state_dir: Path) -> None:
        args = ["--state-dir", str(state_dir), "--http", "127.0.0.1:0", "--max-workers", "1"]
        database = host_database(state_dir)
        if database is not None:
            args += ["--database", database]
        self.script = guard.start_script(args, command=[BIN_PIWF_HOST])
        found = wait_for(lambda: re.search(r"HTTP door listening on http://127\.0\.0\.1:(\d+)", self.script.log()),
                         60, lambda: f"the door's line in the log:\n{self.script.log()}")
        self.base = f"http://127.0.0.1:{found.group(1)}"
        # A host that takes over from a SIGKILLed one on PostgreSQL is a standby until the lease runs out.
        wait_for(lambda: "host started" in self.script.log() and self._active(state_dir), 60,
                 lambda: f"the host's start as the active host:\n{self.script.log()}")

    @staticmethod
    def _active(state_dir: Path) -> bool:
        try:
            with Client(state_dir) as client:
                return bool(client.status()["role"] == "active")
        except Exception:  # noqa: BLE001 - not answering yet
            return False

    def browser(self, cookie: str) -> httpx.Client:
        """A client carrying the session cookie (as a browser would, to the same host on a new port)."""
        return httpx.Client(base_url=self.base, cookies={"piwf_session": cookie}, timeout=30.0)

    def stop(self) -> None:
        self.script.proc.send_signal(signal.SIGTERM)
        assert self.script.proc.wait(30) == 0, self.script.log()


def _sign_in(base: str, token: str) -> str:
    """Sign in through the form; the session cookie's value."""
    with httpx.Client(base_url=base, timeout=30.0) as client:
        page = client.get("/console/signin")
        check = re.search(r'name="check" value="([^"]+)"', page.text)
        assert check is not None, page.text
        answer = client.post("/console/signin", data={"check": check.group(1), "token": token,
                                                      "next": "/console/inbox"})
        assert answer.status_code == 303 and answer.headers["location"] == "/console/inbox", answer.text
        return client.cookies["piwf_session"]


def _sessions(state_dir: Path) -> list[dict[str, object]]:
    url = host_database(state_dir)
    reader = StoreReader(parse_database_url(url) if url is not None else state_dir / "state.db")
    try:
        return http_queries.sessions(reader)
    finally:
        reader.close()


def test_a_session_survives_restarts_and_ends_on_sign_out_or_revocation(guard: ProcessGuard,
                                                                         state_dir: Path) -> None:
    first = HostProcess(guard, state_dir)
    with Client(state_dir) as client:
        ops = add_token(client, "ops", "operator")
        eye = add_token(client, "eye", "viewer")
    kept, left, revoked = _sign_in(first.base, ops), _sign_in(first.base, ops), _sign_in(first.base, eye)
    with first.browser(kept) as browser:
        assert browser.get("/console/inbox").status_code == 200
    stored = _sessions(state_dir)
    assert len(stored) == 3 and {s["token"] for s in stored} == {"ops", "eye"}
    assert not any(cookie in repr(stored) for cookie in (kept, left, revoked))  # hashed: no cookie is stored
    first.stop()

    second = HostProcess(guard, state_dir)  # a clean restart
    for cookie in (kept, left, revoked):
        with second.browser(cookie) as browser:
            page = browser.get("/console/inbox")
            assert page.status_code == 200, (page.status_code, page.headers.get("location"))
    with second.browser(left) as browser:
        out = browser.post("/console/signout", data={"csrf": csrf(browser.get("/console/runs"))})
        assert out.status_code == 303 and out.headers["location"] == "/console/signin"
    second.script.sigkill()  # the holder dies; the next host takes over its lease

    third = HostProcess(guard, state_dir)
    with third.browser(kept) as browser:
        page = browser.get("/console/runs")
        assert page.status_code == 200, page.headers.get("location")
        # The CSRF token of a session is the same on every host: a form rendered before still posts.
        assert csrf(page)
    with third.browser(left) as browser:  # signed out on the host before
        assert browser.get("/console/runs").status_code == 303
    with third.browser(revoked) as browser:
        assert browser.get("/console/runs").status_code == 200
        with Client(state_dir) as client:
            assert client.request("http_token.revoke", {"name": "eye"}).outcome == "accepted"
        away = browser.get("/console/runs")
        assert away.status_code == 303 and away.headers["location"].startswith("/console/signin")
    assert {s["token"] for s in _sessions(state_dir)} == {"ops"}  # revoking removed the token's session
    third.stop()
    assert "Traceback" not in "".join(s.log() for s in guard.scripts)
