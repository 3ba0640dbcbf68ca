"""Console sign-in sessions and CSRF tokens (docs/http.md, "Console"; docs/security.md).

A browser signs in with a token once; the console makes a session id (256
random bits), sets it as an HttpOnly, SameSite=Strict cookie and has the host
store its sha256 with the sha256 of the token (`http_session.open`, written
by the host's writer: `store/commands/http_sessions.py`). Every request looks
the session up again in the state database (`DoorPort.session`), joined
with its token, so:

- a session survives the host's restart and a standby's takeover (every
  host on the database knows it), and a copy of the database opens none;
- revoking the token ends its sessions at once (and deletes them);
- sign-out deletes it (`http_session.close`);
- it ends SESSION_LIFETIME_S after the sign-in (12 h), however it is used.

Every form carries the session's CSRF token and every POST made with the
cookie is checked against it (`same`). The CSRF token is an HMAC of the
session id, so every host derives the same one and the database holds
none. The sign-in form, which has no session yet, is checked by a double
submit: a random value in a short-lived SameSite=Strict cookie and in the
form.

Pure functions: no I/O, no state.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SESSION_COOKIE = "piwf_session"
SIGNIN_COOKIE = "piwf_signin"
#: The longest session id a cookie may carry (a made one is 43 characters).
MAX_SESSION_ID = 128


def new_session_id() -> str:
    """A fresh session id (256 random bits), the cookie's value."""
    return secrets.token_urlsafe(32)


def session_digest(session_id: str) -> str:
    """What the database keeps of a session: the sha256 of its id, hex."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()


def csrf_of(session_id: str) -> str:
    """The CSRF token of the session: derived from its id (which only the browser and the door see)."""
    return hmac.new(session_id.encode("utf-8", "surrogatepass"), b"piwf console csrf", hashlib.sha256).hexdigest()


def usable(session_id: str | None) -> bool:
    """Whether a cookie's value is worth looking up (present and not oversized)."""
    return bool(session_id) and len(session_id or "") <= MAX_SESSION_ID


def same(expected: str | None, given: str | None) -> bool:
    """Whether a form's CSRF token is the one expected (constant time; a missing one never is)."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())
