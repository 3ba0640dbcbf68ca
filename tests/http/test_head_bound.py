"""A request head that never ends is cut at the door's bound (http/server_protocol.py): the door's C parser
(httptools) alone would keep every byte of an endless header in memory."""

from __future__ import annotations

import socket
import urllib.parse
from pathlib import Path

import httpx
from http_support import start_door

from piwf_actors.http.app import HttpLimits

PIECE = b"a" * 4096
#: Far past the bound: a door that keeps reading takes all of it.
SENT_AT_MOST = 32 * 1024 * 1024


def _endless_head(port: int) -> tuple[int, bytes]:
    """Send one header's value piece by piece until the door closes (or SENT_AT_MOST); (bytes sent, answer)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/host HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        try:
            while sent < SENT_AT_MOST:
                sock.sendall(PIECE)
                sent += len(PIECE)
        except OSError:
            pass  # the door closed the connection: what this test waits for
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
    return sent, b"".join(chunks)


def test_an_endless_header_is_refused_at_the_bound_and_the_door_serves_on(state_dir: Path) -> None:
    host, base = start_door(state_dir)
    try:
        port = urllib.parse.urlsplit(base).port
        assert port is not None
        sent, answer = _endless_head(port)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
        assert b'{"error": "the request\'s line and headers are over ' in answer, answer[:400]
        # Cut near the bound (16 KiB): what was sent meanwhile sits in the kernel's buffers, a few MiB at most.
        assert HttpLimits().max_head_bytes == 16 * 1024
        assert sent < SENT_AT_MOST, sent
        # The door serves the next connection as before.
        assert httpx.get(f"{base}/api/v1/host", timeout=10).status_code == 401
    finally:
        host.stop("test teardown")
