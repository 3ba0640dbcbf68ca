"""BotApi against a real FakeBotApi on 127.0.0.1: round trips, failure classification, token secrecy."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from piwf_actors.channels import telegram_api
from piwf_actors.channels.telegram_api import BotApi, NotSent, OutcomeUnknown, TelegramError
from piwf_actors.errors import PiwfError
from piwf_actors.testing.fake_telegram import FakeBotApi

TOKEN = "918273:SECRETxyzzyPLUGHtoken_4d1f"
SECRET_PART = "SECRETxyzzyPLUGH"
CHAT = 4242
USER = 777
KEYBOARD = {
    "inline_keyboard": [[{"text": "Approve", "callback_data": "a:1"}, {"text": "Deny", "callback_data": "d:1"}]]
}


@pytest.fixture
def fake() -> Iterator[FakeBotApi]:
    with FakeBotApi(TOKEN) as server:
        yield server


@pytest.fixture
def api(fake: FakeBotApi) -> BotApi:
    return BotApi(TOKEN, fake.url, timeout_s=5)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.01)


class Background:
    """Runs `fn` in a thread and keeps its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:  # handed to the test thread
            self.error = exc
        finally:
            self.done.set()

    def value(self, timeout_s: float = 5.0) -> Any:
        assert self.done.wait(timeout_s), "background call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def free_closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- round trips -------------------------------------------------------------------


def test_send_tap_answer_edit_round_trip(fake: FakeBotApi, api: BotApi) -> None:
    sent = api.send_message(CHAT, "Deploy v2?", reply_markup=KEYBOARD)
    assert sent["text"] == "Deploy v2?"
    assert sent["chat"] == {"id": CHAT, "type": "private", "first_name": f"User{CHAT}"}
    assert sent["from"]["is_bot"] is True
    assert sent["reply_markup"] == KEYBOARD
    [stored] = fake.messages(CHAT)
    assert (stored["message_id"], stored["reply_markup"], stored["edited"]) == (sent["message_id"], KEYBOARD, 0)

    update_id = fake.tap(chat_id=CHAT, user_id=USER, message_id=sent["message_id"], data="a:1")
    [update] = api.get_updates(0, timeout_s=0)
    assert update["update_id"] == update_id
    query = update["callback_query"]
    assert (query["data"], query["from"]["id"], query["message"]["message_id"]) == ("a:1", USER, sent["message_id"])

    assert api.answer_callback_query(query["id"], "Approved") is True
    assert fake.answered_callbacks() == [{"callback_query_id": query["id"], "text": "Approved"}]
    with pytest.raises(NotSent, match="query ID is invalid") as repeat:
        api.answer_callback_query(query["id"])
    assert repeat.value.error_code == 400

    edited = api.edit_message_text(CHAT, sent["message_id"], "Deploy v2? Approved by User777")
    assert "reply_markup" not in edited and "edit_date" in edited
    [stored] = fake.messages(CHAT)
    assert (stored["text"], stored["reply_markup"], stored["edited"]) == ("Deploy v2? Approved by User777", None, 1)

    with pytest.raises(NotSent, match="message is not modified"):
        api.edit_message_text(CHAT, sent["message_id"], "Deploy v2? Approved by User777")
    with pytest.raises(NotSent, match="message to edit not found"):
        api.edit_message_text(CHAT, 999, "nope")
    assert [call["method"] for call in fake.calls] == [
        "sendMessage",
        "getUpdates",
        "answerCallbackQuery",
        "answerCallbackQuery",
        "editMessageText",
        "editMessageText",
        "editMessageText",
    ]


def test_replies_and_force_reply(fake: FakeBotApi, api: BotApi) -> None:
    question = api.send_message(CHAT, "Why?", reply_markup={"force_reply": True})
    assert "reply_markup" not in question  # a Message echoes only inline keyboards
    assert fake.messages(CHAT)[0]["reply_markup"] == {"force_reply": True}

    fake.reply(chat_id=CHAT, user_id=USER, text="because", reply_to_message_id=question["message_id"])
    [update] = api.get_updates(0, timeout_s=0)
    message = update["message"]
    assert message["text"] == "because"
    assert message["message_id"] == question["message_id"] + 1  # one id sequence per chat
    assert message["reply_to_message"]["message_id"] == question["message_id"]

    answer = api.send_message(CHAT, "noted", reply_to_message_id=message["message_id"])
    assert answer["reply_to_message"]["text"] == "because"
    assert fake.calls_of("sendMessage")[-1]["reply_parameters"]["message_id"] == message["message_id"]
    # Sent with allow_sending_without_reply: a reply to a vanished message is still delivered.
    assert "reply_to_message" not in api.send_message(CHAT, "still here", reply_to_message_id=12345)


