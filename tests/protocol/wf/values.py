"""Workflows for the bad-value tests (test_bad_values.py; started by file path, never imported).

- `echo`: outputs its input as it came;
- `wrap`: outputs its input inside a list (one level deeper than it came);
- `fan`: two children `echo` of its input, outputs their outputs (one level deeper than the input);
- `returns_bytes`, `sends_bytes`: a node that returns, or sends as a message, binary data;
- `waits`: waits for a message on `go` and outputs it.
"""

from __future__ import annotations

from piwf_actors.workflows import compute, define_workflow, map_workflow, wait_message

echo = define_workflow(name="echo", start_at="same", nodes={"same": compute(run=lambda ctx: ctx.input)}, edges=[])

wrap = define_workflow(name="wrap", start_at="deeper", nodes={"deeper": compute(run=lambda ctx: [ctx.input])},
                       edges=[])

fan = define_workflow(name="fan", start_at="each",
                      nodes={"each": map_workflow(echo, items=lambda ctx: [ctx.input, ctx.input])}, edges=[])

returns_bytes = define_workflow(name="returns-bytes", start_at="raw",
                                nodes={"raw": compute(run=lambda ctx: {"blob": b"\x00\x01"})}, edges=[])


def _send_bytes(ctx):
    return ctx.send_message(ctx.run_id, "note", {"blob": b"\x00\x01"})


sends_bytes = define_workflow(name="sends-bytes", start_at="send", nodes={"send": compute(run=_send_bytes)},
                              edges=[])

waits = define_workflow(name="waits", start_at="take", nodes={"take": wait_message("go")}, edges=[])
