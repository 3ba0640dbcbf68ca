"""Id arguments: a unique prefix stands for the full id.

`piwf show run_01m8m1b5` works when one run id starts with it. A full id (the
shape the host generates) is used as is, without a lookup; anything else is
looked up with `ids.match` (or, for a channel delivery, among the deliveries
`channel.status` lists). An id that is itself a match wins over the longer
ids it is a prefix of (a run id chosen by a client may be anything). No
match exits 1 ("no run matches 'run_01x'"), several exit 2 with the
candidates listed, one per line, at most ten.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from piwf_actors.cli.refused import Refused

#: Generated ids: `new_id` (kind + 26 base32), a restart's run id (26 hex) and a request id (32 hex).
FULL_ID = {
    "run": re.compile(r"run_[0-9a-z]{26}"),
    "request": re.compile(r"req_[0-9a-f]{32}"),
    "effect": re.compile(r"r?eff_[0-9a-z]{26}"),  # a run's effect, or a resource's (reff_)
    "message": re.compile(r"msg_[0-9a-z]{26}"),
    "delivery": re.compile(r"chf_[0-9a-z]{26}-[0-9]+"),
}
NOUNS = {"run": "run", "request": "request", "effect": "effect", "message": "message",
         "delivery": "ambiguous delivery"}
#: How many candidates an ambiguous prefix lists.
CANDIDATES = 10


class NoMatch(Exception):
    """No id of the kind starts with the prefix (exit 1)."""

    def __init__(self, kind: str, prefix: str) -> None:
        super().__init__(f"no {NOUNS.get(kind, kind)} matches {prefix!r}")
        self.kind, self.prefix = kind, prefix


class Ambiguous(Exception):
    """Several ids start with the prefix (exit 2); `matches` are the first of them, `more` says if others exist."""

    def __init__(self, kind: str, prefix: str, matches: list[str], more: bool) -> None:
        what = f"{len(matches)}{'+' if more else ''} {NOUNS.get(kind, kind)}s"
        super().__init__(f"{prefix!r} is ambiguous: it matches {what}; give more characters")
        self.kind, self.prefix, self.matches, self.more = kind, prefix, matches, more

    def lines(self) -> list[str]:
        return [*self.matches, *(["…"] if self.more else [])]


def pick(kind: str, prefix: str, matches: list[str], more: bool) -> str:
    """The one id `prefix` names among `matches` (the ids starting with it), else NoMatch / Ambiguous."""
    if prefix in matches:
        return prefix
    if len(matches) == 1 and not more:
        return matches[0]
    if not matches:
        raise NoMatch(kind, prefix)
    raise Ambiguous(kind, prefix, matches[:CANDIDATES], more or len(matches) > CANDIDATES)


def is_full(kind: str, value: str) -> bool:
    pattern = FULL_ID.get(kind)
    return pattern is not None and pattern.fullmatch(value) is not None


def resolve(client: Any, kind: str, value: str) -> str:
    """The full id of `kind` (run, request, effect, message) that `value` names, asking the host
    (`ids.match`) unless `value` already has a full id's shape. A host without `ids.match` takes `value`
    as given."""
    if is_full(kind, value) or not value:
        return value
    answer = client.request("ids.match", {"kind": kind, "prefix": value, "limit": CANDIDATES})
    if not answer.ok:
        if answer.outcome == "rejected" and "is not available" in (answer.error or ""):
            return value  # an older host: let the operation itself say whether the id exists
        raise Refused(answer)
    return pick(kind, value, list(answer.receipt["matches"]), bool(answer.receipt["more"]))


def resolve_among(kind: str, value: str, candidates: Iterable[str]) -> str | None:
    """The candidate `value` names (exact, or the only one it prefixes); None when none starts with it
    (the caller then passes `value` on unchanged); Ambiguous for several."""
    if is_full(kind, value):
        return value
    matches = sorted({c for c in candidates if c.startswith(value)})
    if not matches:
        return None
    return pick(kind, value, matches, False)
