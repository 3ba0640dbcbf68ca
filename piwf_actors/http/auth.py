"""Tokens, roles and the slowing of failed sign-ins (docs/http.md, docs/security.md).

A token is 32 random bytes, URL-safe base64 with a `piwf_` prefix, made by
`piwf http token add` and printed once; the host stores its sha256 only.
Looking a token up by its digest is an equality on a hash of 256 random
bits, so the comparison leaks nothing an attacker could use; the digest
is compared once more with `hmac.compare_digest` all the same.

`SignInThrottle` is a step function with an injected `now`: each failed
sign-in from a remote address doubles the delay before that address's next
failure is answered (from BASE_DELAY_S up to MAX_DELAY_S); a success or
quiet time (FORGET_S) clears it. At most MAX_ADDRESSES are remembered (the
oldest forgotten first), so a flood of addresses costs bounded memory.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import secrets

from piwf_actors.http.routes import OPERATOR, VIEWER

TOKEN_PREFIX = "piwf_"
BASE_DELAY_S = 0.05
MAX_DELAY_S = 2.0
FORGET_S = 300.0
MAX_ADDRESSES = 4096


def new_token() -> str:
    """A fresh bearer token (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """What the database keeps of a token: its sha256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def same_digest(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer …` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    return token


def may(role: str, needed: str) -> bool:
    """Whether a token of `role` may call a route that needs `needed` (an operator may do what a viewer may)."""
    return needed == VIEWER or role == OPERATOR


class SignInThrottle:
    """Failed sign-ins per remote address. Used from the door's event-loop thread only."""

    def __init__(self, max_addresses: int = MAX_ADDRESSES) -> None:
        self._max = max_addresses
        #: address → (consecutive failures, time of the last one); oldest first.
        self._failures: collections.OrderedDict[str, tuple[int, float]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._failures)

    def failed(self, address: str, now: float) -> float:
        """Note a failed sign-in; the delay (seconds) before it is answered."""
        count, last = self._failures.pop(address, (0, now))
        if now - last > FORGET_S:
            count = 0
        count += 1
        self._failures[address] = (count, now)
        while len(self._failures) > self._max:
            self._failures.popitem(last=False)
        return min(BASE_DELAY_S * 2 ** (count - 1), MAX_DELAY_S)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
