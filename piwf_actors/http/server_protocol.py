"""The door's HTTP/1.1 protocol for uvicorn: its httptools protocol, with a bound on a request's head.

Why httptools: it is llhttp (Node.js's C parser) behind uvicorn's own
protocol class, and it costs the door's thread about a third less CPU per
request than uvicorn's pure-Python h11 parser (bench/http_api.py: the host's
CPU per `run.start` over HTTP). Why a bound: neither llhttp nor uvicorn limits
how many bytes a request's line and headers may take (httptools keeps a
header's name and value in buffers until the header ends), so a client that
sends one endless header would grow the host's memory; h11 had
`h11_max_incomplete_event_size` for that. Here the bytes that arrive while a
request's head is open are counted, and past `max_head_bytes` the request is
answered `431` with one JSON line and the connection closed. The head that
begins inside a chunk counts from the next chunk on (the chunk may also hold
the end of the previous request), so the memory held stays under the bound
plus one read (asyncio reads at most 256 KiB at a time). A head that ends
within the bound is checked further by the app (`DoorGuard`: 64 headers,
8 KiB). No parsing here: the bytes go to httptools as they come.

Everything runs on the door's event-loop thread (uvicorn's protocol callbacks).
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def bounded_httptools(max_head_bytes: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol that refuses a request head over `max_head_bytes` (431, closed)."""
    body = json.dumps({"error": f"the request's line and headers are over {max_head_bytes} bytes"}).encode()
    refusal = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
               b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        _head_open = False  # from a request's first byte until its headers are complete
        _heads_begun = 0
        _head_bytes = 0

        def on_message_begin(self) -> None:
            self._head_open = True
            self._heads_begun += 1
            self._head_bytes = 0
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._head_open = False
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            open_before, begun_before = self._head_open, self._heads_begun
            super().data_received(data)
            if not self._head_open or self.transport.is_closing():
                return
            if open_before and self._heads_begun == begun_before:  # the whole chunk is this head's
                self._head_bytes += len(data)
            if self._head_bytes > max_head_bytes:
                self._head_open = False
                self.transport.write(refusal)
                self.transport.close()

    return BoundedHttpToolsProtocol

