"""`returned_report`: a compute node's output that fails a check raises (the engine retries and
routes it like any failure); an action's says its effect was applied, for each check — shape,
a value a run can hold (json_values.py), a wire value, size — keeping the output with the effect only
when it is such a value that fits.
(tests/integration/test_typed_io.py runs the same through a real host and counts executions.)"""

from __future__ import annotations

import re
from typing import Any

import pytest

from piwf_actors.errors import EncodeError
from piwf_actors.json_values import MAX_VALUE_DEPTH
from piwf_actors.worker.output_check import MAX_OUTPUT_BYTES, OutputInvalid, OutputTooLarge, returned_report
from piwf_actors.workflows import action, compute, define_workflow

APPLIED = "; the effect was applied, so the node is not retried"


def _spec(kind: str) -> Any:
    make = action if kind == "action" else compute
    # Built through a workflow: `output=int` becomes its checked shape there.
    return define_workflow(name="w", start_at="n", nodes={"n": make(run=lambda ctx: 0, output=int)},
                           edges=[]).nodes["n"]


def test_an_output_that_passes_every_check_is_the_result() -> None:
    assert returned_report(_spec("action"), 3) == {"outcome": "ok", "output": 3}
    assert returned_report(_spec("compute"), 3) == {"outcome": "ok", "output": 3}


@pytest.mark.parametrize(("output", "error"), [
    ("three", OutputInvalid), ({1, 2}, OutputInvalid), ([b"x"], OutputInvalid), (2**70, EncodeError),
    ("x" * (MAX_OUTPUT_BYTES + 1), OutputTooLarge)])
def test_a_compute_node_output_that_fails_a_check_raises(output: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        returned_report(_spec("compute"), output)


def test_an_action_output_that_fails_a_check_reports_its_effect_applied() -> None:
    action_spec = _spec("action")
    assert returned_report(action_spec, "three") == {
        "outcome": "failed", "error_code": "output_invalid", "effect_applied": True, "effect_output": "three",
        "error": "output: expected integer, got string" + APPLIED}
    assert returned_report(action_spec, {"receipt": {1, 2}}) == {
        "outcome": "failed", "error_code": "output_invalid", "effect_applied": True,
        "error": "output.receipt holds a value of type set; values are JSON: text, finite numbers, true/false, "
                 "null, lists and maps with text keys" + APPLIED}
    too_deep: Any = 0
    for _ in range(MAX_VALUE_DEPTH + 1):
        too_deep = [too_deep]
    deep = returned_report(action_spec, too_deep)
    assert deep["error_code"] == "output_invalid" and "effect_output" not in deep, deep
    assert f"nests deeper than {MAX_VALUE_DEPTH}" in deep["error"], deep
    too_large = returned_report(action_spec, "x" * (MAX_OUTPUT_BYTES + 1))
    message = too_large.pop("error")
    assert too_large == {"outcome": "failed", "error_code": "output_too_large", "effect_applied": True}
    assert re.fullmatch(rf"output of \d+ bytes exceeds the limit of {MAX_OUTPUT_BYTES} bytes{APPLIED}", message)
