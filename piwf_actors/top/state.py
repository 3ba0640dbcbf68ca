"""What the person at `piwf-top` did, and the pure step that applies one key to it.

`UiState` is frozen plain data: focus (runs or decisions pane), selections,
sort, filter, whether the detail pane and the help overlay are open, a text
prompt or a confirmation in progress, and the status line.
`step(state, key, snapshot, page) -> (state, outcome)` is the only way it
changes; the outcome is `QUIT`, a `Command` to send, or None. Nothing here
does I/O, so tests drive the console key by key without a host or terminal.

Every mutating request (cancel, pause, resume, restart, effect.resolve,
decision.answer) first becomes a `Confirm` on the confirmation line
("cancel run run_01…? y/n"): `step` releases its `Command` only for `y`, and
any other key drops it — a single stray key never sends anything. A confirm
may offer alternatives (effect.resolve: confirm or retry), switched with
tab/←/→/h/l or the alternative's own hotkey (`c`, `r`) before `y`.

Fencing: a decision answer carries the request's revision as
`expected_revision`; a restart carries the run's revision from its last
`run.get` (`Snapshot.detail`). Both are captured when the key is pressed, so
a request or run that changed meanwhile is refused (`conflict`), never acted
on in a state the person did not see.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from piwf_actors.top.model import Snapshot, decision_choices, is_ambiguous

SORTS = ("newest", "status", "workflow", "duration")
TERMINAL = ("done", "failed", "cancelled")
STATUS_ORDER = {"parked": 0, "running": 1, "starting": 2, "queued": 3, "failed": 4, "cancelled": 5, "done": 6}
QUIT: Literal["quit"] = "quit"
MOVES = {"j": 1, "down": 1, "k": -1, "up": -1}


@dataclass(frozen=True, slots=True)
class Prompt:
    """A choice that needs text: what is being typed for it, before the answer is confirmed."""

    request_id: str
    choice: str
    input_name: str
    label: str
    buffer: str = ""


@dataclass(frozen=True, slots=True)
class Command:
    """One mutating request, exactly as it is sent once confirmed (an answer also gets a fresh submission id)."""

    operation: str
    what: str  # "cancel run run_01…": the confirmation question and the outcome line
    payload: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    expected_revision: int | None = None
    hotkey: str = ""  # picks this alternative on the confirmation line
    label: str = ""  # its name there


@dataclass(frozen=True, slots=True)
class Confirm:
    options: tuple[Command, ...]
    index: int = 0

    @property
    def command(self) -> Command:
        return self.options[self.index]


@dataclass(frozen=True, slots=True)
class UiState:
    focus: Literal["runs", "decisions"] = "runs"
    selected_run_id: str | None = None
    selected_request_id: str | None = None
    choice_index: int = 0
    sort: str = "newest"
    filter_text: str = ""
    filtering: bool = False  # `/` was pressed: keys go to `filter_text`
    detail_open: bool = False
    help_open: bool = False
    confirm: Confirm | None = None
    prompt: Prompt | None = None
    status: str = ""


Outcome = Command | Literal["quit"] | None


# --- the run list as shown: filtered, then sorted ------------------------------------------


def duration(run: dict[str, Any], now: float) -> float | None:
    """Seconds from creation to the end (or to `now` while it is not over)."""
    created = run.get("created_at")
    if not isinstance(created, (int, float)):
        return None
    end = run.get("finished_at")
    return max(0.0, (end if isinstance(end, (int, float)) else now) - created)


def matches(run: dict[str, Any], pattern: str) -> bool:
    """The filter: a run id prefix, a part of the workflow name, a status prefix or a part of the park reason."""
    pattern = pattern.strip().lower()
    if not pattern:
        return True
    return (str(run.get("run_id") or "").lower().startswith(pattern)
            or pattern in str(run.get("workflow") or "").lower()
            or str(run.get("status") or "").lower().startswith(pattern)
            or pattern in str(run.get("park_reason") or "").lower())


def visible_runs(snapshot: Snapshot, state: UiState) -> tuple[dict[str, Any], ...]:
    runs = [run for run in snapshot.runs if matches(run, state.filter_text)]

    def created(run: dict[str, Any]) -> float:
        value = run.get("created_at")
        return -float(value) if isinstance(value, (int, float)) else 0.0

    if state.sort == "status":
        # Parked first, and among them those waiting on an ambiguous effect.
        runs.sort(key=lambda r: (STATUS_ORDER.get(str(r.get("status")), 9), not is_ambiguous(r), created(r)))
    elif state.sort == "workflow":
        runs.sort(key=lambda r: (str(r.get("workflow") or "").lower(), created(r)))
    elif state.sort == "duration":
        runs.sort(key=lambda r: (-(duration(r, snapshot.taken_at) or 0.0), created(r)))
    else:
        runs.sort(key=created)
    return tuple(runs)


def selected_run(snapshot: Snapshot, state: UiState) -> dict[str, Any] | None:
    return next((r for r in visible_runs(snapshot, state) if r.get("run_id") == state.selected_run_id), None)


def selected_request(snapshot: Snapshot, state: UiState) -> dict[str, Any] | None:
    return next((r for r in snapshot.decisions if r.get("request_id") == state.selected_request_id), None)


def normalize(state: UiState, snapshot: Snapshot) -> UiState:
    """Keep the selections on things still shown; else the first one (or nothing)."""
    changes: dict[str, Any] = {}
    run_ids = [r.get("run_id") for r in visible_runs(snapshot, state)]
    if state.selected_run_id not in run_ids:
        changes["selected_run_id"] = run_ids[0] if run_ids else None
    request_ids = [r.get("request_id") for r in snapshot.decisions]
    if state.selected_request_id not in request_ids:
        changes.update(selected_request_id=request_ids[0] if request_ids else None, choice_index=0)
    if state.focus == "decisions" and not request_ids:
        changes["focus"] = "runs"
    return dataclasses.replace(state, **changes) if changes else state


# --- commands ------------------------------------------------------------------------------


def answer_command(request: dict[str, Any], choice: str, text: dict[str, str] | None = None) -> Command:
    """decision.answer fenced by the request's revision."""
    contract = request.get("contract") or {}
    # "Ship 1.2.0?" reads "answer ship to Ship 1.2.0? y/n" on the confirmation line.
    title = str(contract.get("title") or request.get("node_id") or request.get("request_id")).rstrip().rstrip("?")
    response: dict[str, Any] = {"choice": choice}
    shown = choice
    if text is not None:
        response["input"] = dict(text)
        typed = " ".join(text.values())
        shown += f' ("{typed if len(typed) <= 30 else typed[:29] + "…"}")'
    return Command("decision.answer", f"answer {shown} to {title}",
                   {"request_id": str(request.get("request_id")), "response": response},
                   expected_revision=request.get("revision"))


