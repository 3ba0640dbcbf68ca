"""An HTTP fuzz against a real `piwf-host --http` process: malformed requests, huge headers, bad JSON,
wrong tokens, unknown paths and random bodies on every route leave the host up, answering each with one
line, and put no traceback in the host's log. And `--http` without the http extra is one line."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_support import add_token, flow
from testsupport import BIN_PIWF_HOST, ProcessGuard, guarded, wait_for

from piwf_actors.client import Client
from piwf_actors.http.routes import ROUTES

TAG_VAR = "PIWF_HTTP_FUZZ_TAG"
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


def test_the_fuzz_leaves_the_host_up_with_one_line_errors(guard: ProcessGuard, state_dir: Path) -> None:
    script = guard.start_script(["--state-dir", str(state_dir), "--http", "127.0.0.1:0", "--max-workers", "1"],
                                command=[BIN_PIWF_HOST])
    found = wait_for(lambda: re.search(r"HTTP door listening on http://127\.0\.0\.1:(\d+)", script.log()), 30,
                     lambda: f"the door's line in the log:\n{script.log()}")
    port = int(found.group(1))
    wait_for(lambda: "host started" in script.log(), 30, "the host's start")
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
