"""Console sign-in sessions and CSRF tokens (docs/http.md, "Console").

A browser signs in with a token once; the console keeps, in memory, a random
session id → the token's sha256 and a CSRF token of that session, and sets
the session id as an HttpOnly, SameSite=Strict cookie. Each request looks the
token's row up again (`DoorPort.token`), so revoking a token closes its
sessions at once. Sessions live in the door's process only: a host restart
(or a standby taking over) asks the browser to sign in again, which costs a
person one form and keeps no session secret in the database.

Every form carries the session's CSRF token and every POST made with the
cookie is checked against it (`same`). The sign-in form, which has no session
yet, is checked by a double submit: a random value in a short-lived
SameSite=Strict cookie and in the form.

Used from the door's event-loop thread only (no lock). Bounded: at most
MAX_SESSIONS sessions (the oldest are forgotten first), each for TTL_S.
"""

from __future__ import annotations

import collections
import hmac
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "piwf_session"
SIGNIN_COOKIE = "piwf_signin"
MAX_SESSIONS = 4096
TTL_S = 12 * 3600.0


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    token_digest: str
    csrf: str
    expires_at: float


class Sessions:
    def __init__(self, max_sessions: int = MAX_SESSIONS, ttl_s: float = TTL_S) -> None:
        self._max = max_sessions
        self._ttl = ttl_s
        self._open: collections.OrderedDict[str, Session] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def open(self, token_digest: str, now: float) -> Session:
        session = Session(secrets.token_urlsafe(32), token_digest, secrets.token_urlsafe(24), now + self._ttl)
        self._open[session.session_id] = session
        while len(self._open) > self._max:
            self._open.popitem(last=False)
        return session

    def get(self, session_id: str | None, now: float) -> Session | None:
        if not session_id:
            return None
        session = self._open.get(session_id)
        if session is None:
            return None
        if session.expires_at <= now:
            del self._open[session_id]
            return None
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._open.pop(session_id, None)


def same(expected: str | None, given: str | None) -> bool:
    """Whether a form's CSRF token is the one expected (constant time; a missing one never is)."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())