def _run_command(state: UiState, key: str, snapshot: Snapshot) -> UiState:
    """`c p r R e` on the selected run: a confirmation, or a status line saying why not."""
    run = selected_run(snapshot, state)
    if run is None:
        return dataclasses.replace(state, status="no run selected")
    run_id, status = str(run.get("run_id")), str(run.get("status"))
    verb = {"c": "cancel", "p": "pause", "r": "resume"}.get(key)
    if verb is not None:
        if status in TERMINAL:
            return dataclasses.replace(state, status=f"run {run_id} has ended ({status}): nothing to {verb}")
        return _ask(state, Command(f"run.{verb}", f"{verb} run {run_id}", run_id=run_id))
    detail = snapshot.detail if snapshot.detail_run_id == run_id else None
    if detail is None:
        return dataclasses.replace(state, status=f"run {run_id} not read yet (run.get); try again in a moment")
    if key == "R":
        if detail.get("status") not in TERMINAL:
            return dataclasses.replace(state, status=f"restart needs an ended run; {run_id} is "
                                       f"{detail.get('status')} (cancel it first)")
        revision = detail.get("revision")
        return _ask(state, Command("run.restart", f"restart run {run_id} (revision {revision})", run_id=run_id,
                                   expected_revision=revision if isinstance(revision, int) else None))
    ambiguous = [e for e in detail.get("effects") or [] if isinstance(e, dict) and e.get("status") == "ambiguous"]
    if not ambiguous:
        return dataclasses.replace(state, status=f"run {run_id} has no ambiguous effect to resolve")
    # The effect the run is parked on first (park_detail names it), else the oldest.
    effect = next((e for e in ambiguous if e.get("effect_id") == detail.get("park_detail")), ambiguous[0])
    effect_id = str(effect.get("effect_id"))
    what = f"resolve effect {effect_id} as"  # of the selected run; short enough for 80 columns
    return dataclasses.replace(state, status="", confirm=Confirm((
        Command("effect.resolve", f"{what} confirm (it happened)", {"effect_id": effect_id, "action": "confirm"},
                hotkey="c", label="confirm"),
        Command("effect.resolve", f"{what} retry (rerun the node)", {"effect_id": effect_id, "action": "retry"},
                hotkey="r", label="retry"))))


