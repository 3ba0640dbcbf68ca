"""An HTTP fuzz against a real `piwf-host --http` process: malformed requests, huge headers, bad JSON,
wrong tokens, unknown paths and random bodies on every route leave the host up, answering each with one
line, and put no traceback in the host's log. The same for the signed webhooks (`/hooks/NAME`): forged,
stale and malformed signatures, bearer tokens instead of one, bad JSON under a good signature, odd
delivery ids; the log never holds the secret. And `--http` without the http extra is one line."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_support import add_token, flow
from testsupport import BIN_PIWF_HOST, HostScript, ProcessGuard, guarded, host_database, wait_for

from piwf_actors.client import Client
from piwf_actors.http.routes import ROUTES

TAG_VAR = "PIWF_HTTP_FUZZ_TAG"
HOOK_SECRET = "fuzz-hook-secret-" + uuid.uuid4().hex
VALUES: list[Any] = [None, True, 0, -1, 2**60, 1.5, "", "x" * 300, "run_nope", [], [1, [2, [3]]], {}, {"a": {"b": 1}},
                     "\u0000\ud7ff", "💥"]


@pytest.fixture
def guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ProcessGuard]:
    yield from guarded(monkeypatch, TAG_VAR, lambda tag: ProcessGuard(TAG_VAR, tag, tmp_path))


def _raw(port: int, data: bytes) -> bytes:
    """Send raw bytes, read what comes back until the server closes (or 5 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
    return b"".join(chunks)


def _one_line(response: httpx.Response) -> None:
    """Every answer is JSON with one line of error or an outcome (the door's own, or the operation's)."""
    body = response.json()
    assert isinstance(body, dict), response.text
    if response.status_code >= 400:
        text = body.get("error")
        assert isinstance(text, str) and text and "\n" not in text and len(text) <= 1000, body
        assert "Traceback" not in text


def _start(guard: ProcessGuard, state_dir: Path) -> tuple[HostScript, int]:
    """A `piwf-host --http 127.0.0.1:0` process of `state_dir`, started; its port."""
    args = ["--state-dir", str(state_dir), "--http", "127.0.0.1:0", "--max-workers", "1"]
    database = host_database(state_dir)
    if database is not None:
        args += ["--database", database]
    script = guard.start_script(args, command=[BIN_PIWF_HOST])
    found = wait_for(lambda: re.search(r"HTTP door listening on http://127\.0\.0\.1:(\d+)", script.log()), 30,
                     lambda: f"the door's line in the log:\n{script.log()}")
    wait_for(lambda: "host started" in script.log(), 30, "the host's start")
    return script, int(found.group(1))


def test_the_fuzz_leaves_the_host_up_with_one_line_errors(guard: ProcessGuard, state_dir: Path) -> None:
    script, port = _start(guard, state_dir)
    with Client(state_dir) as client:
        token = add_token(client, "fuzz", "operator")
    base = f"http://127.0.0.1:{port}"
    rng = random.Random(34)

    raw_inputs = [b"GARBAGE\r\n\r\n", b"\x00\xff" * 500, b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 40_000 + b"\r\n\r\n",
                  b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{",
                  b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                  b"GET /api/v1/host HTTP/9.9\r\n\r\n", b"GET " + b"/a" * 20_000 + b" HTTP/1.1\r\n\r\n",
                  b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{"]
    for data in raw_inputs:
        answer = _raw(port, data)
        if answer:
            head = answer.split(b"\r\n", 1)[0]
            assert re.match(rb"HTTP/1\.1 (400|401|404|413|422|431) ", head), answer[:300]

    # A body cut off by the client (signed in: the body is read) is the client's mistake, not a host bug.
    auth = f"Authorization: Bearer {token}\r\n".encode()
    for data in (b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 50\r\n\r\n{\"a\"",
                 b"POST /api/v1/runs HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
                 b"POST /console/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 b"Content-Length: 80\r\n\r\ntoken=abc",
                 b"POST /console/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"):
        answer = _raw(port, data)
        if answer:
            assert re.match(rb"HTTP/1\.1 (400|401|403) ", answer.split(b"\r\n", 1)[0]), answer[:300]

    with httpx.Client(base_url=base, timeout=30.0) as anonymous, \
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30.0) as http:
        for bad in ("", "Bearer", "Bearer " + "x" * 600, "Basic abc", "Bearer piwf_wrong", "bearer x y"):
            answer = anonymous.get("/api/v1/runs", headers={"Authorization": bad} if bad else {})
            assert answer.status_code == 401
            _one_line(answer)
        for path in ("/", "/api", "/api/v1", "/api/v1/runs/x/y/z", "/api/v1/%00", "/../../etc/passwd",
                     "/api/v1/runs/" + "r" * 5000):
            answer = http.get(path)
            assert answer.status_code in (404, 422), (path, answer.status_code)
            _one_line(answer)
        assert http.get("/api/v1/host", headers={"X-Big": "v" * 9000}).status_code == 431
        for body in (b"{", b"null", b"[]", b'"s"', b"{\"a\": 1e999}", b"{\"input\": Infinity}", b"\xff\xfe",
                     b"{" * 5000, b'{"workflow": "' + b"w" * 10 + b'"' + b"}" * 3):
            answer = http.post("/api/v1/runs", content=body)
            assert answer.status_code in (400, 404, 413, 422), (body[:40], answer.status_code, answer.text)
            _one_line(answer)
        for _ in range(300):
            route = rng.choice(ROUTES)
            path = route.path
            for name in route.path_params:
                path = path.replace("{" + name + "}", rng.choice(["run_nope", "x", "1", "req_" + "0" * 30]))
            if route.stream is not None:
                continue
            if route.method == "GET":
                params = {rng.choice(["limit", "status", "after", "zzz", "cursor"]): rng.choice(["1", "-1", "x", ""])}
                answer = http.get(path, params=params)
            else:
                body = {rng.choice(["workflow", "input", "topic", "payload", "choice", "value", "action",
                                    "expected_revision", "bogus", "run_id", "priority"]): rng.choice(VALUES)
                        for _ in range(rng.randint(0, 4))}
                answer = http.post(path, content=json.dumps(body).encode(),
                                   headers={"Idempotency-Key": rng.choice(["k", "k" * 300, str(rng.random())])})
            assert answer.status_code in (200, 201, 400, 404, 409, 413, 422, 503), (path, answer.text)
            _one_line(answer)

        # Still up and serving: a run starts and finishes over HTTP; the socket answers too.
        run_id = http.post("/api/v1/runs", json={"workflow": flow("quick")}).json()["receipt"]["run_id"]
        wait_for(lambda: http.get(f"/api/v1/runs/{run_id}").json()["receipt"]["status"] == "done", 30,
                 "the run after the fuzz")
    with Client(state_dir) as client:
        assert client.status()["role"] == "active"
    assert script.proc.poll() is None
    log = script.log()
    assert "Traceback" not in log, log[-3000:]


def _signed(raw: bytes, secret: str = HOOK_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def _stripe(raw: bytes, at: int, secret: str = HOOK_SECRET) -> str:
    return f"t={at},v1=" + hmac.new(secret.encode(), f"{at}.".encode() + raw, hashlib.sha256).hexdigest()


def test_the_hooks_fuzz_leaves_the_host_up_with_one_line_errors(guard: ProcessGuard, state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700, exist_ok=True)
    (state_dir / "hooks.toml").write_text(f"""
[push]
workflow = "{flow('quick')}"
secret_file = "hook.secret"

[go]
topic = "go"
run_field = "target.run"
secret_file = "hook.secret"

[pay]
workflow = "{flow('quick')}"
secret_file = "hook.secret"
signature = "stripe"
""")
    (state_dir / "hook.secret").write_text(HOOK_SECRET + "\n")
    (state_dir / "hook.secret").chmod(0o600)
    script, port = _start(guard, state_dir)
    with Client(state_dir) as client:
        token = add_token(client, "fuzz", "operator")
    rng = random.Random(3434)

    for data in (b"POST /hooks/push HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{",
                 b"POST /hooks/push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 b"POST /hooks/push HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: " + b"s" * 40_000 + b"\r\n\r\n",
                 b"POST /hooks/" + b"p" * 20_000 + b" HTTP/1.1\r\n\r\n",
                 b"POST /hooks/push HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{"):
        answer = _raw(port, data)
        if answer:
            head = answer.split(b"\r\n", 1)[0]
            assert re.match(rb"HTTP/1\.1 (400|401|404|413|431) ", head), answer[:300]

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0) as http:
        good = json.dumps({"n": 1}).encode()
        # A token is no signature: the operator's own bearer token opens no hook.
        for bearer in (f"Bearer {token}", "Bearer piwf_wrong", "Basic abc"):
            answer = http.post("/hooks/push", content=good, headers={"Authorization": bearer,
                                                                      "X-GitHub-Delivery": "d-bearer"})
            assert answer.status_code == 401, answer.text
            _one_line(answer)
        assert http.post("/hooks/push", content=good, headers={"X-Big": "v" * 9000}).status_code == 431
        assert http.post("/hooks/push", content=b"x" * (1024 * 1024 + 1),
                         headers={"X-Hub-Signature-256": "sha256=0"}).status_code == 413
        # Bad JSON under a good signature: 400, one line.
        for body in (b"{", b"\xff\xfe", b"{" * 5000, b'{"a": Infinity}', b"", b"[" * 100_000):
            answer = http.post("/hooks/push", content=body, headers={"X-Hub-Signature-256": _signed(body),
                                                                     "X-GitHub-Delivery": "d-bad"})
            assert answer.status_code in (400, 413), (body[:20], answer.status_code, answer.text)
            _one_line(answer)
        now = int(time.time())
        signatures = [lambda raw: None, lambda raw: _signed(raw), lambda raw: _signed(raw, "guess"),
                      lambda raw: _signed(raw + b" "), lambda raw: "sha256=zz", lambda raw: "sha1=" + "0" * 40,
                      lambda raw: b"sha256=" + "é".encode("latin-1") * 64, lambda raw: "x" * 2000, lambda raw: _stripe(raw, now),
                      lambda raw: _stripe(raw, now - 3600), lambda raw: _stripe(raw, now, "guess"),
                      lambda raw: "t=x,v1=", lambda raw: f"t={now}", lambda raw: "t=1,v1=" + "0" * 64 * 40]
        for _ in range(300):
            name = rng.choice(["push", "go", "pay", "nope", "PUSH", "push%00", "a" * 80])
            body: Any = rng.choice(VALUES + [{"target": {"run": rng.choice(["run_nope", 1, None, "x" * 300])}},
                                             {"id": rng.choice(["evt_1", "", None, 7, "\u0000"])}])
            raw = json.dumps(body).encode() if rng.random() < 0.9 else bytes(rng.getrandbits(8) for _ in range(40))
            headers = {"Content-Type": rng.choice(["application/json", "text/plain", "x/y"])}
            signature = rng.choice(signatures)(raw)
            if signature is not None:
                headers[rng.choice(["X-Hub-Signature-256", "Stripe-Signature"])] = signature
            delivery = rng.choice([None, "d-1", "d-" + str(rng.random()), "d" * 300, "tab\there", ""])
            if delivery is not None:
                headers["X-GitHub-Delivery"] = delivery
            answer = http.post(f"/hooks/{name}", content=raw, headers=headers)
            assert answer.status_code in (200, 201, 400, 401, 404, 409, 413, 422, 503), (name, answer.text)
            _one_line(answer)

        # Still up and serving: a signed delivery starts a run that finishes.
        raw = json.dumps({"n": 2}).encode()
        started = http.post("/hooks/push", content=raw, headers={"X-Hub-Signature-256": _signed(raw),
                                                                 "X-GitHub-Delivery": "d-after"})
        assert started.status_code == 201, started.text
        run_id = started.json()["receipt"]["run_id"]
    with Client(state_dir) as client:
        wait_for(lambda: client.request("run.get", run_id=run_id).receipt["status"] == "done", 30,
                 "the run after the fuzz")
        assert client.status()["role"] == "active"
    assert script.proc.poll() is None
    log = script.log()
    assert "Traceback" not in log, log[-3000:]
    assert HOOK_SECRET not in log and "refused a delivery" in log


def test_http_without_the_extra_is_one_line(state_dir: Path) -> None:
    blocker = ("import sys, importlib.abc\n"
               "class Block(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name.split('.')[0] in ('starlette', 'uvicorn'):\n"
               "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
               "sys.meta_path.insert(0, Block())\n"
               "from piwf_actors.cli.host import main\n"
               f"sys.exit(main(['--state-dir', {str(state_dir)!r}, '--http', '8080']))\n")
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "piwf-host: error: --http needs the http extra (starlette is missing): pip install 'piwf_actors[http]'"]
