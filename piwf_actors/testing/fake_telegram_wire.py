"""The wire of the fake Bot API (`fake_telegram.py`): parameters parsed and checked the way
Telegram does for the parts the decision channel uses, error answers, and the HTTP server and
handler that hand each authorized call to the fake. Only ever bound to 127.0.0.1."""

from __future__ import annotations

import itertools
import json
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_TEXT_CHARS = 4096
MAX_CALLBACK_DATA_BYTES = 64


class Refusal(Exception):
    """An error answer from a method handler: HTTP `status` with a Bot API error body."""

    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def bad_request(description: str) -> Refusal:
    return Refusal(400, f"Bad Request: {description}")


# --- parameter parsing ------------------------------------------------------------------


def json_param(value: Any) -> Any:
    """Telegram accepts JSON-serialized objects as strings (form-encoded and query parameters)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def param_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise bad_request(f"invalid {name}")
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        raise bad_request(f"invalid {name}") from None


def param_chat_id(params: dict[str, Any]) -> int:
    if "chat_id" not in params:
        raise bad_request("chat_id is empty")
    try:
        return param_int(params["chat_id"], "chat_id")
    except Refusal:
        raise bad_request("chat not found") from None


def param_text(params: dict[str, Any]) -> str:
    text = params.get("text")
    if not isinstance(text, str) or not text.strip():
        raise bad_request("message text is empty")
    if len(text) > MAX_TEXT_CHARS:
        raise bad_request("message is too long")
    return text


def param_reply_markup(value: Any) -> dict[str, Any] | None:
    """Validate a reply_markup the way Telegram does for the parts the channel uses."""
    markup = json_param(value)
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise bad_request("can't parse reply keyboard markup JSON object")
    if "inline_keyboard" in markup:
        rows = markup["inline_keyboard"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise bad_request('can\'t parse inline keyboard markup: field "inline_keyboard" must be an Array')
        for button in itertools.chain.from_iterable(rows):
            if not isinstance(button, dict) or not isinstance(button.get("text"), str) or not button["text"]:
                raise bad_request(
                    "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
                )
            if "callback_data" in button:
                data = button["callback_data"]
                if not isinstance(data, str) or not 1 <= len(data.encode("utf-8")) <= MAX_CALLBACK_DATA_BYTES:
                    raise bad_request("BUTTON_DATA_INVALID")
            elif "url" not in button:
                raise bad_request(
                    "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
                )
        return markup
    if "force_reply" in markup:
        if markup["force_reply"] is not True:
            raise bad_request("can't parse reply keyboard markup JSON object")
        return markup
    if "keyboard" in markup or "remove_keyboard" in markup:
        return markup
    raise bad_request("can't parse reply keyboard markup JSON object")


def error_body(code: int, description: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return body


def person(user_id: int) -> dict[str, Any]:
    return {"id": user_id, "is_bot": False, "first_name": f"User{user_id}", "username": f"user{user_id}",
            "language_code": "en"}


def chat_of(chat_id: int) -> dict[str, Any]:
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": f"User{chat_id}"}
    kind = "supergroup" if str(chat_id).startswith("-100") else "group"
    return {"id": chat_id, "type": kind, "title": f"Chat {chat_id}"}


# --- HTTP plumbing ------------------------------------------------------------------------


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: Any  # the FakeBotApi this server serves (set by its start; its _handle applies each call)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Dropped and timed-out connections are part of the tests: no tracebacks on stderr."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests read `FakeBotApi.calls` instead."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        fake = self.server.fake
        url = urllib.parse.urlsplit(self.path)
        try:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        except ValueError:
            self._answer(400, error_body(400, "Bad Request: invalid Content-Length"))
            return
        token, method = split_path(url.path)
        if token is None or method is None:
            self._answer(404, error_body(404, "Not Found"))
            return
        if token != fake.token:
            self._answer(401, error_body(401, "Unauthorized"))
            return
        try:
            params = parse_params(url.query, self.headers.get("Content-Type", ""), body)
        except Refusal as refusal:
            self._answer(refusal.status, error_body(refusal.status, refusal.description))
            return
        kind, status, answer = fake._handle(method, params)
        if kind == "drop":
            self.close_connection = True
            return
        if kind == "page":
            self._answer_page(status, answer["page"].replace("{path}", self.path))
            return
        self._answer(status, answer)

    def _answer_page(self, status: int, page: str) -> None:
        data = page.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def split_path(path: str) -> tuple[str | None, str | None]:
    """``/bot<token>/<method>`` (with any prefix before it) -> (token, method)."""
    segments = path.split("/")
    if len(segments) < 3:
        return None, None
    token_part, method = urllib.parse.unquote(segments[-2]), urllib.parse.unquote(segments[-1])
    if not token_part.startswith("bot") or not method:
        return None, None
    return token_part[3:], method


def parse_params(query: str, content_type: str, body: bytes) -> dict[str, Any]:
    params: dict[str, Any] = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    media_type = content_type.split(";")[0].strip().lower()
    if not body:
        return params
    if media_type == "application/json":
        try:
            decoded = json.loads(body.decode("utf-8"))
        except ValueError:
            raise bad_request("can't parse JSON body") from None
        if not isinstance(decoded, dict):
            raise bad_request("the JSON body must be an object")
        params.update(decoded)
    elif media_type == "application/x-www-form-urlencoded":
        params.update(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    else:
        raise bad_request(f"unsupported Content-Type {media_type!r}")
    return params