def test_base_url_with_path_prefix(fake: FakeBotApi) -> None:
    api = BotApi(TOKEN, fake.url + "/tg/", timeout_s=5)
    assert api.send_message(CHAT, "hi")["text"] == "hi"


def test_fake_accepts_form_encoded_and_query_parameters(fake: FakeBotApi) -> None:
    markup = json.dumps(KEYBOARD)
    form = urllib.parse.urlencode({"text": "from a form", "reply_markup": markup})
    connection = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        connection.request(
            "POST",
            f"/bot{TOKEN}/sendMessage?chat_id={CHAT}",
            body=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        answer = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    assert answer["ok"] is True
    assert answer["result"]["reply_markup"] == KEYBOARD
    assert fake.messages(CHAT)[0]["text"] == "from a form"


# --- getUpdates ------------------------------------------------------------------------


def test_offset_confirms_updates(fake: FakeBotApi, api: BotApi) -> None:
    first = fake.reply(chat_id=CHAT, user_id=USER, text="one")
    second = fake.reply(chat_id=CHAT, user_id=USER, text="two")
    assert [u["update_id"] for u in api.get_updates(0, timeout_s=0)] == [first, second]
    # Unconfirmed updates come again.
    assert [u["update_id"] for u in api.get_updates(0, timeout_s=0)] == [first, second]
    assert [u["update_id"] for u in api.get_updates(first + 1, timeout_s=0)] == [second]
    assert api.get_updates(second + 1, timeout_s=0) == []
    assert fake.pending_updates() == []
    assert fake.calls_of("getUpdates")[0]["allowed_updates"] == ["message", "callback_query"]


def test_limit_caps_the_batch(fake: FakeBotApi, api: BotApi) -> None:
    ids = [fake.reply(chat_id=CHAT, user_id=USER, text=str(n)) for n in range(5)]
    assert [u["update_id"] for u in api.get_updates(0, timeout_s=0, limit=2)] == ids[:2]


def test_long_poll_wakes_when_an_update_is_queued(fake: FakeBotApi, api: BotApi) -> None:
    reached = fake.reached("getUpdates")
    poll = Background(lambda: api.get_updates(0, timeout_s=10))
    assert reached.wait(5)
    update_id = fake.reply(chat_id=CHAT, user_id=USER, text="wake up")
    assert [u["update_id"] for u in poll.value(timeout_s=5)] == [update_id]


def test_second_concurrent_poller_gets_conflict(fake: FakeBotApi, api: BotApi) -> None:
    first = Background(lambda: api.get_updates(0, timeout_s=10))
    assert fake.reached("getUpdates").wait(5)
    deadline = time.monotonic() + 5
    conflict: NotSent | None = None
    while conflict is None:
        assert time.monotonic() < deadline, "no 409 while another poller was waiting"
        try:
            api.get_updates(0, timeout_s=0)  # may run before the first poll starts waiting
        except NotSent as exc:
            conflict = exc
    assert conflict.error_code == 409
    assert "terminated by other getUpdates request" in conflict.description
    fake.reply(chat_id=CHAT, user_id=USER, text="release the first poller")
    assert len(first.value()) == 1


def test_poller_and_sender_share_one_client(fake: FakeBotApi, api: BotApi) -> None:
    poll = Background(lambda: api.get_updates(0, timeout_s=10))
    assert fake.reached("getUpdates").wait(5)
    sent = api.send_message(CHAT, "sent while polling", reply_markup=KEYBOARD)
    assert not poll.done.is_set()
    fake.tap(chat_id=CHAT, user_id=USER, message_id=sent["message_id"], data="d:1")
    [update] = poll.value()
    assert update["callback_query"]["message"]["text"] == "sent while polling"


# --- failure classification -------------------------------------------------------------------


def test_injected_error_is_not_sent(fake: FakeBotApi, api: BotApi) -> None:
    fake.fail_next("sendMessage", "error", description="Bad Request: chat not found")
    with pytest.raises(NotSent) as caught:
        api.send_message(CHAT, "hello")
    assert (caught.value.error_code, caught.value.description) == (400, "Bad Request: chat not found")
    assert caught.value.retry_after is None
    assert fake.messages(CHAT) == []
    assert api.send_message(CHAT, "hello")["message_id"] == 1  # only the next call failed


def test_retry_after_is_not_sent_with_the_delay(fake: FakeBotApi, api: BotApi) -> None:
    fake.fail_next("sendMessage", "retry_after", seconds=3)
    with pytest.raises(NotSent) as caught:
        api.send_message(CHAT, "hello")
    assert (caught.value.error_code, caught.value.retry_after) == (429, 3.0)
    assert fake.messages(CHAT) == []


def test_injected_conflict_is_not_sent(fake: FakeBotApi, api: BotApi) -> None:
    fake.fail_next("getUpdates", "conflict")
    with pytest.raises(NotSent) as caught:
        api.get_updates(0, timeout_s=0)
    assert caught.value.error_code == 409


def test_dropped_connection_is_outcome_unknown_although_the_message_was_sent(fake: FakeBotApi, api: BotApi) -> None:
    fake.fail_next("sendMessage", "drop")
    with pytest.raises(OutcomeUnknown):
        api.send_message(CHAT, "did it arrive?")
    assert [m["text"] for m in fake.messages(CHAT)] == ["did it arrive?"]
    assert fake.calls[-1]["injected"] == "drop"


def test_read_timeout_is_outcome_unknown(fake: FakeBotApi) -> None:
    impatient = BotApi(TOKEN, fake.url, timeout_s=0.3)
    fake.fail_next("sendMessage", "hang", seconds=30)
    with pytest.raises(OutcomeUnknown):
        impatient.send_message(CHAT, "slow")
    assert [m["text"] for m in fake.messages(CHAT)] == ["slow"]


def test_connection_refused_is_not_sent() -> None:
    api = BotApi(TOKEN, f"http://127.0.0.1:{free_closed_port()}", timeout_s=2)
    with pytest.raises(NotSent) as caught:
        api.send_message(CHAT, "nobody home")
    assert caught.value.error_code is None
    assert "cannot connect" in str(caught.value)


def test_wrong_token_is_not_sent_401(fake: FakeBotApi) -> None:
    with pytest.raises(NotSent) as caught:
        BotApi("111:WRONGwrongWRONGwrong", fake.url).send_message(CHAT, "hi")
    assert (caught.value.error_code, caught.value.description) == (401, "Unauthorized")
    assert fake.messages(CHAT) == []


def test_held_response_reaches_the_fake_first(fake: FakeBotApi, api: BotApi) -> None:
    fake.pause_before_response("sendMessage")
    sending = Background(lambda: api.send_message(CHAT, "held"))
    assert fake.reached("sendMessage").wait(5)
    assert [m["text"] for m in fake.messages(CHAT)] == ["held"]
    assert not sending.done.is_set()
    fake.release("sendMessage")
    assert sending.value()["text"] == "held"


def test_limits_are_enforced(fake: FakeBotApi, api: BotApi) -> None:
    assert len(api.send_message(CHAT, "x" * 4096)["text"]) == 4096
    with pytest.raises(NotSent, match="message is too long"):
        api.send_message(CHAT, "x" * 4097)
    with pytest.raises(NotSent, match="message text is empty"):
        api.send_message(CHAT, "")
    # callback_data is limited in bytes, not characters: 32 "é" are 64 bytes, 33 are 66.
    api.send_message(CHAT, "ok", reply_markup={"inline_keyboard": [[{"text": "b", "callback_data": "é" * 32}]]})
    for data in ("é" * 33, "x" * 65, ""):
        with pytest.raises(NotSent, match="BUTTON_DATA_INVALID") as caught:
            api.send_message(CHAT, "bad", reply_markup={"inline_keyboard": [[{"text": "b", "callback_data": data}]]})
        assert caught.value.error_code == 400
    assert len(fake.messages(CHAT)) == 2


@pytest.mark.parametrize(
    ("status", "body", "expected", "attributes"),
    [
        (200, b"<html>oops</html>", OutcomeUnknown, {}),
        (200, b'{"ok": true}', OutcomeUnknown, {}),
        (502, b"<html>Bad Gateway</html>", OutcomeUnknown, {}),
        # A proxy's page after forwarding the request: Telegram may have acted on it.
        (500, b"<html>Internal Server Error</html>", OutcomeUnknown, {}),
        (503, b"<html>Service Unavailable</html>", OutcomeUnknown, {}),
        (404, b"<html>Not Found</html>", OutcomeUnknown, {}),
        (401, b"<html>Authorization Required</html>", OutcomeUnknown, {}),
        (400, b'{"description": "JSON, but no ok"}', OutcomeUnknown, {}),
        (400, b'{"ok": "false", "error_code": 400}', OutcomeUnknown, {}),
        (400, b"[false]", OutcomeUnknown, {}),
        # Telegram's own frontend failing after it received the request.
        (500, b'{"ok": false, "error_code": 500, "description": "Internal Server Error"}', OutcomeUnknown, {}),
        (200, b'{"ok": false, "error_code": 502, "description": "Bad Gateway"}', OutcomeUnknown, {}),
        (503, b'{"ok": false, "description": "no error_code: the HTTP status counts"}', OutcomeUnknown, {}),
        (500, b'{"ok": true, "result": 1}', OutcomeUnknown, {}),
        (404, b'{"ok": true, "result": 1}', OutcomeUnknown, {}),
        # Bot API error answers below 500: refused, nothing done.
        (200, b'{"ok": false, "error_code": 400, "description": "Bad Request: nope"}', NotSent, {"error_code": 400}),
        (404, b'{"ok": false, "error_code": 404, "description": "Not Found"}', NotSent, {"error_code": 404}),
        (400, b'{"ok": false, "description": "no error_code"}', NotSent, {"error_code": 400}),
        (
            429,
            b'{"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 7",'
            b' "parameters": {"retry_after": 7}}',
            NotSent,
            {"error_code": 429, "retry_after": 7.0, "migrate_to_chat_id": None},
        ),
        (
            400,
            b'{"ok": false, "error_code": 400, "description": "Bad Request: group chat was upgraded to a supergroup'
            b' chat", "parameters": {"migrate_to_chat_id": -1001234567890}}',
            NotSent,
            {"error_code": 400, "retry_after": None, "migrate_to_chat_id": -1001234567890},
        ),
    ],
)
def test_answers_that_are_not_plain_bot_api_answers(
    status: int, body: bytes, expected: type[TelegramError], attributes: dict[str, Any]
) -> None:
    with _answering(status, body) as url:
        api = BotApi(TOKEN, url, timeout_s=5)
        with pytest.raises(expected) as caught:
            api.call("sendMessage", {"chat_id": CHAT, "text": "x"})
        assert type(caught.value) is expected
        assert {name: getattr(caught.value, name) for name in attributes} == attributes


def test_a_bot_api_server_error_keeps_its_redacted_description() -> None:
    body = json.dumps({"ok": False, "error_code": 500, "description": f"Internal error at /bot{TOKEN}/sendMessage"})
    with _answering(500, body.encode()) as url, pytest.raises(OutcomeUnknown) as caught:
        BotApi(TOKEN, url, timeout_s=5).send_message(CHAT, "x")
    assert "error 500: Internal error at /bot<token>/sendMessage" in caught.value.detail
    assert SECRET_PART not in str(caught.value)


def test_a_body_shorter_than_its_content_length_is_outcome_unknown() -> None:
    """A connection cut inside the body must not pass for a complete answer, even one that parses."""
    with _serving() as server:
        api = BotApi(TOKEN, server.url, timeout_s=5)
        for status, body in ((200, b'{"ok": true, "result": 1}'), (400, b'{"ok": false, "error_code": 400}')):
            server.answer(status, body, content_length=len(body) + 10)
            with pytest.raises(OutcomeUnknown, match="IncompleteRead"):
                api.call("sendMessage", {"chat_id": CHAT, "text": "x"})


# --- bounded reads ------------------------------------------------------------------------


@pytest.mark.parametrize("with_length", [True, False], ids=["content-length", "until-close"])
def test_an_answer_larger_than_the_bound_is_outcome_unknown_and_never_parsed(with_length: bool) -> None:
    limit = telegram_api.MAX_ANSWER_BYTES
    padding = b" " * (limit + 2 * 1024 * 1024)
    refused = b'{"ok": false, "error_code": 400, "description": "Bad Request: nope"}' + padding
    with _serving() as server:
        api = BotApi(TOKEN, server.url, timeout_s=5)
        for status, body in ((200, b'{"ok": true, "result": 1}' + padding), (400, refused), (502, padding)):
            server.answer(status, body, content_length=len(body) if with_length else None)
            with pytest.raises(OutcomeUnknown, match=f"answer larger than {limit} bytes") as caught:
                api.call("sendMessage", {"chat_id": CHAT, "text": "x"})
            assert type(caught.value) is OutcomeUnknown
            # The connection is closed at once, although the error (and its traceback) is still held.
            assert server.finished.wait(2), "the server is still writing the answer"
        # Exactly at the bound is still an answer.
        body = b'{"ok": true, "result": 1}'
        body += b" " * (limit - len(body))
        server.answer(200, body, content_length=len(body) if with_length else None)
        assert api.call("sendMessage", {"chat_id": CHAT, "text": "x"}) == 1


def test_a_full_batch_of_the_largest_updates_fits_the_bound() -> None:
    """100 updates, each a 4096-character reply (non-BMP emoji, JSON-escaped: 12 bytes per character
    pair) to a message as long: far above any real batch, and still well inside the bound, so a
    poller is never stuck on a batch it cannot read."""
    text = "\U0001f600" * 2048  # 4096 UTF-16 code units, Telegram's limit
    chat = {"id": CHAT, "type": "private", "first_name": "Person"}
    keyboard = {"inline_keyboard": [[{"text": "x" * 64, "callback_data": "d" * 64}] * 8] * 12}
    updates = [
        {
            "update_id": 1000 + n,
            "message": {
                "message_id": 2 * n + 2,
                "date": 1700000000,
                "chat": chat,
                "from": {"id": USER, "is_bot": False, "first_name": "Person"},
                "text": text,
                "entities": [{"type": "bold", "offset": i * 40, "length": 20} for i in range(100)],
                "reply_to_message": {
                    "message_id": 2 * n + 1, "date": 1700000000, "chat": chat, "text": text, "reply_markup": keyboard
                },
            },
        }
        for n in range(100)
    ]
    body = json.dumps({"ok": True, "result": updates}).encode()  # ensure_ascii, as Telegram escapes
    assert 6 * 1024 * 1024 < len(body) < telegram_api.MAX_ANSWER_BYTES / 2
    with _answering(200, body) as url:
        assert len(BotApi(TOKEN, url, timeout_s=5).get_updates(0, timeout_s=0)) == 100


class _Server:
    """A server on 127.0.0.1 answering every POST with its current `answer` (settable between requests)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answer(200, b"")

    def answer(self, status: int, body: bytes, *, content_length: int | None = -1) -> None:
        """Answer with `status` and `body`; `content_length` -1 sends the body's length, None sends no
        Content-Length (the body ends when the connection closes), another number sends that number."""
        self.status, self.body = status, body
        self.content_length = len(body) if content_length == -1 else content_length
        self.finished = threading.Event()  # set once the answer is written, or its client went away


@contextlib.contextmanager
def _serving() -> Iterator[_Server]:
    """One server on 127.0.0.1 for a test's many answers (set each with `answer`); yields its `_Server`."""

    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # a client that neither reads nor closes fails its test instead of hanging it

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body, length, finished = answers.status, answers.body, answers.content_length, answers.finished
            self.send_response(status)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # a client that stopped reading a too-large body
                self.close_connection = True
            finally:
                finished.set()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)  # one request at a time: 2x faster than threading
    answers = _Server(f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield answers
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextlib.contextmanager
def _answering(status: int, body: bytes) -> Iterator[str]:
    """A server on 127.0.0.1 that answers every POST with `status` and `body`; yields its URL."""
    with _serving() as server:
        server.answer(status, body)
        yield server.url


# --- token secrecy ------------------------------------------------------------------------------


def test_token_never_appears_in_errors_repr_or_logs(fake: FakeBotApi, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="piwf_actors.channels.telegram_api")
    api = BotApi(TOKEN, fake.url, timeout_s=0.3)
    wrong_token = "555:" + SECRET_PART + "WRONG"
    errors: list[TelegramError] = []

    def collect(call: Callable[[], Any]) -> None:
        with pytest.raises(TelegramError) as caught:
            call()
        errors.append(caught.value)

    # The fake echoing the token back (a proxy's error page might) must be redacted too.
    fake.fail_next("sendMessage", "error", description=f"Bad Request: bad path /bot{TOKEN}/sendMessage")
    collect(lambda: api.send_message(CHAT, "a"))
    fake.fail_next("sendMessage", "retry_after", seconds=1)
    collect(lambda: api.send_message(CHAT, "b"))
    fake.fail_next("sendMessage", "drop")
    collect(lambda: api.send_message(CHAT, "c"))
    fake.fail_next("sendMessage", "hang", seconds=30)
    collect(lambda: api.send_message(CHAT, "d"))
    collect(lambda: api.send_message(CHAT, "x" * 5000))
    collect(lambda: BotApi(TOKEN, f"http://127.0.0.1:{free_closed_port()}").send_message(CHAT, "e"))
    collect(lambda: BotApi(wrong_token, fake.url).send_message(CHAT, "f"))
    collect(lambda: api.call("sendMessage", {"chat_id": CHAT, "text": object()}))

    assert [type(error) for error in errors] == [NotSent, NotSent, OutcomeUnknown, OutcomeUnknown] + [NotSent] * 4
    assert all(isinstance(error, PiwfError) for error in errors)
    assert "<token>" in str(errors[0])
    texts = [repr(api), repr(BotApi(wrong_token, fake.url)), caplog.text]
    for error in errors:
        texts += [str(error), repr(error), error.one_line(), "".join(traceback.format_exception(error))]
    assert caplog.text  # the calls above were logged
    for text in texts:
        assert SECRET_PART not in text
        assert "918273:" not in text


# A token whose percent-encoding differs from it (real tokens are [0-9]+:[A-Za-z0-9_-]+, for which it does not).
ODD_TOKEN = "5150:SECRET/odd token+PLUGH~é"


def _pieces(token: str) -> set[str]:
    """Every 8-character piece of the token's secret part, raw and percent-encoded."""
    secret = token.partition(":")[2]
    return {form[i:i + 8] for form in (secret, urllib.parse.quote(secret, safe="")) for i in range(len(form) - 7)}


def test_no_piece_of_the_token_survives_any_cut(caplog: pytest.LogCaptureFixture) -> None:
    """The token quoted in an error page or a Bot API description at every offset across every cut
    (the 200-character snippet of a page, the 300-character cut of a description, one_line's cut): it
    is redacted before any cut, so not even a piece of it reaches an error, a log line or a traceback."""
    caplog.set_level(logging.DEBUG, logger="piwf_actors.channels.telegram_api")
    with _serving() as server:

        def check(api: BotApi, pieces: set[str], status: int, body: bytes, expected: type[TelegramError]) -> None:
            server.answer(status, body)
            with pytest.raises(TelegramError) as caught:
                api.call("sendMessage", {"chat_id": CHAT, "text": "x"})
            error = caught.value
            assert type(error) is expected, error
            texts = (str(error), error.one_line(), error.one_line(500), error.one_line(120), repr(error),
                     "".join(traceback.format_exception(error)))
            for text in texts:
                assert not [piece for piece in pieces if piece in text], text

        for token, statuses in ((TOKEN, (502, 200)), (ODD_TOKEN, (502,))):
            api, pieces = BotApi(token, server.url, timeout_s=5), _pieces(token)
            # The token as a proxy or Telegram might quote it back: raw, as sent in the path (the same for
            # real tokens), fully percent-encoded, and its secret part split off, raw and encoded. Each
            # form is redacted on its own, so one text quotes them all, each sweeping the cuts in turn.
            secret = token.partition(":")[2]
            forms = (token, urllib.parse.quote(token, safe=":"), urllib.parse.quote(token, safe=""))
            quote = " ".join(f"/bot{form}/sendMessage" for form in dict.fromkeys(forms))
            quote += " secret=" + " ".join(dict.fromkeys((secret, urllib.parse.quote(secret, safe=""))))
            for offset in range(261):  # an error page (not a Bot API answer, whatever its status)
                page = ("x" * offset + f"POST {quote} failed " + "z" * 300).encode()
                for status in statuses:
                    check(api, pieces, status, page, OutcomeUnknown)
            # Many quotes: redacting them shortens the text, so cutting a window before redacting it would
            # pull a cut piece of a later quote into the snippet.
            path = f"/bot{urllib.parse.quote(token, safe=':')}/sendMessage"
            for offset in range(len(path)):
                check(api, pieces, 404, ("x" * offset + path * 40).encode(), OutcomeUnknown)
            # A Bot API error answer whose description quotes the token. The description is cut in one
            # place whatever the answer means; the offsets alternate between a refusal and a failure.
            for offset in range(321):
                description = "y" * offset + f"Bad Request: bad path {quote} " + "z" * 300
                code, expected = (400, NotSent) if offset % 2 else (500, OutcomeUnknown)
                body = json.dumps({"ok": False, "error_code": code, "description": description}).encode()
                check(api, pieces, code, body, expected)
    assert "refused" in caplog.text and "without a Bot API answer" in caplog.text
    assert not [piece for piece in _pieces(TOKEN) | _pieces(ODD_TOKEN) if piece in caplog.text]
