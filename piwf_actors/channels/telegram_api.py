"""A small, blocking client for the Telegram Bot API (standard library only).

`BotApi.call` POSTs one JSON request to ``{base_url}/bot{token}/{method}``
over a fresh `http.client` connection and returns the ``result`` of
``{"ok": true, "result": ...}``. Each call is independent (no shared
connection, no shared mutable state), so one `BotApi` may be used from a
poller thread and a sender thread at the same time.

Error classification, and why it matters
-----------------------------------------
The decision channel delivers at most once: before a send it records the
send as ``applying``; afterwards it settles it from what this module says:

* a returned result -> ``applied``;
* `NotSent` -> ``failed``: the request surely did not take effect. Only two
  things prove that: no connection could be made (nothing was written), or
  Telegram refused the request with a Bot API error answer (``{"ok":
  false}``) whose ``error_code`` (lacking one, the HTTP status) is below
  500. Safe to retry; a 429 carries `NotSent.retry_after`, a group that
  became a supergroup `NotSent.migrate_to_chat_id`;
* `OutcomeUnknown` -> ``ambiguous``: everything else once the request
  bytes started going out: a send error, read timeout, reset or EOF; an
  answer larger than `MAX_ANSWER_BYTES` (never parsed) or shorter than its
  Content-Length; an answer that is not a Bot API answer (not a JSON object
  with a boolean ``"ok"``) whatever its HTTP status, since a proxy's 500,
  503, 404 or 401 page may come after it forwarded the request; a Bot API
  error answer with an ``error_code`` >= 500 (Telegram's own frontend
  failed after receiving the request); ``{"ok": true}`` with an HTTP status
  >= 400, or without a result. The message may or may not have reached the
  chat; it is never re-sent automatically, because a re-send could show a
  person the same question twice and their tap could be applied to the
  wrong copy.

The boundary is `HTTPConnection.connect()`: it is called explicitly, so an
`OSError` there (refused, unreachable, DNS failure, connect timeout, TLS
handshake) is known to have sent nothing.

Answers are read up to `MAX_ANSWER_BYTES`: far above the largest possible
getUpdates batch (100 updates of 4096-character messages replying to as
long ones stay below 8 MiB), because a batch too large to read would come
back on every poll and stop the poller for good.

Token secrecy
-------------
The bot token is a password. It appears only in the request path. Every
exception message and log line built here passes through `BotApi.redact`
(the raw and percent-encoded token and its secret part) before any text is
cut to length, since a cut through the token leaves a piece no redaction
finds; exceptions are raised ``from None`` so no chained exception text is
shown with them, and ``repr(BotApi)`` omits the token.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import threading
import urllib.parse
from typing import Any, TypeGuard

from piwf_actors.errors import PiwfError

log = logging.getLogger(__name__)

#: Added to a long poll's server-side timeout to get the HTTP read timeout.
LONG_POLL_MARGIN_S = 10.0

#: The largest answer body read; a larger one is an unknown outcome, never parsed.
MAX_ANSWER_BYTES = 16 * 1024 * 1024

_METHOD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_MAX_DETAIL_CHARS = 300
_SNIPPET_CHARS = 200  # of an answer that is not a Bot API answer


class TelegramError(PiwfError):
    """Root of the Telegram client's errors. Its message never contains the bot token."""

    code = "telegram_error"

    def __init__(self, method: str, detail: str) -> None:
        super().__init__(f"telegram {method}: {detail}")
        self.method = method


class NotSent(TelegramError):
    """The request surely did not take effect; safe to retry (after `retry_after` seconds if set).

    Either no connection could be made (nothing was sent; `error_code` is
    None) or Telegram answered with an error: `error_code` is Telegram's
    ``error_code`` (or the HTTP status), `description` its description,
    `retry_after` the ``parameters.retry_after`` of a 429, and
    `migrate_to_chat_id` the new id of a group that became a supergroup.
    """

    code = "telegram_not_sent"

    def __init__(
        self,
        method: str,
        description: str,
        *,
        error_code: int | None = None,
        retry_after: float | None = None,
        migrate_to_chat_id: int | None = None,
    ) -> None:
        prefix = f"error {error_code}: " if error_code is not None else ""
        super().__init__(method, f"not sent: {prefix}{description}")
        self.error_code = error_code
        self.description = description
        self.retry_after = retry_after
        self.migrate_to_chat_id = migrate_to_chat_id


class OutcomeUnknown(TelegramError):
    """The request may have reached Telegram but no valid answer came back. Never retry automatically."""

    code = "telegram_outcome_unknown"

    def __init__(self, method: str, detail: str) -> None:
        super().__init__(method, f"outcome unknown: {detail}")
        self.detail = detail


