"""`Ctx`: what a `piwf` command works with — its arguments, the consoles, and the host (or, for the
read-only commands, the state database of a stopped host)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from piwf_actors.cli import ids, render
from piwf_actors.cli.refused import Refused
from piwf_actors.client import Client, HostNotRunning
from piwf_actors.client.connection import ContentReader, Response
from piwf_actors.paths import StatePaths
from piwf_actors.store.engines.registry import engine_for

__all__ = ["Ctx", "Refused"]  # Refused lives in cli/refused.py (a leaf: cli/ids.py raises it too)

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_NO_HOST = 0, 1, 2, 3


def keyed_client_id() -> str:
    """The client id of a command whose idempotency key the user names (`piwf send --key K`): the same in
    every `piwf` process of this user, because the host records a key per client id, and a key that
    is to name one message across invocations needs the same client each time."""
    return f"piwf-cli-{os.getuid()}"


@dataclass
class Ctx:
    args: argparse.Namespace
    out: Console
    err: Console
    #: The requests' client id; None: a fresh one for this process (see `keyed_client_id`). Set it
    #: before the first request: the client is made once.
    client_id: str | None = None
    _client: ContentReader | None = None

    @property
    def json(self) -> bool:
        return bool(self.args.json)

    def client(self, timeout: float = 30.0, *, offline_ok: bool = False) -> ContentReader:
        """The host's client; with `offline_ok`, when no host listens but the state database exists, a
        read-only `LocalStore` on it (saying so on stderr). Commands that read pass `offline_ok` in
        their first call."""
        if self._client is None:
            # `piwf-cli-…` names the program in an answer's provenance (`answered_by`: person via cli).
            client = Client(self.args.state_dir, timeout=timeout,
                            client_id=self.client_id or f"piwf-cli-{uuid.uuid4().hex[:12]}")
            if offline_ok:
                try:
                    client.connect()
                except HostNotRunning as exc:
                    try:
                        database = StatePaths.resolve(self.args.state_dir, getattr(self.args, "database", None)).database
                    except ValueError:
                        raise exc from None
                    if exc.listening or not engine_for(database).exists(database):
                        raise
                    from piwf_actors.cli.offline import LocalStore  # imports the store: only when needed

                    self.note(f"piwf: no host is running; reading {database} (read-only)")
                    self._client = LocalStore(database)
                    return self._client
            self._client = client
        return self._client

    def host(self, timeout: float = 30.0) -> Client:
        """The client of a running host (live operations: watches, writes)."""
        client = self.client(timeout)
        if not isinstance(client, Client):
            raise HostNotRunning(str(StatePaths.resolve(self.args.state_dir).socket), "nothing listens")
        return client

    @property
    def offline(self) -> bool:
        return self._client is not None and not isinstance(self._client, Client)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def call(self, operation: str, payload: dict[str, Any] | None = None, **envelope: Any) -> Any:
        """Send one request; the receipt when accepted/adopted, else `Refused`. `envelope`: run_id,
        expected_revision, idempotency_key (default: a fresh one, so the request is recorded once)."""
        return self.answer(operation, payload, **envelope).receipt

    def answer(self, operation: str, payload: dict[str, Any] | None = None, **envelope: Any) -> Response:
        """Like `call`, but the whole answer (its outcome tells `accepted` from `adopted`)."""
        answer = self.client().request(operation, payload, **envelope)
        if not answer.ok:
            raise Refused(answer)
        return answer

    def resolve(self, kind: str, value: str) -> str:
        """The full id a (prefix) argument names; see `cli/ids.py`."""
        return ids.resolve(self.client(), kind, value)

    def short_id(self, kind: str, full: str, min_chars: int = 8) -> str:
        """A prefix of `full` that names it alone right now (for commands printed as hints)."""
        head = full.find("_") + 1
        for length in range(head + min_chars, len(full), 4):
            answer = self.client().request("ids.match", {"kind": kind, "prefix": full[:length], "limit": 2})
            if not answer.ok:
                break
            if answer.receipt["matches"] == [full] and not answer.receipt["more"]:
                return full[:length]
        return full

    def command(self, *words: str) -> str:
        """`piwf WORDS…` as a shell command that reaches this host (with --state-dir when one was given)."""
        base = ["piwf"] + (["--state-dir", str(self.args.state_dir)] if self.args.state_dir else [])
        return shlex.join([*base, *words])

    def emit_json(self, value: Any) -> None:
        self.out.out(render.to_json(value), highlight=False)

    def show(self, value: Any, renderer: Any) -> None:
        """JSON of `value` with --json, else `renderer(value)` as a Rich renderable."""
        if self.json:
            self.emit_json(value)
        else:
            self.out.print(renderer(value))

    def note(self, message: Any) -> None:
        """One line (a str or a rich Text) on stderr, never wrapped (it may be a command to copy)."""
        if isinstance(message, str):
            print(message, file=sys.stderr, flush=True)
        else:
            self.err.print(message, soft_wrap=True, highlight=False)
