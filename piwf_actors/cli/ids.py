"""Id arguments: a unique prefix (or end) stands for the full id.

`piwf show run_01m8m1b5` works when one run id starts with it, and so does
`piwf show 01m8m1b5`: the kind (`run_`, `req_` …) may be left out. The end of
an id works too, as piwf-top shows it (`…vqyrxvjp2mvr1rtt`, with `…` or `...`
before it, or without them when no id starts with it and it has at least
`SUFFIX_MIN` characters). A full id (the shape
the host generates: every run id has one, `ids.derived_id`) is used as is,
without a lookup; anything else is looked up with `ids.match` (or, for a
channel delivery, among the deliveries `channel.status` lists). An id that is
itself a match wins over the longer ids it is a prefix of (a run id chosen by
a client may be anything). No match exits 1 with what such ids look like
("no run matches 'abc' (run ids look like run_01m8vs3a…; …)"), several exit 2
with the candidates listed, one per line, at most ten.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from piwf_actors.cli.refused import Refused
from piwf_actors.ids import new_id

#: Generated ids: `new_id` / `derived_id` (kind + 26 base32; an older host's restart: 26 hex) and a request id
#: (32 hex).
FULL_ID = {
    "run": re.compile(r"run_[0-9a-z]{26}"),
    "request": re.compile(r"req_[0-9a-f]{32}"),
    "effect": re.compile(r"r?eff_[0-9a-z]{26}"),  # a run's effect, or a resource's (reff_)
    "message": re.compile(r"msg_[0-9a-z]{26}"),
    "delivery": re.compile(r"chf_[0-9a-z]{26}-[0-9]+"),
}
NOUNS = {"run": "run", "request": "request", "effect": "effect", "message": "message",
         "delivery": "ambiguous delivery"}
#: The kind each id starts with, which an argument may leave out.
KIND_PREFIX = {"run": "run_", "request": "req_", "effect": "eff_", "message": "msg_", "delivery": "chf_"}
#: What marks the end of an id (piwf-top cuts ids at the front).
ELLIPSES = ("…", "...")
#: How many candidates an ambiguous prefix lists.
CANDIDATES = 10
#: A bare argument this long that starts no id is also tried as an id's end (piwf-top shows 19 characters
#: of one); a shorter one only with `…` or `...` before it.
SUFFIX_MIN = 8


class NoMatch(Exception):
    """No id of the kind starts with the prefix (exit 1)."""

    def __init__(self, kind: str, prefix: str) -> None:
        super().__init__(f"no {NOUNS.get(kind, kind)} matches {prefix!r}{hint(kind)}")
        self.kind, self.prefix = kind, prefix


def hint(kind: str) -> str:
    """What ids of `kind` look like (a run id starts with the time it was made: now's is shown)."""
    head = KIND_PREFIX.get(kind)
    if head is None:
        return ""
    if kind == "request":
        example = f"{head}c7650159…"
    else:
        example = new_id(head[:-1])[:len(head) + 10] + "…"
    return f" ({NOUNS.get(kind, kind)} ids look like {example}; give the start of one, with or without {head}, " \
           "or its end)"


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


def tries(kind: str, value: str) -> list[tuple[str, str]]:
    """The lookups `value` may stand for, in order: ("prefix" | "suffix", text). `…end` is an end only;
    one that starts with its kind (`run_…`) is a start only; otherwise the value as typed, then with its
    kind put in front, then, for a value of SUFFIX_MIN characters or more, as an id's end (the host
    scans every id for an end: not worth it for a short typo, and a few characters end many ids)."""
    for mark in ELLIPSES:
        if value.startswith(mark) and len(value) > len(mark):
            return [("suffix", value[len(mark):])]
    found = [("prefix", value)]
    head = KIND_PREFIX.get(kind)
    if head is not None and value.startswith(head):
        return found  # written as an id's start
    if head is not None:
        found.append(("prefix", head + value))
    if len(value) >= SUFFIX_MIN:
        found.append(("suffix", value))
    return found


def resolve(client: Any, kind: str, value: str) -> str:
    """The full id of `kind` (run, request, effect, message) that `value` names, asking the host
    (`ids.match`) unless `value` already has a full id's shape. A host without `ids.match` takes `value`
    as given; one without ends (`suffix`) matches starts only."""
    if is_full(kind, value) or not value:
        return value
    for how, text in tries(kind, value):
        answer = client.request("ids.match", {"kind": kind, how: text, "limit": CANDIDATES})
        if not answer.ok:
            error = answer.error or ""
            if answer.outcome == "rejected" and "is not available" in error:
                return value  # an older host: let the operation itself say whether the id exists
            if answer.outcome == "rejected" and "unknown payload field" in error:
                continue  # an older host that matches starts only
            raise Refused(answer)
        matches, more = list(answer.receipt["matches"]), bool(answer.receipt["more"])
        if matches:
            return pick(kind, text, matches, more)
    raise NoMatch(kind, value)


def resolve_among(kind: str, value: str, candidates: Iterable[str]) -> str | None:
    """The candidate `value` names (exact, or the only one it starts or ends, see `tries`); None when
    none does (the caller then passes `value` on unchanged); Ambiguous for several."""
    if is_full(kind, value):
        return value
    every = set(candidates)
    for how, text in tries(kind, value):
        matches = sorted(c for c in every if (c.startswith(text) if how == "prefix" else c.endswith(text)))
        if matches:
            return pick(kind, text, matches, False)
    return None
