"""The immutable workflow model the engine consumes.

Every class here is a frozen dataclass. Helpers (`compute`, `shell`, …) build
node specs holding the user's raw arguments; `define_workflow` validates and
normalizes them (numbers become floats, dicts become read-only mappings,
lists become tuples) before they enter a `Workflow`, so a `Workflow` only
ever holds checked, normalized specs.

`NodeSpec` is the base of every node kind's spec; each kind's spec, helper,
checks, description and drawing live in its own module of `workflows/kinds/`.
The parts of a decision (`Choice`, `TextInput`, `DecisionTimeout`) stay here:
their qualified names are part of stored definition digests (`digest.py`).

Mappings inside the model are `types.MappingProxyType` views over private
copies; JSON-shaped payloads (a decision's `request`, an agent's schema) are
deep-frozen with `freeze` and turned back into plain dicts/lists with `thaw`
before they are encoded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

#: Route target meaning "the run (or the enclosing include) ends here".
END = "$end"

Callback = Callable[..., Any]


def freeze(value: Any) -> Any:
    """A deep read-only copy of a JSON-shaped value (dict → mappingproxy, list → tuple)."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """The inverse of `freeze`: plain dicts and lists, safe to JSON/msgpack-encode."""
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(item) for item in value]
    return value


def is_number(value: Any) -> bool:
    """True for finite ints and floats; bool is not a number here."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


#: The longest duration a definition takes (a sleep, a timeout, a back-off): 100 years. A longer one is
#: a mistake (`sleep(1e300)`) whose end no screen could write as a date.
MAX_DURATION_S = 100 * 365.25 * 86400


def duration_problem(value: Any, *, positive: bool) -> str | None:
    """What is wrong with `value` as a duration in seconds, worded to follow "… must be" (`a finite
    number of seconds, got inf`); None when it is a finite number in range (> 0 when `positive`, else
    >= 0, and at most MAX_DURATION_S)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"a number of seconds, got {type(value).__name__}"
    if not math.isfinite(value):
        return f"a finite number of seconds, got {value!r}"
    if value < 0 or (positive and value == 0):
        return f"a {'positive' if positive else 'non-negative'} number of seconds, got {value!r}"
    if value > MAX_DURATION_S:
        return f"at most 100 years ({int(MAX_DURATION_S)} s), got {value!r}"
    return None


# --- node specs (the kinds' own: workflows/kinds/) ------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeSpec:
    """Options every node kind has.

    `kind` and `has_side_effect` are per class. `mount` is the qualified id of
    the innermost include the node belongs to (None for top-level nodes); the
    engine passes it through `node_context`, it never has to read it itself.
    """

    kind: ClassVar[str] = ""
    has_side_effect: ClassVar[bool] = False

    timeout_s: float | None = None
    retries: int = 0
    retry_backoff_s: float = 0.0
    idempotent: bool = True
    mount: str | None = None
    # The shape the node's output must have (frozen, `schema.py`); compute and action nodes take it
    # (`output=`), and the worker checks it after the node returns (worker/output_check.py).
    output_shape: Mapping[str, Any] | None = None
    # A named rate limiter (workflows/rate_limits.py) the node takes a start of before it runs: over
    # its budget the run parks until a start frees, holding no worker. None: no limit.
    rate: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TextInput:
    """A free-text field attached to a choice."""

    name: str
    prompt: str
    min_length: int = 0
    max_length: int = 4000


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """One answer of a human decision, optionally asking for text."""

    label: str
    input: TextInput | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DecisionTimeout:
    """The response a human decision takes by itself after `after_s` seconds (a number, or a callable
    of ctx evaluated in the worker when the request is made)."""

    after_s: Any  # float | Callback
    choice: str
    input: Mapping[str, str] | None = None

    def response(self) -> dict[str, Any]:
        """The response as the decision's output: `{choice, input?}`."""
        out: dict[str, Any] = {"choice": self.choice}
        if self.input is not None:
            out["input"] = dict(self.input)
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Include:
    """Definition-time only: mounts `workflow` under the node id it is given.

    Never appears in `Workflow.nodes`; `define_workflow` flattens it.
    `input(ctx)` computes the child's `ctx.input` from the enclosing scope.
    """

    workflow: Workflow
    input: Callback | None = None


# --- routes ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Edge:
    """Always go to `target` (a qualified node id or `END`)."""

    target: str


@dataclass(frozen=True, slots=True)
class Switch:
    """Go to `cases[key(value at on)]`, else `default`; see `routing.route`."""

    on: str
    cases: Mapping[str, str]
    default: str | None = None

    def targets(self) -> tuple[str, ...]:
        """Every target, default last, duplicates kept."""
        extra = (self.default,) if self.default is not None else ()
        return tuple(self.cases.values()) + extra


Route = Edge | Switch


@dataclass(frozen=True, slots=True)
class RouteDef:
    """Definition-time route: `source` is a node id or `"mount.exit"`."""

    source: str
    route: Route


# --- workflow -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mount:
    """Where an included workflow sits in the flattened node table.

    `mount_id` is qualified (`a/b`); `parent` is the enclosing mount's id or
    None; `start` is the qualified node an edge to the mount enters.
    """

    mount_id: str
    parent: str | None
    workflow_name: str
    start: str
    input: Callback | None = None


@dataclass(frozen=True, slots=True)
class Workflow:
    """A validated, flattened workflow. Build it with `define_workflow`.

    `nodes` and `routes` use qualified ids; a node absent from `routes` is
    terminal. `digest` is the hex sha256 of the structure and callable code
    (`workflows.digest`); `source_path`/`attr` say where it was loaded from
    and are not part of the digest.
    """

    name: str
    start_at: str
    nodes: Mapping[str, NodeSpec]
    routes: Mapping[str, Route]
    max_steps: int
    digest: str
    source_path: str | None = None
    attr: str | None = None
    description: str = ""
    mounts: Mapping[str, Mount] = field(default_factory=lambda: MappingProxyType({}))
    # At most `concurrency.max` active runs per key (a `waits.ConcurrencyLimit`, part of the digest).
    concurrency: Any = None
    # digest → attribute name of every workflow the module it was loaded from holds (set by
    # `load_snapshot`; not part of the digest): how a worker names the child workflow of a
    # `run_workflow` node so that the child run loads it from the same snapshot.
    namespace: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The shape a run's input must have (frozen, `schema.py`; from `define_workflow(input=…)`, part of
    # the digest): `run.start` refuses an input without it, a parent node a child input without it.
    input_shape: Mapping[str, Any] | None = None
    # A durable function workflow (`piwf_actors.durable.workflow`): the function the worker runs from the
    # top on every launch; its steps are the run's nodes (`nodes`, `routes` empty, `start_at` ""). None
    # for a graph workflow. Its code is part of the digest.
    function: Callback | None = None
    # Flow control by rate (workflows/rate_limits.py; part of the digest): a `RateLimit` on the run's
    # starts, a `Debounce` collapsing starts with one key. None when not declared.
    rate: Any = None
    debounce: Any = None
    # Started by events (`events.on_event`, `events.batch`; not part of the digest: they say when runs
    # start, not what a run does): the host's event keeper finds workflows that have one.
    on_event: Any = None
    batch: Any = None
