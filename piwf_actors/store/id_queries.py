"""Id lookups for `ids.match`: the full ids of a kind that start with what a person typed (`piwf show
run_01m8`, or `01m8` with the kind left out: cli/ids.py puts it back), or that end with it (`piwf show
…2mvr1rtt`, as piwf-top shows ids). Served by the host (protocol/catalog/content.py) and by `piwf`
reading a stopped host's database (cli/offline.py)."""

from __future__ import annotations

from piwf_actors.store.reader import StoreReader

#: What `ids.match` (and `piwf`'s id prefixes) can look up: kind → (table, id column).
ID_KINDS = {"run": ("run", "run_id"), "request": ("interactive_request", "request_id"),
            "effect": ("effect", "effect_id"), "message": ("session_message", "message_id")}
#: `ids.match`: matches returned when the request names no limit, and at most.
ID_MATCH_DEFAULT, ID_MATCH_MAX = 10, 100


def match_ids(reader: StoreReader, kind: str, prefix: str, limit: int = 10) -> tuple[list[str], bool]:
    """Ids of `kind` (see ID_KINDS) that start with `prefix`, in id order: (the first `limit`, more?).

    A range scan of the primary key: ids start with `prefix` exactly when they sort at or after it and
    before the prefix with its last character bumped by one."""
    table, column = ID_KINDS[kind]
    if not prefix:
        return [], False
    last = ord(prefix[-1])
    if last < 0xD7FF:
        rows = reader.all(f"SELECT {column} FROM {table} WHERE {column} >= ? AND {column} < ? ORDER BY {column} "
                          "LIMIT ?", (prefix, prefix[:-1] + chr(last + 1), limit + 1))
    else:  # no simple upper bound (surrogates, the last code point): compare the prefix itself
        rows = reader.all(f"SELECT {column} FROM {table} WHERE {column} >= ? AND substr({column}, 1, ?) = ? "
                          f"ORDER BY {column} LIMIT ?", (prefix, len(prefix), prefix, limit + 1))
    ids = [row[0] for row in rows]
    return ids[:limit], len(ids) > limit


def match_id_ends(reader: StoreReader, kind: str, suffix: str, limit: int = 10) -> tuple[list[str], bool]:
    """Ids of `kind` that end with `suffix` (piwf-top shows the end of an id), in id order: (the first
    `limit`, more?). A scan of the key column: for a person typing an id, not for a hot path."""
    table, column = ID_KINDS[kind]
    if not suffix:
        return [], False
    rows = reader.all(f"SELECT {column} FROM {table} WHERE length({column}) >= ? AND "
                      f"substr({column}, length({column}) - ? + 1) = ? ORDER BY {column} LIMIT ?",
                      (len(suffix), len(suffix), suffix, limit + 1))
    ids = [row[0] for row in rows]
    return ids[:limit], len(ids) > limit
