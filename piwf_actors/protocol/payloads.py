"""Payload checks per operation: required and optional fields with their types.

The fields come from the operation's entry in `catalog.OPERATIONS`; a field
spec is (type name, required). Unknown fields are refused so a typo never
silently means "not given". The value fields (`any`, `map`: a run's input, a
message, an answer, a submission, an effect's output, a resource's spec) are
checked here, for every operation at once, to be values a run can hold and
every view can show (`json_values.json_value_problem`: JSON, nested at most
`MAX_VALUE_DEPTH` deep): a bad one is refused at the door in one line and
never reaches a writer. A field named `*_id` is an identifier: at most
`MAX_ID_LEN` characters, as in the envelope (`run_id` also of a fixed alphabet).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from piwf_actors.json_values import json_value_problem
from piwf_actors.protocol.envelope import MAX_ID_LEN, BadRequest, Request, is_int, non_finite_path

if TYPE_CHECKING:
    # Only the entry's type: importing the catalog package runs its topic modules, and the catalog
    # imports this module (`write_command`).
    from piwf_actors.protocol.catalog.registry import Operation

#: A run id a client chooses must be one the envelope can carry back.
RUN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "int": is_int,
    "signed": is_int,
    "num": lambda v: (is_int(v) or isinstance(v, float)),
    "bool": lambda v: isinstance(v, bool),
    "any": lambda v: True,
    "map": lambda v: isinstance(v, dict),
    "bin": lambda v: isinstance(v, bytes),
}
#: The integers each numeric kind takes: `int` counts and offsets (never negative), `signed` and `num` a
#: number of either sign (a priority, a time); all within what a JSON reader keeps exact, and so within
#: what a database column holds (a larger integer overflowed SQLite's in a query).
_INT_RANGES = {"int": (0, 2**53), "signed": (-(2**53), 2**53), "num": (-(2**53), 2**53)}
#: The type names of value fields: checked with `json_value_problem` besides their type.
_VALUE_KINDS = frozenset({"any", "map"})


def check_payload(request: Request, operation: Operation) -> dict[str, Any]:
    """The request's payload once it fits `operation` (and its envelope has what it needs); else BadRequest."""
    payload, spec = request.payload, operation.payload
    extra = sorted(set(payload) - set(spec))
    if extra:
        raise BadRequest(f"{request.operation}: unknown payload field(s): {', '.join(extra)}", request.request_id)
    for name, (kind, required) in spec.items():
        if name not in payload or payload[name] is None:
            if required:
                raise BadRequest(f"{request.operation}: payload.{name} is required", request.request_id)
            continue
        if not _CHECKS[kind](payload[name]):
            raise BadRequest(f"{request.operation}: payload.{name} must be of type {kind}", request.request_id)
        if kind in _INT_RANGES and is_int(payload[name]) and not (
                _INT_RANGES[kind][0] <= payload[name] <= _INT_RANGES[kind][1]):
            raise BadRequest(f"{request.operation}: payload.{name} is out of range", request.request_id)
        if kind == "str" and "\x00" in payload[name]:
            # PostgreSQL text cannot hold NUL: refused here, on either engine, not as a failed query.
            raise BadRequest(f"{request.operation}: payload.{name} may not contain a NUL character",
                             request.request_id)
        if kind == "str" and name.endswith("_id") and len(payload[name]) > MAX_ID_LEN:
            # Ids are kept in rows and travel in every frame about their request or run.
            raise BadRequest(f"{request.operation}: payload.{name} must be at most {MAX_ID_LEN} characters",
                             request.request_id)
        if kind in _VALUE_KINDS:
            problem = json_value_problem(payload[name], f"payload.{name}")
            if problem is not None:
                raise BadRequest(f"{request.operation}: {problem}", request.request_id)
    run_id = payload.get("run_id")
    if isinstance(run_id, str) and not RUN_ID.fullmatch(run_id):
        raise BadRequest(f"{request.operation}: payload.run_id must be 1-200 characters of letters, digits "
                         "and _.:-", request.request_id)
    # The value fields were walked above; the others hold one scalar each by now.
    bad_float = non_finite_path({name: value for name, value in payload.items() if spec[name][0] not in _VALUE_KINDS})
    if bad_float is not None:
        raise BadRequest(f"{request.operation}: {bad_float} is NaN or infinite, which cannot be stored",
                         request.request_id)
    if operation.needs_run and request.run_id is None:
        raise BadRequest(f"{request.operation} needs run_id in the request envelope", request.request_id)
    if operation.needs_revision and request.expected_revision is None:
        raise BadRequest(f"{request.operation} needs expected_revision in the request envelope", request.request_id)
    return payload
