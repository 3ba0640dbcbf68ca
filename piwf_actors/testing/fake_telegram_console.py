"""Try the Telegram channel without a bot: the fake Bot API (`fake_telegram.py`) as a program.

``python -m piwf_actors.testing.fake_telegram_console`` serves the fake on
127.0.0.1 (port 8765 unless ``--port``; 0 picks a free one and prints it),
prints what to configure (``PIWF_TELEGRAM_API_BASE``, the bot token, a
channels.toml profile, or writes both files with ``--write-config DIR``),
and then reads commands typed on its standard input, acting as one person
(``--user-id``, in the private chat of the same id unless ``--chat-id``):

    list                       the bot's messages in the chat, with numbered buttons
    tap MESSAGE BUTTON         press a button (its number or its label)
    reply MESSAGE TEXT…        reply to a bot message (a prompt for text, a checkpoint)
    send TEXT…                 write to the bot without replying to anything

The same commands work from another shell while it runs
(``python -m piwf_actors.testing.fake_telegram_console tap 1 "Ship it"``): they are
sent to the running fake as a ``fakeCommand`` call, under the bot token.
When standard input ends (started in the background) the fake keeps
serving until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from piwf_actors.channels.telegram_api import BotApi, NotSent, OutcomeUnknown
from piwf_actors.testing.fake_telegram import FakeBotApi

DEFAULT_PORT = 8765
DEFAULT_TOKEN = "123456:FAKE-token-for-trying-piwf"
DEFAULT_USER = 1001
#: How long a tap or reply waits to show the host's answer to it.
REACTION_WAIT_S = 5.0
COMMANDS = ("list", "tap", "reply", "send", "help")
HELP = """commands:
  list                    the bot's messages in the chat, with numbered buttons
  tap MESSAGE BUTTON      press a button (its number in `list`, or its label)
  reply MESSAGE TEXT...   reply to a bot message (a prompt for text, a checkpoint)
  send TEXT...            write to the bot without replying to anything
  help, quit"""


class Person:
    """One simulated person in one chat: runs the commands against the fake (any thread)."""

    def __init__(self, fake: FakeBotApi, user_id: int, chat_id: int) -> None:
        self.fake = fake
        self.user_id = user_id
        self.chat_id = chat_id

    def run(self, words: list[str]) -> str:
        """The command's output. Raises ValueError (one line) for a command that cannot be done."""
        if not words:
            return ""
        name, rest = words[0].lower(), words[1:]
        if name == "list":
            return self.list()
        if name == "help":
            return HELP
        if name == "tap" and len(rest) == 2:
            return self.tap(_message_number(rest[0]), rest[1])
        if name == "reply" and len(rest) >= 2:
            return self.reply(_message_number(rest[0]), " ".join(rest[1:]))
        if name == "send" and rest:
            return self.send(" ".join(rest))
        raise ValueError(f"usage: {_usage(name)}" if name in COMMANDS else
                         f"unknown command {name!r}; expected one of {', '.join(COMMANDS)}")

    def list(self) -> str:
        messages = self.fake.messages(self.chat_id)
        if not messages:
            return f"(no messages from the bot in chat {self.chat_id} yet)"
        return "\n".join(_render(message) for message in messages)

    def tap(self, message_id: int, button: str) -> str:
        message = self._message(message_id)
        rows = (message.get("reply_markup") or {}).get("inline_keyboard") or []
        buttons = [item for row in rows for item in row if "callback_data" in item]
        if not buttons:
            raise ValueError(f"message #{message_id} has no buttons")
        chosen = _pick(buttons, button)
        if chosen is None:
            labels = ", ".join(f"[{index}] {item['text']}" for index, item in enumerate(buttons, 1))
            raise ValueError(f"message #{message_id} has no button {button!r}; its buttons: {labels}")
        update_id = self.fake.tap(chat_id=self.chat_id, user_id=self.user_id, message_id=message_id,
                                  data=chosen["callback_data"])
        query_id = self.fake.made_by(update_id)
        answer = self._wait(lambda: next((item.get("text") or "(no text)" for item in self.fake.answered_callbacks()
                                          if item.get("callback_query_id") == query_id), None))
        return f"tapped [{chosen['text']}] on #{message_id}\n" + _reaction(answer)

    def reply(self, message_id: int, text: str) -> str:
        self._message(message_id)
        update_id = self.fake.reply(chat_id=self.chat_id, user_id=self.user_id, text=text,
                                    reply_to_message_id=message_id)
        return f"replied to #{message_id}\n" + _reaction(self._wait(lambda: self._answer_to(update_id)))

    def send(self, text: str) -> str:
        self.fake.reply(chat_id=self.chat_id, user_id=self.user_id, text=text)
        return "sent"

    def _message(self, message_id: int) -> dict[str, Any]:
        for message in self.fake.messages(self.chat_id):
            if message["message_id"] == message_id:
                return message
        raise ValueError(f"no bot message #{message_id} in chat {self.chat_id} (`list` shows them)")

    def _answer_to(self, update_id: int) -> str | None:
        mine = self.fake.made_by(update_id)
        for message in self.fake.messages(self.chat_id):
            if (message.get("reply_to_message") or {}).get("message_id") == mine:
                return str(message["text"])
        return None

    @staticmethod
    def _wait(find: Any) -> str | None:
        deadline = time.monotonic() + REACTION_WAIT_S
        while True:
            found = find()
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)


