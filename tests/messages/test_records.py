"""records: WireRecord conversion, validation against annotations, RecordRegistry."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pytest

from piwf_actors.errors import DecodeError
from piwf_actors.messages import INT_MAX, INT_MIN, RecordRegistry, WireRecord, pack

registry = RecordRegistry()


@registry.register
@dataclass(frozen=True, slots=True)
class StartRun(WireRecord):
    KIND: ClassVar[str] = "run.start"

    workflow: str
    input: Any
    attempts: int
    weight: float
    dry_run: bool
    token: bytes
    options: dict[str, Any]
    tags: tuple[str, ...]
    limits: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    project_path: str | None = None
    priority: Literal["low", "high", 3] = "low"
    parent: Ref | None = None  # defined below: resolved on first use
    children: tuple[Ref, ...] = ()


@registry.register
@dataclass(frozen=True, slots=True)
class Ref(WireRecord):
    KIND: ClassVar[str] = "ref"

    run_id: str
    revision: int = 0


@registry.register
@dataclass(frozen=True, slots=True)
class Tree(WireRecord):
    KIND: ClassVar[str] = "tree"

    label: str
    children: tuple[Tree, ...] = ()


@registry.register
@dataclass(frozen=True, slots=True)
class Limited(WireRecord):
    """Ranges are checked in __post_init__; from_wire turns the error into DecodeError."""

    KIND: ClassVar[str] = "limited"

    limit: int

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= 1000:
            raise ValueError(f"limit {self.limit} outside 1..1000")


@registry.register
@dataclass(frozen=True, slots=True)
class Flags(WireRecord):
    KIND: ClassVar[str] = "flags"

    exact: Literal[1, True, None]
    anything: Any = None
    maybe_any: Any | None = None
    plain_list: list = field(default_factory=list)  # type: ignore[type-arg]
    plain_tuple: tuple = ()  # type: ignore[type-arg]
    plain_dict: dict = field(default_factory=dict)  # type: ignore[type-arg]


protocol = RecordRegistry(tag_key="type")


@protocol.register
@dataclass(frozen=True, slots=True)
class Hello(WireRecord):
    KIND: ClassVar[str] = "hello"
    TAG_KEY: ClassVar[str] = "type"

    connection_id: str
    host_epoch: int
    schema: Literal["piwf.client.v1"] = "piwf.client.v1"


@dataclass(frozen=True, slots=True)
class BadAnnotation(WireRecord):
    KIND: ClassVar[str] = "bad"

    when: set[int]


@dataclass(frozen=True, slots=True)
class BadUnion(WireRecord):
    KIND: ClassVar[str] = "bad-union"

    value: int | str


@dataclass(frozen=True, slots=True)
class IntKeys(WireRecord):
    KIND: ClassVar[str] = "int-keys"

    table: dict[int, str]


def make_start(**changes: Any) -> StartRun:
    base = StartRun(
        workflow="release",
        input={"version": "1.2", "list": [1, 2]},
        attempts=2,
        weight=0.5,
        dry_run=False,
        token=b"\x00\x01",
        options={"a": None},
        tags=("x", "y"),
        limits={"cpu": 2},
        notes=["n"],
        project_path="/p",
        priority="high",
        parent=Ref("r-1", 4),
        children=(Ref("r-2"), Ref("r-3", 1)),
    )
    return dataclasses.replace(base, **changes)


def wire_of(**changes: Any) -> dict[str, Any]:
    return make_start().to_wire() | changes


# --- conversion ------------------------------------------------------------------


def test_to_wire_shape() -> None:
    wire = make_start().to_wire()
    assert wire["kind"] == "run.start"
    assert wire["tags"] == ["x", "y"]
    assert wire["parent"] == {"kind": "ref", "run_id": "r-1", "revision": 4}
    assert wire["children"] == [
        {"kind": "ref", "run_id": "r-2", "revision": 0},
        {"kind": "ref", "run_id": "r-3", "revision": 1},
    ]
    assert wire["project_path"] == "/p"
    # Every field travels, None included.
    assert set(wire) == {"kind"} | {f.name for f in dataclasses.fields(StartRun)}


def test_roundtrip_keeps_equality_and_types() -> None:
    record = make_start()
    back = registry.roundtrip(record)
    assert back == record
    assert type(back.tags) is tuple
    assert type(back.notes) is list
    assert type(back.children[0]) is Ref


def test_roundtrip_with_defaults_and_nones() -> None:
    record = make_start(parent=None, project_path=None, children=(), limits={}, notes=[])
    assert registry.roundtrip(record) == record


def test_optional_fields_may_be_absent() -> None:
    wire = {
        k: v
        for k, v in wire_of().items()
        if k not in {"limits", "notes", "project_path", "priority", "parent", "children"}
    }
    record = StartRun.from_wire(wire)
    assert record.project_path is None
    assert record.priority == "low"
    assert record.children == ()


def test_records_have_slots() -> None:
    assert not hasattr(make_start(), "__dict__")


def test_self_referencing_record() -> None:
    tree = Tree("root", (Tree("a"), Tree("b", (Tree("c"),))))
    assert registry.roundtrip(tree) == tree


def test_float_field_takes_ints() -> None:
    record = StartRun.from_wire(wire_of(weight=3))
    assert record.weight == 3.0
    assert type(record.weight) is float


def test_int_range_bounds() -> None:
    assert StartRun.from_wire(wire_of(attempts=INT_MAX)).attempts == INT_MAX
    assert StartRun.from_wire(wire_of(attempts=INT_MIN)).attempts == INT_MIN
    for value in (INT_MAX + 1, INT_MIN - 1):
        with pytest.raises(DecodeError, match="attempts: int outside"):
            StartRun.from_wire(wire_of(attempts=value))
    with pytest.raises(DecodeError, match="weight: int outside"):
        StartRun.from_wire(wire_of(weight=INT_MAX + 1))


def test_protocol_tag_key() -> None:
    hello = Hello("c-1", 7)
    assert hello.to_wire() == {"type": "hello", "connection_id": "c-1", "host_epoch": 7, "schema": "piwf.client.v1"}
    assert protocol.roundtrip(hello) == hello
    with pytest.raises(DecodeError, match="schema"):
        protocol.decode({"type": "hello", "connection_id": "c", "host_epoch": 1, "schema": "piwf.client.v2"})


def test_any_and_plain_containers() -> None:
    record = Flags(
        exact=None,
        anything={"x": [1, b"2"]},
        maybe_any=[1],
        plain_list=[1, "a"],
        plain_tuple=(1,),
        plain_dict={"k": [1]},
    )
    assert registry.roundtrip(record) == record


# --- refusals -------------------------------------------------------------------------


def test_missing_required_field() -> None:
    wire = wire_of()
    del wire["workflow"]
    with pytest.raises(DecodeError, match=r"invalid run.start record: workflow: missing"):
        StartRun.from_wire(wire)


def test_extra_field() -> None:
    with pytest.raises(DecodeError, match="surprise: unexpected field"):
        StartRun.from_wire(wire_of(surprise=1))


def test_extra_field_in_nested_record() -> None:
    parent = {"kind": "ref", "run_id": "r", "revision": 1, "extra": 2}
    with pytest.raises(DecodeError, match=r"parent\.extra: unexpected field"):
        StartRun.from_wire(wire_of(parent=parent))


def test_wrong_or_missing_kind() -> None:
    with pytest.raises(DecodeError, match="kind: expected 'run.start', got 'ref'"):
        StartRun.from_wire(wire_of(kind="ref"))
    wire = wire_of()
    del wire["kind"]
    with pytest.raises(DecodeError, match="kind: missing"):
        StartRun.from_wire(wire)
    with pytest.raises(DecodeError, match="kind: expected"):
        StartRun.from_wire(wire_of(kind=["run.start"]))


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("workflow", 1, "workflow: expected str, got int"),
        ("workflow", b"release", "workflow: expected str, got bytes"),
        ("attempts", True, "attempts: expected int, got bool"),
        ("attempts", 1.0, "attempts: expected int, got float"),
        ("weight", True, "weight: expected float, got bool"),
        ("weight", "1", "weight: expected float, got str"),
        ("dry_run", 1, "dry_run: expected bool, got int"),
        ("token", "ab", "token: expected bytes, got str"),
        ("options", [], "options: expected map, got array"),
        ("tags", "xy", "tags: expected array, got str"),
        ("tags", ["x", 2], r"tags\[1\]: expected str, got int"),
        ("limits", {"cpu": "2"}, r"limits\['cpu'\]: expected int, got str"),
        ("notes", [None], r"notes\[0\]: expected str, got nil"),
        ("project_path", 5, "project_path: expected str, got int"),
        ("priority", "urgent", "priority: expected one of 'low', 'high', 3, got 'urgent'"),
        ("priority", [], "priority: expected one of"),
        ("parent", "r-1", "parent: expected a map, got str"),
        ("parent", {"kind": "ref", "run_id": 1}, r"parent\.run_id: expected str, got int"),
        ("children", [{"kind": "ref"}], r"children\[0\]\.run_id: missing"),
        ("children", [{"kind": "tree", "label": "x"}], r"children\[0\]\.kind: expected 'ref', got 'tree'"),
    ],
)
def test_wrong_types_name_the_field(name: str, value: Any, expected: str) -> None:
    with pytest.raises(DecodeError, match=rf"^invalid run.start record: {expected}"):
        StartRun.from_wire(wire_of(**{name: value}))


def test_literal_does_not_confuse_bool_and_int() -> None:
    assert Flags.from_wire({"kind": "flags", "exact": 1}).exact == 1
    assert Flags.from_wire({"kind": "flags", "exact": True}).exact is True
    with pytest.raises(DecodeError, match="exact: expected one of"):
        Flags.from_wire({"kind": "flags", "exact": False})
    with pytest.raises(DecodeError, match="exact: expected one of"):
        Flags.from_wire({"kind": "flags", "exact": 1.0})


def test_post_init_errors_become_decode_errors() -> None:
    assert Limited.from_wire({"kind": "limited", "limit": 5}).limit == 5
    with pytest.raises(DecodeError, match="limit 0 outside 1..1000"):
        Limited.from_wire({"kind": "limited", "limit": 0})


@pytest.mark.parametrize("data", [None, [], "run.start", b"", 1])
def test_from_wire_needs_a_map(data: Any) -> None:
    with pytest.raises(DecodeError, match="expected a map"):
        StartRun.from_wire(data)


def test_non_str_key_in_handbuilt_map() -> None:
    with pytest.raises(DecodeError, match="unexpected field"):
        Ref.from_wire({"kind": "ref", "run_id": "r", 1: 2})


def test_messages_are_one_line_and_short() -> None:
    with pytest.raises(DecodeError) as caught:
        StartRun.from_wire(wire_of(kind="x\n" * 1000))
    message = str(caught.value)
    assert "\n" not in message
    assert len(message) < 300


# --- registry ---------------------------------------------------------------------------


def test_registry_dispatches_on_kind() -> None:
    assert registry.decode({"kind": "ref", "run_id": "r"}) == Ref("r")
    assert registry.decode(make_start().to_wire()) == make_start()


@pytest.mark.parametrize("data", [{"kind": "nope"}, {}, {"kind": 1}, {"kind": None}, {"kind": ["ref"]}, [], "ref"])
def test_registry_refuses_unknown_kinds(data: Any) -> None:
    with pytest.raises(DecodeError):
        registry.decode(data)


def test_register_refuses_misuse() -> None:
    local = RecordRegistry()

    class NotDataclass(WireRecord):
        KIND: ClassVar[str] = "x"

    with pytest.raises(TypeError, match="not a dataclass"):
        local.register(NotDataclass)

    with pytest.raises(TypeError, match="KIND"):

        @local.register
        @dataclass(frozen=True, slots=True)
        class NoKind(WireRecord):
            value: int

    with pytest.raises(TypeError, match="tagged by 'type'"):
        local.register(Hello)

    # Registering the same class twice is harmless; another class of that kind is not.
    assert local.register(Ref) is Ref
    assert local.register(Ref) is Ref
    with pytest.raises(TypeError, match="already registered to Ref"):

        @local.register
        @dataclass(frozen=True, slots=True)
        class Duplicate(WireRecord):
            KIND: ClassVar[str] = "ref"


def test_register_below_dataclass_is_refused() -> None:
    local = RecordRegistry()
    with pytest.raises(TypeError, match="above @dataclass"):

        @dataclass(frozen=True, slots=True)
        @local.register
        class Wrong(WireRecord):
            KIND: ClassVar[str] = "wrong"


def test_roundtrip_needs_the_registered_class() -> None:
    with pytest.raises(TypeError, match="not registered"):
        RecordRegistry().roundtrip(Ref("r"))


@pytest.mark.parametrize(
    ("cls", "match"),
    [(BadAnnotation, "unsupported annotation"), (BadUnion, "only X | None"), (IntKeys, "keys must be str")],
)
def test_unsupported_annotations_fail_loudly_on_first_use(cls: type[WireRecord], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        cls.from_wire({"kind": cls.KIND})


def test_to_wire_output_packs() -> None:
    assert pack(make_start().to_wire())
