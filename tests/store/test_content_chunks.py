"""`content.read`'s store query on both engines: a chunk past the end of a value is empty."""

from __future__ import annotations

from piwf_actors.store import queries
from piwf_actors.store.blobs import put_blob
from piwf_actors.store.database import open_store
from piwf_actors.store.reader import StoreReader


def test_a_chunk_at_or_past_the_end_of_a_value_is_empty_on_both_engines(database) -> None:
    """An offset of 2**31 - 1 overflowed PostgreSQL's `substr` (an int4) and failed the read as a host
    bug (the protocol fuzz found it); past the end, a chunk is empty, as on SQLite."""
    db = open_store(database)
    try:
        with db.atomic():
            key = put_blob(db.connection(), b"0123456789", 0.0)
    finally:
        db.close()
    reader = StoreReader(database)
    try:
        assert queries.content_chunk(reader, key, 4, 3) == {"digest": key, "offset": 4, "total_bytes": 10,
                                                            "data": b"456"}
        for offset in (10, 11, 2**31 - 1, 2**53):
            assert queries.content_chunk(reader, key, offset) == {"digest": key, "offset": offset,
                                                                  "total_bytes": 10, "data": b""}
        assert queries.content_chunk(reader, "no-such-digest", 0) is None
    finally:
        reader.close()