def _usage(name: str) -> str:
    return {"tap": "tap MESSAGE BUTTON", "reply": "reply MESSAGE TEXT...", "send": "send TEXT...",
            "list": "list", "help": "help"}[name]


def _message_number(word: str) -> int:
    number = word.lstrip("#")
    if not number.isdecimal():
        raise ValueError(f"MESSAGE must be a message number as `list` shows it (#3 or 3), not {word!r}")
    return int(number)


def _pick(buttons: list[dict[str, Any]], wanted: str) -> dict[str, Any] | None:
    if wanted.isdecimal():
        index = int(wanted)
        return buttons[index - 1] if 1 <= index <= len(buttons) else None
    folded = wanted.casefold().strip()
    for item in buttons:
        if item["text"].removesuffix(" ✎").casefold() == folded:
            return item
    return None


def _reaction(answer: str | None) -> str:
    if answer is None:
        return (f"(no answer from the host within {REACTION_WAIT_S:g} s: is it running with "
                "PIWF_TELEGRAM_API_BASE pointing here, and does channels.toml allow this user and chat?)")
    return "bot: " + answer.replace("\n", "\n     ")


def _render(message: dict[str, Any]) -> str:
    head = f"#{message['message_id']}"
    notes = []
    replied = message.get("reply_to_message")
    if replied:
        notes.append(f"replying to #{replied['message_id']}")
    if message.get("edited"):
        notes.append("edited")
    lines = [head + (f" ({', '.join(notes)})" if notes else "")]
    lines += [f"  {line}".rstrip() for line in str(message["text"]).splitlines()]
    rows = (message.get("reply_markup") or {}).get("inline_keyboard") or []
    buttons = [item["text"] for row in rows for item in row if "callback_data" in item]
    if buttons:
        lines.append("  buttons: " + "  ".join(f"[{index}] {text}" for index, text in enumerate(buttons, 1)))
    return "\n".join(lines)


# --- the program -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m piwf_actors.testing.fake_telegram_console",
        description="A fake Telegram Bot API on 127.0.0.1, to try decision channels without a bot. Without a "
                    "command it serves and reads commands from standard input; with one it sends the command "
                    "to the fake already running on --port.",
        epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port, printed)")
    parser.add_argument("--token", default=DEFAULT_TOKEN, help="the bot token the fake accepts (default: %(default)s)")
    parser.add_argument("--user-id", type=int, default=DEFAULT_USER, help="the person you play (default %(default)s)")
    parser.add_argument("--chat-id", type=int, help="the chat (default: the private chat of --user-id)")
    parser.add_argument("--write-config", type=Path, metavar="DIR",
                        help="write channels.toml and credentials.toml for this fake into DIR (never overwrites)")
    parser.add_argument("command", nargs="*", help="list | tap MESSAGE BUTTON | reply MESSAGE TEXT | send TEXT")
    return parser


