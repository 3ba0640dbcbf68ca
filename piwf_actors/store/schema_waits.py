"""The tables of waiting runs (schema v14): a waiting node's wait, and a run's mailbox (docs/durability.md
"Waiting, children and flow control"). Listed in store/schema.py with every other table."""

from __future__ import annotations

import peewee as pw

from piwf_actors.store.schema_base import Base


class RunWait(Base):
    """What a waiting node waits for (schema v14): a sleep's wake-up, a message on a topic, its child runs.

    `pending` until its condition holds, then `settled` with the node's `result` (JSON: outcome,
    output, error), in the transaction that made the condition true; `consumed` by the
    `node_finished` that completes the node, so a wait completes its node once. `wake_at` is when
    a timer settles it (a sleep's wake-up, a message wait's timeout); a message wait's clock stands
    still while its run is paused (`paused_remaining_s`), a sleep's does not. `children_open`
    counts the children that have not ended.
    """

    wait_id = pw.TextField(primary_key=True)
    run_id = pw.TextField()
    node_id = pw.TextField()
    attempt_id = pw.TextField()
    kind = pw.TextField()  # sleep | message | children
    status = pw.TextField()  # pending | settled | consumed | cancelled
    wake_at = pw.FloatField(null=True)
    paused_remaining_s = pw.FloatField(null=True)
    topic = pw.TextField(null=True)
    detail = pw.TextField(null=True)  # JSON: the kind's options (a default, the children's shape)
    result = pw.TextField(null=True)  # JSON, once settled (inline when small; else `result_sha256`)
    result_sha256 = pw.TextField(null=True)
    children_total = pw.IntegerField(default=0)
    children_open = pw.IntegerField(default=0)
    created_at = pw.FloatField()
    settled_at = pw.FloatField(null=True)
    consumed_at = pw.FloatField(null=True)

    class Meta:
        table_name = "run_wait"
        indexes = ((("run_id", "node_id"), False),)


class RunMessage(Base):
    """A message in a run's mailbox (schema v14): `pending` until a `wait_message` on its topic consumes
    it (`consumed`, naming the wait), once, in `seq` order per run. `message_id` derives from the
    sender's key, so a message sent again under the same key is the same row."""

    message_id = pw.TextField(primary_key=True)
    run_id = pw.TextField()
    topic = pw.TextField()
    seq = pw.IntegerField()
    status = pw.TextField()  # pending | consumed
    payload_json = pw.TextField(null=True)
    payload_sha256 = pw.TextField(null=True)
    sender = pw.TextField()  # JSON: who sent it (a client and its process, or a run's node)
    wait_id = pw.TextField(null=True)
    created_at = pw.FloatField()
    consumed_at = pw.FloatField(null=True)

    class Meta:
        table_name = "run_message"
        indexes = ((("run_id", "topic", "status", "seq"), False),)
