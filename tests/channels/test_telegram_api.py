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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from piwf_actors.channels.fake_telegram import FakeBotApi
from piwf_actors.channels.telegram_api import BotApi, NotSent, OutcomeUnknown, TelegramError
from piwf_actors.errors import PiwfError

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
    ("status", "body", "expected"),
    [
        (200, b"<html>oops</html>", OutcomeUnknown),
        (200, b'{"ok": true}', OutcomeUnknown),
        (502, b"<html>Bad Gateway</html>", OutcomeUnknown),
        (500, b"<html>Internal Server Error</html>", NotSent),
        (200, b'{"ok": false, "error_code": 400, "description": "Bad Request: nope"}', NotSent),
    ],
)
def test_answers_that_are_not_plain_bot_api_answers(status: int, body: bytes, expected: type[TelegramError]) -> None:
    with _answering(status, body) as url:
        api = BotApi(TOKEN, url, timeout_s=5)
        with pytest.raises(expected) as caught:
            api.call("sendMessage", {"chat_id": CHAT, "text": "x"})
        assert type(caught.value) is expected


@contextlib.contextmanager
def _answering(status: int, body: bytes) -> Iterator[str]:
    """A server on 127.0.0.1 that answers every POST with `status` and `body`; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


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


def test_a_token_cut_by_the_error_snippet_leaves_no_part_of_it(caplog: pytest.LogCaptureFixture) -> None:
    """An error page that quotes the request URL across the 200-byte snippet: the token is redacted
    before the cut, so not even a piece of it reaches the error (and the logs, the database)."""
    caplog.set_level(logging.DEBUG, logger="piwf_actors.channels.telegram_api")
    body = (b"x" * 170 + f"GET /bot{TOKEN}/sendMessage failed".encode())
    with _answering(502, body) as url, pytest.raises(OutcomeUnknown) as caught:
        BotApi(TOKEN, url, timeout_s=5).call("sendMessage", {"chat_id": CHAT, "text": "x"})
    secret = TOKEN.partition(":")[2]
    pieces = {secret[i:i + 8] for i in range(len(secret) - 7)}
    for text in (str(caught.value), caught.value.one_line(), caplog.text):
        assert not [piece for piece in pieces if piece in text], text