class BotApi:
    """One bot's Bot API endpoint. Thread-safe: every call opens its own connection.

    `timeout_s` bounds connecting and, for ordinary calls, waiting for the
    answer; `get_updates` waits ``timeout_s + LONG_POLL_MARGIN_S`` for its
    answer. Invalid arguments that are programming errors (empty token, a
    base URL that is not http(s), a malformed method name) raise ValueError
    without naming the token.
    """

    def __init__(self, token: str, base_url: str = "https://api.telegram.org", *, timeout_s: float = 10.0) -> None:
        if not isinstance(token, str) or not token or token != token.strip():
            raise ValueError("the bot token must be a non-empty string without surrounding whitespace")
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the Bot API base URL must be http(s)://host[:port][/prefix], got {base_url!r}")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("the Bot API base URL must not carry a query, fragment or credentials")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._token = token
        self._quoted_token = urllib.parse.quote(token, safe=":")
        # The part after the colon is the secret; redact it alone too, in case something splits the token
        # (or encodes its colon). Longest first, so a form is replaced before any form inside it.
        secret = token.partition(":")[2]
        forms = {token, self._quoted_token, urllib.parse.quote(token, safe="")}
        if len(secret) >= 8:
            forms |= {secret, urllib.parse.quote(secret, safe="")}
        self._secrets = sorted(forms, key=len, reverse=True)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path_prefix = parts.path.rstrip("/")
        self._base_url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, self._path_prefix, "", ""))
        self._timeout_s = float(timeout_s)
        self._active: set[http.client.HTTPConnection] = set()  # calls in flight, for abort()
        self._active_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BotApi(base_url={self._base_url!r}, token=<token>, timeout_s={self._timeout_s})"

    def redact(self, text: str) -> str:
        """`text` with every occurrence of the bot token (raw or percent-encoded) replaced by ``<token>``.

        Redact before cutting a text to length, never after."""
        for secret in self._secrets:
            text = text.replace(secret, "<token>")
        return text

    # --- the one request path ---------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        """Call `method` with `params` as a JSON body and return its ``result``.

        `timeout_s` (default: the constructor's) bounds the wait for the
        answer once the request is sent. Raises `NotSent` or `OutcomeUnknown`.
        """
        if not _METHOD_NAME.fullmatch(method):
            raise ValueError(f"not a Bot API method name: {method!r}")
        read_timeout = self._timeout_s if timeout_s is None else float(timeout_s)
        if read_timeout <= 0:
            raise ValueError("timeout_s must be positive")
        try:
            body = json.dumps(params or {}, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise NotSent(method, self._detail("parameters are not valid JSON", exc)) from None

        connection = self._connection(min(self._timeout_s, read_timeout))
        with self._active_lock:
            self._active.add(connection)
        try:
            try:
                connection.connect()
            except OSError as exc:
                log.debug("telegram %s: cannot connect to %s: %s", method, self._base_url, self.redact(str(exc)))
                raise NotSent(method, self._detail(f"cannot connect to {self._base_url}", exc)) from None
            if connection.sock is not None:
                connection.sock.settimeout(read_timeout)
            # From here on, bytes may have reached Telegram: every failure is an unknown outcome.
            try:
                connection.request(
                    "POST",
                    f"{self._path_prefix}/bot{self._quoted_token}/{method}",
                    body=body,
                    headers={"Content-Type": "application/json", "Connection": "close"},
                )
                response = connection.getresponse()
                try:
                    status = response.status
                    raw = _read_answer(response)
                finally:
                    # The response owns the socket now (Connection: close): an answer not read to its
                    # end must not hold it open, and the server writing it, until the garbage collector.
                    response.close()
            except (OSError, http.client.HTTPException) as exc:
                log.debug("telegram %s: no answer: %s", method, self.redact(f"{type(exc).__name__}: {exc}"))
                raise OutcomeUnknown(method, self._detail("no valid answer", exc)) from None
        finally:
            with self._active_lock:
                self._active.discard(connection)
            connection.close()
        if raw is None:
            log.debug("telegram %s: HTTP %s with an answer larger than %s bytes", method, status, MAX_ANSWER_BYTES)
            raise OutcomeUnknown(method, f"HTTP {status}: answer larger than {MAX_ANSWER_BYTES} bytes")
        return self._settle(method, status, raw)

    def abort(self) -> None:
        """Cut every call in flight (their callers get OutcomeUnknown or NotSent at once): a
        long poll must not hold up a host that is stopping. Safe from any thread."""
        with self._active_lock:
            connections = list(self._active)
        for connection in connections:
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _settle(self, method: str, status: int, raw: bytes) -> Any:
        """Classify one complete HTTP answer (see the module docstring): the result, `NotSent` or `OutcomeUnknown`."""
        payload = _bot_api_answer(raw)
        if payload is None:
            # Not Telegram's answer: whoever sent it (a proxy, a gateway) may have forwarded the request.
            # The whole body is redacted before the cut; redacting a window would not do, as redacting
            # shortens the text and can pull a cut piece of a later token into it.
            snippet = self.redact(raw.decode("utf-8", "replace"))[:_SNIPPET_CHARS]
            log.debug("telegram %s: HTTP %s without a Bot API answer", method, status)
            raise OutcomeUnknown(method, f"HTTP {status} without a Bot API answer: {snippet!r}")
        if payload["ok"] is True:
            if status >= 400:
                log.debug("telegram %s: HTTP %s with an ok answer", method, status)
                raise OutcomeUnknown(method, f"HTTP {status} with an ok answer")
            if "result" not in payload:
                raise OutcomeUnknown(method, f"HTTP {status}: ok without a result")
            log.debug("telegram %s: ok", method)
            return payload["result"]
        error_code = payload.get("error_code")
        if not isinstance(error_code, int) or isinstance(error_code, bool):
            error_code = status
        description = payload.get("description")
        description = (
            self.redact(str(description))[:_MAX_DETAIL_CHARS] if description is not None else "(no description)"
        )
        if error_code >= 500:
            # Telegram's frontend failed after it received the request: it may have been carried out.
            log.debug("telegram %s: failed inside Telegram: %s %s", method, error_code, description)
            raise OutcomeUnknown(method, f"HTTP {status}: error {error_code}: {description}")
        parameters = payload.get("parameters")
        parameters = parameters if isinstance(parameters, dict) else {}
        retry_after = parameters.get("retry_after")
        retry_after = float(retry_after) if _is_number(retry_after) else None
        migrate_to = parameters.get("migrate_to_chat_id")
        migrate_to = migrate_to if isinstance(migrate_to, int) and not isinstance(migrate_to, bool) else None
        log.debug("telegram %s: refused: %s %s", method, error_code, description)
        raise NotSent(
            method, description, error_code=error_code, retry_after=retry_after, migrate_to_chat_id=migrate_to
        )

    def _connection(self, connect_timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=connect_timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=connect_timeout)

    def _detail(self, what: str, exc: BaseException) -> str:
        text = self.redact(f"{what}: {type(exc).__name__}: {exc}")
        return text[:_MAX_DETAIL_CHARS]

    # --- typed helpers --------------------------------------------------------

    def get_updates(
        self,
        offset: int,
        *,
        timeout_s: int,
        allowed_updates: tuple[str, ...] = ("message", "callback_query"),
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Long-poll for updates with ``update_id >= offset`` (which also confirms every earlier one).

        Waits up to `timeout_s` seconds on Telegram's side, and up to
        ``timeout_s + LONG_POLL_MARGIN_S`` for the answer. An
        `OutcomeUnknown` here is harmless: unconfirmed updates come again.
        """
        params = {"offset": offset, "timeout": timeout_s, "allowed_updates": list(allowed_updates), "limit": limit}
        result = self.call("getUpdates", params, timeout_s=timeout_s + LONG_POLL_MARGIN_S)
        if not isinstance(result, list) or not all(isinstance(update, dict) for update in result):
            raise OutcomeUnknown("getUpdates", "the result is not a list of updates")
        return result

    def send_message(
        self,
        chat_id: int,
        text: str,
        *,
        reply_markup: dict[str, Any] | None = None,
        reply_to_message_id: int | None = None,
    ) -> dict[str, Any]:
        """Send `text` and return the sent Message.

        A reply is sent with ``allow_sending_without_reply``: if the message
        replied to was deleted, the text is still delivered.
        """
        params: dict[str, Any] = {"chat_id": chat_id, "text": text}
        if reply_markup is not None:
            params["reply_markup"] = reply_markup
        if reply_to_message_id is not None:
            params["reply_parameters"] = {"message_id": reply_to_message_id, "allow_sending_without_reply": True}
        result = self.call("sendMessage", params)
        if not isinstance(result, dict) or not isinstance(result.get("message_id"), int):
            # Telegram said ok, so the message most likely exists, but we cannot tell which one it is.
            raise OutcomeUnknown("sendMessage", "ok without a Message")
        return result

    def edit_message_text(
        self, chat_id: int, message_id: int, text: str, *, reply_markup: dict[str, Any] | None = None
    ) -> Any:
        """Replace a bot message's text; `reply_markup` None removes its buttons. Returns the edited Message."""
        params: dict[str, Any] = {"chat_id": chat_id, "message_id": message_id, "text": text}
        if reply_markup is not None:
            params["reply_markup"] = reply_markup
        return self.call("editMessageText", params)

    def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> Any:
        """Acknowledge a button tap (without it the person's client keeps spinning)."""
        params: dict[str, Any] = {"callback_query_id": callback_query_id}
        if text is not None:
            params["text"] = text
        return self.call("answerCallbackQuery", params)

    def close(self) -> None:
        """Nothing to release: no connection outlives a call. Kept so callers can treat this like a resource."""


def _read_answer(response: http.client.HTTPResponse) -> bytes | None:
    """The whole answer body, or None if it is larger than `MAX_ANSWER_BYTES` (then it is not read on).

    A body shorter than its Content-Length raises `http.client.IncompleteRead` (``read(amt)`` would
    quietly return the short body, so a known length is read whole).
    """
    if response.length is not None:
        return response.read() if response.length <= MAX_ANSWER_BYTES else None
    raw = response.read(MAX_ANSWER_BYTES + 1)  # chunked (a cut raises IncompleteRead) or until close
    return raw if len(raw) <= MAX_ANSWER_BYTES else None


def _bot_api_answer(raw: bytes) -> dict[str, Any] | None:
    """`raw` as a Bot API answer (a JSON object with a boolean "ok"), or None if it is not one."""
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("ok"), bool):
        return None
    return payload


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
