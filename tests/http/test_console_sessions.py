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
    """One `piwf-host --http 127.0.0.1:0` process of `state_dir` and the base URL its log names; `args` add
    to (or replace the database of) the defaults. Returns once the host serves as `role`."""

    def __init__(self, guard: ProcessGuard, state_dir: Path, *args: str, role: str = "active") -> None:
        base_args = ["--state-dir", str(state_dir), "--http", "127.0.0.1:0", "--max-workers", "1"]
        database = host_database(state_dir)
        if database is not None and "--database" not in args:
            base_args += ["--database", database]
        self.state_dir = state_dir
        self.script = guard.start_script([*base_args, *args], command=[BIN_PIWF_HOST])
        found = wait_for(lambda: re.search(r"HTTP door listening on http://127\.0\.0\.1:(\d+)", self.script.log()),
                         60, lambda: f"the door's line in the log:\n{self.script.log()}")
        self.base = f"http://127.0.0.1:{found.group(1)}"
        # A host that takes over from a SIGKILLed one on PostgreSQL is a standby until the lease runs out.
        self.wait_role(role)

    def wait_role(self, role: str) -> None:
        def serving() -> bool:
            if self.script.proc.poll() is not None:
                pytest.fail(f"the host exited with {self.script.proc.returncode}:\n{self.script.log()}")
            return self.role() == role

        wait_for(serving, 60, lambda: f"the host to serve as {role}:\n{self.script.log()}")

    def role(self) -> str | None:
        try:
            with Client(self.state_dir, timeout=2, retries=0) as client:
                return str(client.status()["role"])
        except Exception:  # noqa: BLE001 - not answering yet
            return None

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


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_database(request: pytest.FixtureRequest, other_state_dir: Path) -> str:
    """A database two hosts share (each with a state directory of its own)."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("pg_database").url)
    return f"sqlite://{other_state_dir}/state.db"


@pytest.fixture
def two_host_guard(shared_database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ProcessGuard]:
    """The guard, made after the shared database (a PostgreSQL cluster started under the guard's tag would
    count as the test's leftover)."""
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: ProcessGuard(TAG_VAR, tag, tmp_path))


def test_a_session_opens_pages_on_a_standby_and_survives_its_takeover(two_host_guard: ProcessGuard, state_dir: Path,
                                                                       shared_database: str) -> None:
    guard = two_host_guard
    shared = ["--database", shared_database, "--lease-s", "2"]
    active = HostProcess(guard, state_dir / "a", *shared, "--host-id", "host-a")
    standby = HostProcess(guard, state_dir / "b", *shared, "--host-id", "host-b", role="standby")
    with Client(state_dir / "a") as client:
        ops = add_token(client, "ops", "operator")
    cookie = _sign_in(active.base, ops)
    with standby.browser(cookie) as browser:
        assert browser.get("/console/inbox").status_code == 200  # the standby reads the session too
    # A standby writes nothing: signing in there says so in one line and sets no cookie.
    with httpx.Client(base_url=standby.base, timeout=30.0) as fresh:
        page = fresh.get("/console/signin")
        check = re.search(r'name="check" value="([^"]+)"', page.text)
        assert check is not None, page.text
        refused = fresh.post("/console/signin", data={"check": check.group(1), "token": ops})
        assert refused.status_code == 503 and "the host did not open a session" in refused.text, refused.text
        assert "piwf_session" not in fresh.cookies
    active.script.sigkill()
    standby.wait_role("active")
    with standby.browser(cookie) as browser:
        page = browser.get("/console/runs")
        assert page.status_code == 200, page.headers.get("location")
        out = browser.post("/console/signout", data={"csrf": csrf(page)})  # a form the new active host takes
        assert out.status_code == 303 and out.headers["location"] == "/console/signin"
        assert browser.get("/console/runs").status_code == 303
    assert "Traceback" not in "".join(s.log() for s in guard.scripts)