def _ask(state: UiState, command: Command) -> UiState:
    return dataclasses.replace(state, status="", confirm=Confirm((command,)))


def _answer(state: UiState, snapshot: Snapshot, index: int, key: str) -> UiState:
    request = selected_request(snapshot, state)
    if request is None:
        return dataclasses.replace(state, status="no pending decision to answer")
    choices = decision_choices(request)
    if index >= len(choices):
        return dataclasses.replace(state, status=f"no choice {key}: this decision has {len(choices)}")
    name, spec = choices[index]
    state = dataclasses.replace(state, choice_index=index)
    text_input = spec.get("input")
    if isinstance(text_input, dict):
        return dataclasses.replace(state, status="", prompt=Prompt(
            str(request.get("request_id")), name, str(text_input.get("name") or "input"),
            str(text_input.get("prompt") or "")))
    return _ask(state, answer_command(request, name))


# --- keys ----------------------------------------------------------------------------------------


def step(state: UiState, key: str, snapshot: Snapshot, page: int = 10) -> tuple[UiState, Outcome]:
    """Apply one key (a name from `piwf_actors.top.keys`); `page` is how many runs PgUp/PgDn move."""
    if key in ("eof", "ctrl-c"):
        return state, QUIT
    if state.confirm is not None:
        state, outcome = _confirm_key(state, key)
    elif state.prompt is not None:
        state, outcome = _prompt_key(state, key, snapshot), None
    elif state.filtering:
        state, outcome = _filter_key(state, key), None
    elif state.help_open:
        state, outcome = dataclasses.replace(state, help_open=False), QUIT if key == "q" else None
    else:
        state, outcome = _normal_key(state, key, snapshot, page)
    return normalize(state, snapshot), outcome


def _confirm_key(state: UiState, key: str) -> tuple[UiState, Outcome]:
    confirm = state.confirm
    assert confirm is not None
    if key == "y":
        return dataclasses.replace(state, confirm=None, status=f"{confirm.command.what}: sending…"), confirm.command
    if len(confirm.options) > 1:
        if key in ("tab", "shift-tab", "left", "right", "h", "l"):
            step_by = -1 if key in ("shift-tab", "left", "h") else 1
            index = (confirm.index + step_by) % len(confirm.options)
            return dataclasses.replace(state, confirm=dataclasses.replace(confirm, index=index)), None
        picked = [i for i, option in enumerate(confirm.options) if option.hotkey == key]
        if picked:
            return dataclasses.replace(state, confirm=dataclasses.replace(confirm, index=picked[0])), None
    return dataclasses.replace(state, confirm=None, status=f"not sent: {confirm.command.what}"), None