def channels_toml(user_id: int, chat_id: int) -> str:
    return ("[telegram.ops]\n"
            'credential = "ops_bot"\n'
            f"allowed_user_ids = [{user_id}]\n"
            f"allowed_chat_ids = [{chat_id}]\n"
            'audiences = ["*"]\n')


def write_config(directory: Path, token: str, user_id: int, chat_id: int) -> None:
    """channels.toml and credentials.toml (0600) for the fake, in a directory only the user may write."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.stat(directory).st_mode & 0o022:
        # An existing directory is never chmod-ed (it could be /tmp): the host would refuse it as it is.
        raise ValueError(f"{directory} is writable by group or others, which the host refuses; "
                         "give --write-config a new directory")
    files = {"channels.toml": channels_toml(user_id, chat_id), "credentials.toml": f'ops_bot = "{token}"\n'}
    taken = [name for name in files if (directory / name).exists()]
    if taken:
        raise ValueError(f"{directory / taken[0]} exists; not overwritten (use another --write-config directory)")
    for name, text in files.items():
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(text)


def _send(args: argparse.Namespace, out: TextIO) -> int:
    """Run one command in the fake already serving on --port."""
    api = BotApi(args.token, f"http://127.0.0.1:{args.port}", timeout_s=REACTION_WAIT_S + 10)
    try:
        result = api.call("fakeCommand", {"words": args.command})
    except NotSent as exc:
        if exc.error_code is None:
            print(f"error: no fake Bot API on 127.0.0.1:{args.port} (start it first: "
                  "python -m piwf_actors.testing.fake_telegram_console)", file=sys.stderr)
        elif exc.error_code == 401:
            print("error: the fake on that port has another token (pass the same --token)", file=sys.stderr)
        else:
            print(f"error: {exc.description.removeprefix('Bad Request: ')}", file=sys.stderr)
        return 1
    except OutcomeUnknown as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(result["text"], file=out)
    return 0


def _serve(args: argparse.Namespace, stdin: TextIO, out: TextIO) -> int:
    chat_id = args.user_id if args.chat_id is None else args.chat_id
    if args.write_config is not None:
        write_config(args.write_config, args.token, args.user_id, chat_id)
    try:
        fake = FakeBotApi(args.token, port=args.port).start()
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc} (try --port 0)", file=sys.stderr)
        return 1
    person = Person(fake, args.user_id, chat_id)
    fake.command = person.run
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        config = (f"wrote {args.write_config}/channels.toml and credentials.toml; start the host with "
                  f"PIWF_CONFIG_DIR={args.write_config}" if args.write_config is not None else
                  f"channels.toml (profile for this fake):\n{channels_toml(args.user_id, chat_id)}"
                  f'credentials.toml (chmod 600):\nops_bot = "{args.token}"')
        print(f"fake Telegram Bot API on {fake.url}\n"
              f"export PIWF_TELEGRAM_API_BASE={fake.url}\n"
              f"bot token: {args.token}\n"
              f"you are user {args.user_id} in chat {chat_id}\n{config}\n"
              "type `help` for the commands", file=out, flush=True)
        reader = threading.Thread(target=_read_commands, args=(person, stdin, out, stop), name="fake-console",
                                  daemon=True)
        reader.start()
        stop.wait()
    finally:
        fake.stop()
    return 0


def _read_commands(person: Person, stdin: TextIO, out: TextIO, stop: threading.Event) -> None:
    """Typed commands, one a line, until `quit` (which stops the fake) or the end of input (which does not)."""
    for line in stdin:
        try:
            words = shlex.split(line)
        except ValueError as exc:
            print(f"error: {exc}", file=out, flush=True)
            continue
        if words and words[0].lower() in ("quit", "exit"):
            stop.set()
            return
        try:
            text = person.run(words)
        except ValueError as exc:
            text = f"error: {exc}"
        if text:
            print(text, file=out, flush=True)
    print("(standard input closed: serving until Ctrl-C or SIGTERM)", file=out, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command:
        return _send(args, sys.stdout)
    try:
        return _serve(args, sys.stdin, sys.stdout)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
