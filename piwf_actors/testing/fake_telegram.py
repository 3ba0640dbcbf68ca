"""A loopback fake of the Telegram Bot API, for tests and the demo.

It ships in the package on purpose (``make demo`` runs without a real bot),
and it only ever binds 127.0.0.1. It speaks the subset of the Bot API the
decision channel uses (sendMessage, editMessageText, answerCallbackQuery,
getUpdates, getMe), enforces the limits that bite in production (text
1-4096 characters, callback_data 1-64 bytes, one getUpdates poller at a
time), simulates people (`tap`, `tap_inline`, `reply`), injects failures
(`fail_next`, `pause_before_response`, `hold_polls_from`) and plays Telegram's rarer moves: a
restart of its update ids (`reset_update_ids`) and a group that became a
supergroup (`migrate_chat`). `fake_telegram_console.py` serves it as a program
(``python -m piwf_actors.testing.fake_telegram_console``), whose commands reach it
through `command` (the ``fakeCommand`` method, under the bot token).

Threads: `start` runs a `ThreadingHTTPServer` in one daemon thread, which
handles each request in its own thread; every piece of state sits behind
one condition lock, so the test thread may call any method at any time.
`stop` shuts the server down, wakes every waiting request and joins the
server thread.
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any

from piwf_actors.testing.fake_telegram_wire import (
    Handler,
    Refusal,
    Server,
    bad_request,
    chat_of,
    error_body,
    json_param,
    param_chat_id,
    param_int,
    param_reply_markup,
    param_text,
    person,
)

FAILURE_KINDS = ("error", "retry_after", "drop", "hang", "conflict", "page")
FUTURE_OFFSETS = ("drop", "head")
FIRST_UPDATE_ID = 1000
_CONFLICT = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
_QUERY_INVALID = "Bad Request: query is too old and response timeout expired or query ID is invalid"


class FakeBotApi:
    """An in-process Bot API server on 127.0.0.1 (port 0: any free port). Also a context manager."""

    def __init__(self, token: str = "123456:TEST-TOKEN", *, port: int = 0) -> None:
        self.token = token
        self.bot_id = int(token.partition(":")[0]) if token.partition(":")[0].isdigit() else 1
        self._port = port
        self._state = threading.Condition()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._calls: list[dict[str, Any]] = []
        # chat_id -> message_id -> {"message": wire Message, "markup": as sent, "edited": n, "from_bot": bool}
        self._chats: dict[int, dict[int, dict[str, Any]]] = {}
        self._last_message_id: dict[int, int] = {}
        self._updates: list[dict[str, Any]] = []
        self._update_ids = itertools.count(FIRST_UPDATE_ID)
        self._last_update_id = FIRST_UPDATE_ID - 1
        self._future_offset = "drop"
        self._moved: dict[int, int] = {}
        self._query_ids = itertools.count(4_000_000_000_000_000_001)
        self._open_queries: set[str] = set()
        self._answered: list[dict[str, Any]] = []
        self._allowed_updates: list[str] | None = None
        self._pollers = 0
        self._failures: dict[str, deque[tuple[str, dict[str, Any]]]] = {}
        self._holds: dict[str, threading.Event] = {}
        self._reached: dict[str, threading.Event] = {}
        # getUpdates calls from this offset on wait (before confirming anything) until release_polls
        self._poll_hold: tuple[int, threading.Event, threading.Event] | None = None
        # update_id -> the callback query id (a tap) or the person's message id (a reply) it carries
        self._made: dict[int, str | int] = {}
        #: Set by the console (`fake_telegram_console.py`): runs a typed command sent as the "fakeCommand"
        #: method by `python -m piwf_actors.testing.fake_telegram_console tap …` from another shell.
        self.command: Callable[[list[str]], str] | None = None

    # --- lifecycle ------------------------------------------------------------

    def start(self) -> FakeBotApi:
        """Bind 127.0.0.1 and serve in a daemon thread. Returns self."""
        if self._server is not None:
            raise RuntimeError("FakeBotApi already started")
        self._stopping.clear()
        server = Server(("127.0.0.1", self._port), Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-telegram", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Wake every waiting request (long polls, hangs, holds), shut the server down and join its thread."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        with self._state:
            self._state.notify_all()
            for gate in self._holds.values():
                gate.set()
            if self._poll_hold is not None:
                self._poll_hold[2].set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeBotApi:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeBotApi not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The base URL to give `BotApi`."""
        return f"http://127.0.0.1:{self.port}"

    # --- what the bot did -------------------------------------------------------

    @property
    def calls(self) -> list[dict[str, Any]]:
        """A snapshot of every request that reached the fake: {"method", "params", "at", "injected"}."""
        with self._state:
            return copy.deepcopy(self._calls)

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        """The params of every call of `method` (including calls answered by an injected failure)."""
        with self._state:
            return [copy.deepcopy(call["params"]) for call in self._calls if call["method"] == method]

    def messages(self, chat_id: int) -> list[dict[str, Any]]:
        """The bot's messages in a chat as they are now, oldest first.

        Each is the Message plus ``reply_markup`` (as last sent; None when the
        message has no markup) and ``edited`` (how many times it was edited).
        """
        with self._state:
            result = []
            for record in self._chats.get(chat_id, {}).values():
                if record["from_bot"]:
                    message = copy.deepcopy(record["message"])
                    message["reply_markup"] = copy.deepcopy(record["markup"])
                    message["edited"] = record["edited"]
                    result.append(message)
            return result

    def answered_callbacks(self) -> list[dict[str, Any]]:
        """The params of every accepted answerCallbackQuery."""
        with self._state:
            return copy.deepcopy(self._answered)

    def made_by(self, update_id: int) -> str | int | None:
        """What a `tap` or `reply` put in its update: the callback query id, or the person's message id."""
        with self._state:
            return self._made.get(update_id)

    def pending_updates(self) -> list[dict[str, Any]]:
        """Updates queued and not yet confirmed by a getUpdates offset."""
        with self._state:
            return copy.deepcopy(self._updates)

    # --- simulated people ---------------------------------------------------------

    def tap(self, *, chat_id: int, user_id: int, message_id: int, data: str) -> int:
        """Queue a callback_query update for a button tap on a bot message; returns its update_id."""
        with self._state:
            record = self._chats.get(chat_id, {}).get(message_id)
            if record is None or not record["from_bot"]:
                raise ValueError(f"no bot message {message_id} in chat {chat_id}")
            query_id = str(next(self._query_ids))
            self._open_queries.add(query_id)
            query = {
                "id": query_id,
                "from": person(user_id),
                "message": copy.deepcopy(record["message"]),
                "chat_instance": str(-abs(chat_id) * 7919 - 1),
                "data": data,
            }
            update_id = self._queue_update("callback_query", query)
            self._made[update_id] = query_id
            return update_id

    def tap_inline(self, *, user_id: int, data: str, inline_message_id: str = "AAAAAQ-inline") -> int:
        """Queue a callback_query from a button of an inline-mode message (no `message` in it);
        returns its update_id. answerCallbackQuery accepts its id like any other."""
        with self._state:
            query_id = str(next(self._query_ids))
            self._open_queries.add(query_id)
            query = {"id": query_id, "from": person(user_id), "inline_message_id": inline_message_id,
                     "chat_instance": "-7919", "data": data}
            return self._queue_update("callback_query", query)

    def reset_update_ids(self, next_id: int, *, future_offset: str = "drop") -> None:
        """Start update ids again at `next_id`, as Telegram does after a week without updates or a
        local Bot API server after a restart. `future_offset` is what a getUpdates with an offset
        beyond every id given out does from then on: "drop" confirms (forgets) every update below
        it, like an ordinary offset; "head" answers from the head of the queue instead, as Telegram's
        server does. Unlike that server, which restarts its ids only once its queue is empty, updates
        not yet confirmed stay queued, ahead of the new ones: the harder case for a poller."""
        if future_offset not in FUTURE_OFFSETS:
            raise ValueError(f"future_offset must be one of {FUTURE_OFFSETS}")
        with self._state:
            self._update_ids = itertools.count(next_id)
            self._last_update_id = next_id - 1
            self._future_offset = future_offset

    def migrate_chat(self, chat_id: int, new_chat_id: int) -> None:
        """The group `chat_id` became the supergroup `new_chat_id`: from now on a message sent to the
        old id is refused with 400 and `parameters.migrate_to_chat_id`, as Telegram does."""
        with self._state:
            self._moved[chat_id] = new_chat_id

    def reply(self, *, chat_id: int, user_id: int, text: str, reply_to_message_id: int | None = None) -> int:
        """Queue a "message" update from a person (a reply to a bot message if given); returns its update_id."""
        with self._state:
            message: dict[str, Any] = {
                "message_id": self._next_message_id(chat_id),
                "from": person(user_id),
                "chat": chat_of(chat_id),
                "date": int(time.time()),
                "text": text,
            }
            if reply_to_message_id is not None:
                replied = self._chats.get(chat_id, {}).get(reply_to_message_id)
                if replied is None or not replied["from_bot"]:
                    raise ValueError(f"no bot message {reply_to_message_id} in chat {chat_id}")
                message["reply_to_message"] = copy.deepcopy(replied["message"])
            self._store(chat_id, message, markup=None, from_bot=False)
            update_id = self._queue_update("message", copy.deepcopy(message))
            self._made[update_id] = message["message_id"]
            return update_id

    # --- failure injection ----------------------------------------------------------

    def fail_next(self, method: str, kind: str, **options: Any) -> None:
        """Make the next call of `method` fail as `kind` (queued per method, first in first out).

        error: HTTP ``options.get("status", 400)`` with ``options.get("description", "Bad Request")``,
            no effect.
        retry_after: HTTP 429 with ``parameters.retry_after = options["seconds"]``, no effect.
        drop: record and apply the call, then close the connection without answering.
        hang: apply the call, then answer only after ``options.get("seconds", 30)`` or at `stop`.
        conflict: HTTP 409 as when another getUpdates poller runs, no effect.
        page: apply the call, then answer HTTP ``options.get("status", 502)`` with a non-JSON page,
            ``options.get("body")`` with ``{path}`` replaced by the request path (which holds the
            token, as a proxy's error page may quote it).
        """
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}; expected one of {FAILURE_KINDS}")
        if kind == "retry_after" and "seconds" not in options:
            raise ValueError('kind "retry_after" needs seconds=')
        with self._state:
            self._failures.setdefault(method, deque()).append((kind, dict(options)))

    def pause_before_response(self, method: str) -> None:
        """From now on, calls of `method` are applied and recorded, then wait for `release` before answering."""
        with self._state:
            if method not in self._holds:
                self._holds[method] = threading.Event()

    def release(self, method: str) -> None:
        """Let every held call of `method` answer and stop holding new ones."""
        with self._state:
            gate = self._holds.pop(method, None)
        if gate is not None:
            gate.set()

    def hold_polls_from(self, offset: int) -> threading.Event:
        """From now on, a getUpdates call whose offset is `offset` or more waits, before it confirms
        or answers anything, until `release_polls`: the service has not heard of that offset yet.
        Returns an Event set once such a call waits."""
        with self._state:
            if self._poll_hold is not None:
                raise RuntimeError("getUpdates calls are held already")
            self._poll_hold = (offset, threading.Event(), threading.Event())
            return self._poll_hold[1]

    def release_polls(self) -> None:
        """Let the held getUpdates calls go on, and hold no more."""
        with self._state:
            hold, self._poll_hold = self._poll_hold, None
        if hold is not None:
            hold[2].set()

    def reached(self, method: str) -> threading.Event:
        """An Event set whenever a call of `method` reaches the fake (clear it to wait for the next one)."""
        with self._state:
            return self._reached.setdefault(method, threading.Event())

    # --- request handling (server threads) --------------------------------------------

    def _handle(self, method: str, params: dict[str, Any]) -> tuple[str | None, int, dict[str, Any]]:
        """Record and apply one authorized call. Returns (injected kind, HTTP status, answer body)."""
        with self._state:
            failures = self._failures.get(method)
            kind, options = failures.popleft() if failures else (None, {})
            self._calls.append({"method": method, "params": copy.deepcopy(params), "at": time.time(), "injected": kind})
            gate = self._holds.get(method)
            reached = self._reached.setdefault(method, threading.Event())
        reached.set()
        if kind == "error":
            status = int(options.get("status", 400))
            return kind, status, error_body(status, str(options.get("description", "Bad Request")))
        if kind == "retry_after":
            seconds = options["seconds"]
            body = error_body(429, f"Too Many Requests: retry after {seconds}", {"retry_after": seconds})
            return kind, 429, body
        if kind == "conflict":
            return kind, 409, error_body(409, _CONFLICT)
        try:
            status, body = 200, {"ok": True, "result": self._apply(method, params)}
        except Refusal as refusal:
            status, body = refusal.status, error_body(refusal.status, refusal.description, refusal.parameters)
        if kind == "page":
            return kind, int(options.get("status", 502)), {"page": str(options.get("body", "<html>{path}</html>"))}
        if kind == "hang":
            self._stopping.wait(float(options.get("seconds", 30)))
        if gate is not None:
            # `stop` sets every gate; the timeout only guards against a gate created after that.
            while not gate.wait(0.1) and not self._stopping.is_set():
                pass
        return kind, status, body

    def _apply(self, method: str, params: dict[str, Any]) -> Any:
        if method == "fakeCommand" and self.command is not None:
            words = params.get("words")
            if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
                raise bad_request("words must be a list of strings")
            try:
                return {"text": self.command(words)}
            except ValueError as exc:
                raise bad_request(str(exc)) from None
        handler = _METHODS.get(method.lower())
        if handler is None:
            raise Refusal(404, "Not Found")
        return handler(self, params)

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = param_chat_id(params)
        with self._state:
            moved_to = self._moved.get(chat_id)
        if moved_to is not None:
            raise Refusal(400, "Bad Request: group chat was upgraded to a supergroup chat",
                           {"migrate_to_chat_id": moved_to})
        text = param_text(params)
        markup = param_reply_markup(params.get("reply_markup"))
        reply_to = params.get("reply_to_message_id")
        allow_without = bool(params.get("allow_sending_without_reply", False))
        reply_parameters = json_param(params.get("reply_parameters"))
        if isinstance(reply_parameters, dict):
            reply_to = reply_parameters.get("message_id")
            allow_without = bool(reply_parameters.get("allow_sending_without_reply", False))
        with self._state:
            replied = None
            if reply_to is not None:
                replied = self._chats.get(chat_id, {}).get(param_int(reply_to, "message_id"))
                if replied is None and not allow_without:
                    raise bad_request("message to be replied not found")
            message: dict[str, Any] = {
                "message_id": self._next_message_id(chat_id),
                "from": {"id": self.bot_id, "is_bot": True, "first_name": "Fake Bot", "username": "fake_bot"},
                "chat": chat_of(chat_id),
                "date": int(time.time()),
                "text": text,
            }
            if replied is not None:
                message["reply_to_message"] = copy.deepcopy(replied["message"])
            if markup is not None and "inline_keyboard" in markup:
                # A Message carries only inline keyboards; force_reply and the like are not echoed.
                message["reply_markup"] = copy.deepcopy(markup)
            self._store(chat_id, message, markup=markup, from_bot=True)
            return copy.deepcopy(message)

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        if "inline_message_id" in params:
            raise bad_request("inline messages are not supported by the fake")
        chat_id = param_chat_id(params)
        message_id = param_int(params.get("message_id"), "message_id")
        text = param_text(params)
        markup = param_reply_markup(params.get("reply_markup"))
        if markup is not None and "inline_keyboard" not in markup:
            raise bad_request("can't parse inline keyboard markup: an inline keyboard is expected")
        with self._state:
            record = self._chats.get(chat_id, {}).get(message_id)
            if record is None or not record["from_bot"]:
                raise bad_request("message to edit not found")
            message = record["message"]
            if message["text"] == text and message.get("reply_markup") == markup:
                raise bad_request(
                    "message is not modified: specified new message content and reply markup are exactly "
                    "the same as a current content and reply markup of the message"
                )
            message["text"] = text
            message["edit_date"] = int(time.time())
            if markup is None:
                message.pop("reply_markup", None)
            else:
                message["reply_markup"] = copy.deepcopy(markup)
            record["markup"] = copy.deepcopy(markup)
            record["edited"] += 1
            return copy.deepcopy(message)

    def _answer_callback_query(self, params: dict[str, Any]) -> bool:
        query_id = params.get("callback_query_id")
        with self._state:
            if not isinstance(query_id, str) or query_id not in self._open_queries:
                raise Refusal(400, _QUERY_INVALID)
            self._open_queries.discard(query_id)
            self._answered.append(copy.deepcopy(params))
        return True

    def _get_me(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Fake Bot", "username": "fake_bot"}

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = param_int(params.get("offset", 0), "offset")
        limit = min(max(param_int(params.get("limit", 100), "limit"), 1), 100)
        timeout = max(param_int(params.get("timeout", 0), "timeout"), 0)
        allowed = json_param(params.get("allowed_updates"))
        with self._state:
            hold = self._poll_hold
        if hold is not None and offset >= hold[0]:
            hold[1].set()
            while not hold[2].wait(0.1) and not self._stopping.is_set():
                pass
        deadline = time.monotonic() + timeout
        with self._state:
            if self._pollers:
                raise Refusal(409, _CONFLICT)
            self._pollers += 1
            try:
                if isinstance(allowed, list):
                    # Like Telegram, the setting persists for later calls that omit it.
                    self._allowed_updates = [str(kind) for kind in allowed] or None
                if self._future_offset == "head" and offset > self._last_update_id + 1:
                    offset = 0  # a future offset: answered from the head of the queue, nothing confirmed
                self._confirm(offset)
                while True:
                    found = [update for update in self._updates if self._is_allowed(update)][:limit]
                    remaining = deadline - time.monotonic()
                    if found or remaining <= 0 or self._stopping.is_set():
                        return copy.deepcopy(found)
                    self._state.wait(remaining)
            finally:
                self._pollers -= 1

    # --- state helpers (callers hold self._state) ---------------------------------------

    def _confirm(self, offset: int) -> None:
        if offset < 0:
            # A negative offset keeps only the last -offset updates and forgets the rest.
            self._updates = self._updates[offset:]
        elif offset > 0:
            self._updates = [update for update in self._updates if update["update_id"] >= offset]

    def _is_allowed(self, update: dict[str, Any]) -> bool:
        if self._allowed_updates is None:
            return True
        return any(kind in update for kind in self._allowed_updates)

    def _queue_update(self, kind: str, payload: dict[str, Any]) -> int:
        update_id = next(self._update_ids)
        self._last_update_id = update_id
        self._updates.append({"update_id": update_id, kind: payload})
        self._state.notify_all()
        return update_id

    def _next_message_id(self, chat_id: int) -> int:
        # Bot and person messages share one increasing sequence per chat, as in Telegram.
        self._last_message_id[chat_id] = self._last_message_id.get(chat_id, 0) + 1
        return self._last_message_id[chat_id]

    def _store(self, chat_id: int, message: dict[str, Any], *, markup: dict[str, Any] | None, from_bot: bool) -> None:
        self._chats.setdefault(chat_id, {})[message["message_id"]] = {
            "message": message,
            "markup": copy.deepcopy(markup),
            "edited": 0,
            "from_bot": from_bot,
        }


_METHODS = {
    "sendmessage": FakeBotApi._send_message,
    "editmessagetext": FakeBotApi._edit_message_text,
    "answercallbackquery": FakeBotApi._answer_callback_query,
    "getupdates": FakeBotApi._get_updates,
    "getme": FakeBotApi._get_me,
}