def _prompt_key(state: UiState, key: str, snapshot: Snapshot) -> UiState:
    prompt = state.prompt
    assert prompt is not None
    if key == "escape":
        return dataclasses.replace(state, prompt=None, status="answer cancelled")
    if key == "backspace":
        return dataclasses.replace(state, prompt=dataclasses.replace(prompt, buffer=prompt.buffer[:-1]))
    if key == "enter":
        request = next((r for r in snapshot.decisions if r.get("request_id") == prompt.request_id), None)
        if request is None:
            return dataclasses.replace(state, prompt=None, status="that decision is no longer pending")
        return _ask(dataclasses.replace(state, prompt=None),
                    answer_command(request, prompt.choice, {prompt.input_name: prompt.buffer}))
    if len(key) == 1 and key.isprintable():
        return dataclasses.replace(state, prompt=dataclasses.replace(prompt, buffer=prompt.buffer + key))
    return state


def _filter_key(state: UiState, key: str) -> UiState:
    if key == "escape":
        return dataclasses.replace(state, filtering=False, filter_text="")
    if key == "enter":
        return dataclasses.replace(state, filtering=False)
    if key == "backspace":
        return dataclasses.replace(state, filter_text=state.filter_text[:-1])
    if len(key) == 1 and key.isprintable():
        return dataclasses.replace(state, filter_text=state.filter_text + key)
    return state


def _move(state: UiState, key: str, snapshot: Snapshot, page: int) -> UiState:
    """j/k/↑/↓/PgUp/PgDn/g/G/Home/End in the focused pane; stops at the ends."""
    if state.focus == "decisions":
        ids = [r.get("request_id") for r in snapshot.decisions]
        current = state.selected_request_id
    else:
        ids = [r.get("run_id") for r in visible_runs(snapshot, state)]
        current = state.selected_run_id
    if not ids:
        return state
    index = ids.index(current) if current in ids else 0
    if key in ("g", "home"):
        index = 0
    elif key in ("G", "end"):
        index = len(ids) - 1
    else:
        delta = MOVES.get(key) or (page if key == "pgdn" else -page)
        index = min(max(index + delta, 0), len(ids) - 1)
    if state.focus == "decisions":
        changed = ids[index] != current
        return dataclasses.replace(state, selected_request_id=ids[index],
                                   choice_index=0 if changed else state.choice_index)
    return dataclasses.replace(state, selected_run_id=ids[index])


def _normal_key(state: UiState, key: str, snapshot: Snapshot, page: int) -> tuple[UiState, Outcome]:
    if key == "q":
        return state, QUIT
    if key == "?":
        return dataclasses.replace(state, help_open=True), None
    if key in MOVES or key in ("pgup", "pgdn", "g", "G", "home", "end"):
        return _move(state, key, snapshot, page), None
    if key in ("tab", "shift-tab"):
        if state.focus == "runs" and not snapshot.decisions:
            return dataclasses.replace(state, status="no pending decisions"), None
        return dataclasses.replace(state, focus="decisions" if state.focus == "runs" else "runs"), None
    if key == "enter":
        if state.focus == "decisions":
            return _answer(state, snapshot, state.choice_index, key), None
        if selected_run(snapshot, state) is None:
            return dataclasses.replace(state, status="no run selected"), None
        return dataclasses.replace(state, detail_open=not state.detail_open), None
    if key == "escape":
        if state.detail_open:
            return dataclasses.replace(state, detail_open=False), None
        return dataclasses.replace(state, filter_text="", status=""), None
    if key == "/":
        return dataclasses.replace(state, filtering=True, focus="runs"), None
    if key == "s":
        sort = SORTS[(SORTS.index(state.sort) + 1) % len(SORTS)] if state.sort in SORTS else SORTS[0]
        return dataclasses.replace(state, sort=sort, status=f"sorted by {sort}"), None
    if key in ("h", "left", "l", "right"):
        request = selected_request(snapshot, state)
        choices = decision_choices(request) if request is not None else []
        if choices:
            index = (state.choice_index + (1 if key in ("l", "right") else -1)) % len(choices)
            return dataclasses.replace(state, choice_index=index), None
        return state, None
    if len(key) == 1 and key in "123456789":
        return _answer(state, snapshot, int(key) - 1, key), None
    if key in ("c", "p", "r", "R", "e"):
        return _run_command(state, key, snapshot), None
    return state, None
