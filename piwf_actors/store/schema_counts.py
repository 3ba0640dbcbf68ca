"""The run counters (schema v5): one row per status, kept exact by triggers on `run`. Listed in
store/schema.py with every other table; PostgreSQL's triggers and shards are in store/engines/pg_schema.py."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class RunCount(Base):
    """How many runs are in each status (schema v5): what `host.status` and the metrics gauge read,
    instead of counting the `run` table on every call.

    Kept exact by the triggers in `RUN_COUNT_TRIGGERS`, inside the same transaction as the change
    to `run`, whoever makes it: a count can never drift from the rows, and no write command needs
    to know the counters exist. A status that no run has any more keeps its row with n = 0.
    `state.verify` compares every row with a real count (`run_count_mismatch`).
    """

    status = pw.TextField(primary_key=True)
    n = pw.IntegerField()

    class Meta:
        table_name = "run_count"
        without_rowid = True  # a handful of rows, looked up by status: one b-tree


def _count_change(status: str, delta: int) -> str:
    return (f"INSERT INTO run_count (status, n) VALUES ({status}, {delta}) "
            f"ON CONFLICT (status) DO UPDATE SET n = n + ({delta});")  # SQLite's; PostgreSQL: store/engines/pg_schema.py


#: The triggers that keep `run_count` exact, by name (created by migration v5, which also counts the
#: runs already there). An UPDATE that leaves the status as it was (most of a running run's
#: updates) costs nothing: the WHEN clause skips it.
RUN_COUNT_TRIGGERS: dict[str, str] = {
    "run_count_insert": f"""CREATE TRIGGER IF NOT EXISTS run_count_insert AFTER INSERT ON run
        BEGIN {_count_change("NEW.status", 1)} END""",
    "run_count_update": f"""CREATE TRIGGER IF NOT EXISTS run_count_update AFTER UPDATE OF status ON run
        WHEN OLD.status IS NOT NEW.status
        BEGIN {_count_change("OLD.status", -1)} {_count_change("NEW.status", 1)} END""",
    "run_count_delete": f"""CREATE TRIGGER IF NOT EXISTS run_count_delete AFTER DELETE ON run
        BEGIN {_count_change("OLD.status", -1)} END""",
}
