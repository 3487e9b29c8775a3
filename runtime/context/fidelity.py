"""Context fidelity: how much of the run a model step carries in (docs/fidelity.md).

Pure functions: which mode a step runs in (`resolve_mode`), which thread a `full` step
joins (`resolve_thread`), and the markdown preamble a fresh conversation starts with
(`build_preamble`), cut to the mode's budget in real tokens of the step's tokenizer.
`HistoryLog` turns the run's trace events into the completed-step records preambles show.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtime.contract.action import ENGINE_OWNED

MODES: tuple[str, ...] = (
    "full",
    "truncate",
    "compact",
    "summary:low",
    "summary:medium",
    "summary:high",
)
DEFAULT_MODE = "compact"
# Preamble budgets in real tokens of the step's model tokenizer (`full` has none: it sends
# the thread and the call's own overflow check applies).
BUDGETS: dict[str, int] = {
    "truncate": 100,
    "compact": 500,
    "summary:low": 600,
    "summary:medium": 1500,
    "summary:high": 3000,
}
DEGRADED_MODE = "summary:high"  # a `full` step whose provider lost its state after a resume
SHORTENED = "… [shortened: {total} characters in all]"
# Variable names that look like credentials never appear in a preamble, whatever their value.
_SECRET_NAME = re.compile(r"(?i)(^|_)(secret|password|passwd|api_?key|token|credentials?)s?($|_)")
# How many of a variable's tokens each mode shows, and how many history notes per step.
_VALUE_TOKENS = {"compact": 40, "summary:low": 0, "summary:medium": 80, "summary:high": 160}
_NOTE_CHARS = 160
# Durations shorter than this are not shown: an offline replay's prompts stay byte-identical
# (a step that takes seconds is a live model call, whose reply differs between runs anyway).
_SHOWN_DURATION_MS = 2000


class Counter(Protocol):
    """The token counter of the step's model (runtime/context/tokens.py)."""

    def count(self, text: str) -> int:
        """Exact token count."""

    def truncate(self, text: str, max_tokens: int) -> str:
        """Longest prefix within max_tokens."""


# --- resolution --------------------------------------------------------------------------


def resolve_mode(
    arrival: Mapping[str, str], step: Mapping[str, Any], settings: Mapping[str, Any]
) -> tuple[str, str]:
    """(mode, where it came from): the transition taken, the step, the pipeline, compact."""
    for source, value in (
        ("transition", arrival.get("fidelity")),
        ("step", step.get("fidelity")),
        ("settings.default_fidelity", settings.get("default_fidelity")),
    ):
        if value is not None:
            return str(value), source
    return DEFAULT_MODE, "default"


def resolve_thread(
    step_id: str,
    step: Mapping[str, Any],
    arrival: Mapping[str, str],
    settings: Mapping[str, Any],
    previous: str | None,
) -> tuple[str, str]:
    """(thread id, where it came from) of a `full` step.

    The step's thread_id, the transition's, settings.default_thread, the step's group,
    the previous step's id; the entry step (no previous step) uses its own id.
    """
    for source, value in (
        ("step", step.get("thread_id")),
        ("transition", arrival.get("thread_id")),
        ("settings.default_thread", settings.get("default_thread")),
        ("group", step.get("group")),
        ("previous step", previous),
    ):
        if value is not None:
            return str(value), source
    return step_id, "own step"


# --- history from the trace --------------------------------------------------------------


@dataclass
class StepRecord:
    """One completed step visit, as preambles show it."""

    n: int
    step_id: str
    action: str
    outcome: str
    duration_ms: float
    attempts: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON data (ctx.history() hands these out)."""
        return {
            "n": self.n,
            "id": self.step_id,
            "action": self.action,
            "outcome": self.outcome,
            "duration_ms": self.duration_ms,
            "attempts": self.attempts,
            "notes": list(self.notes),
        }


def excerpt(text: str, limit: int = _NOTE_CHARS) -> str:
    """One line of at most `limit` characters (an ellipsis says it was cut)."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class HistoryLog:
    """The completed steps of a run, fed from its trace events (live, or the store's on resume).

    STEP and CATCH events complete a record; MODEL_CALL events' reply excerpts become the
    notes of the step that made them. Variables written are remembered in write order.
    """

    KINDS = frozenset({"STEP", "CATCH", "MODEL_CALL"})

    def __init__(self, actions: Mapping[str, str] | None = None) -> None:
        self.actions = actions or {}  # step id -> action name (CATCH events do not say it)
        self.records: list[StepRecord] = []
        self.written: dict[str, int] = {}  # name -> record index of its last write
        self._notes: dict[str, list[str]] = {}

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one trace event (others than KINDS are ignored)."""
        kind = event.get("type")
        if kind not in self.KINDS:
            return
        step_id = str(event.get("step_id"))
        if kind == "MODEL_CALL":
            reply = event.get("reply")
            if isinstance(reply, str) and reply.strip():
                self._notes.setdefault(step_id, []).append(excerpt(reply))
            return
        notes = self._notes.pop(step_id, [])
        if kind == "CATCH":
            outcome = f"failed {event.get('code')}, caught -> {event.get('next')}"
            action = self.actions.get(step_id, "?")
            record = StepRecord(len(self.records) + 1, step_id, action, outcome, 0.0, 1, notes)
            record.notes.append(excerpt(f"error: {event.get('message', '')}"))
            self.records.append(record)
            self.written["last_error"] = len(self.records) - 1
            return
        nxt = event.get("next")
        outcome = str(event.get("outcome")) + (f" -> {nxt}" if nxt else "")
        self.records.append(
            StepRecord(
                len(self.records) + 1,
                step_id,
                str(event.get("action")),
                outcome,
                float(event.get("duration_ms") or 0.0),
                int(event.get("attempt") or 1),
                notes,
            )
        )
        wrote = event.get("wrote")
        if isinstance(wrote, Mapping):
            index = len(self.records) - 1
            for name in wrote:
                self.written.pop(name, None)  # re-inserted: the dict keeps write order
                self.written[name] = index

    def extend(self, events: Iterable[Mapping[str, Any]]) -> HistoryLog:
        """Feed many events (a resumed run's stored trace); returns self."""
        for event in events:
            self.feed(event)
        return self


# --- the preamble ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    """What a preamble is built from (a pure function of this, the mode and the counter)."""

    pipeline: str
    goal: str
    run_id: str
    step_id: str
    total_steps: int
    history: Sequence[StepRecord]
    variables: Mapping[str, Any]
    written: Sequence[str]  # names written by completed steps, oldest write first
    include: Sequence[str] | None = None
    exclude: Sequence[str] = ()


@dataclass(frozen=True)
class Preamble:
    """A built preamble: its text, exact tokens and what was left out."""

    mode: str
    text: str
    tokens: int
    budget: int
    steps_shown: int
    steps_dropped: int
    variables_shown: int
    variables_dropped: int
    shortened: tuple[str, ...]  # variables shown shortened (with the marker)


def shown_variables(view: RunView) -> list[str]:
    """Names a preamble may show, most recently written first: never secrets nor engine-owned."""
    names = view.include if view.include is not None else list(reversed(view.written))
    if view.include is not None:  # include lists in its own order, newest write first
        order = {n: i for i, n in enumerate(view.written)}
        names = sorted(names, key=lambda n: -order.get(n, -1))
    excluded = set(view.exclude)
    return [
        n
        for n in names
        if n in view.variables
        and n not in excluded
        and n not in ENGINE_OWNED
        and not _SECRET_NAME.search(n)
    ]


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _shorten(
    text: str, limit: int, counter: Counter, whole: int | None = None
) -> tuple[str, bool, int]:
    """text within `limit` tokens, marker included; (text, was it shortened, its tokens).

    `whole`: the characters of the value text was cut from (it is then always marked).
    """
    # Counting a huge value whole is wasted work: a prefix of 6 characters a token (text
    # averages about 4) is usually enough to see it is over; when it is not, a prefix of 16
    # characters a token (the marker gives the whole value's size in characters).
    probe = text[: limit * 8 + 16]
    n = counter.count(probe)
    if n <= limit and len(probe) < len(text):
        probe = text[: limit * 16 + 16]
        n = counter.count(probe)
    if whole is None and n <= limit:
        if len(probe) == len(text):
            return text, False, n
        n = counter.count(text)
        if n <= limit:
            return text, False, n
    marker = SHORTENED.format(total=f"{whole or len(text):,}")
    marked = counter.count(marker)
    room = max(0, limit - marked)
    # Cut from the first 6 characters a token: re-encoded faster than the whole probe, and
    # a head a little short of room is still within the limit and marked. room + marker
    # bounds the result (a joint may merge; the exact count of the whole preamble checks).
    head = counter.truncate(probe[: room * 6 + 16], room)
    return head + marker, True, room + marked


def build_preamble(
    mode: str,
    view: RunView,
    counter: Counter,
    scrub: Callable[[str], str] = lambda s: s,
    budget: int | None = None,
) -> Preamble:
    """The markdown preamble of a fresh conversation in `mode`, within its token budget.

    Over budget, the oldest history entries go first (the most recent are kept); the
    variables section takes at most half the budget and shows the most recently written
    first; a value longer than the mode allows is shortened with a visible marker.
    """
    if mode not in BUDGETS:
        raise ValueError(f"no preamble for fidelity {mode!r}")
    limit = BUDGETS[mode] if budget is None else budget
    n = len(view.history) + 1
    head = [
        "## Run context",
        f"- pipeline: {view.pipeline}",
        f"- goal: {excerpt(view.goal, 400)}" if view.goal else "- goal: (none given)",
        f"- run: {view.run_id}",
        f"- current step: {view.step_id} (step {n}; the pipeline has {view.total_steps} steps)",
    ]
    if mode == "truncate":
        text = scrub("\n".join(head))
        return _fit_whole(mode, text, limit, counter, len(view.history))
    if mode == "summary:low":
        return _low(view, limit, counter, scrub)
    cap = _VALUE_TOKENS[mode]
    names = shown_variables(view)
    var_lines: list[str] = []
    shortened: list[str] = []
    var_room = limit // 2
    used = 0  # tokens of the variable lines, each with its newline
    for name in names:
        if mode == "summary:high":
            value, cut, tokens = _json_value(view.variables[name], cap, counter, scrub)
            line = f'  "{name}": {value},'
        else:
            # One line per variable: whitespace collapsed first, so the marker's counts are true.
            raw = scrub(_value_text(view.variables[name]))
            flat = " ".join(raw[: cap * 64].split())
            value, cut, tokens = _shorten(
                flat, cap, counter, len(raw) if len(raw) > cap * 64 else None
            )
            line = f"- `{name}`: {value}"
        # The value was counted when it was shortened: only the name around it is counted
        # here (the exact count of the whole preamble corrects any joint).
        cost = tokens + counter.count(line[: len(line) - len(value)]) + 2
        if used + cost > var_room:
            break
        used += cost
        var_lines.append(line)
        if cut:
            shortened.append(name)
    hidden = len(names) - len(var_lines)
    if mode == "summary:high":
        if var_lines:
            var_lines[-1] = var_lines[-1].rstrip(",")
        var_lines = ["### Variables", "```json", "{", *var_lines, "}", "```"]
    else:
        title = "### Key variables" if mode == "compact" else "### Active variables"
        var_lines = [title, *var_lines] if var_lines else []
    if hidden:
        var_lines.append(f"- ({hidden} more variables not shown)")
    return _fit(
        mode, head, var_lines, used + 12, limit, counter, view, scrub, tuple(shortened), hidden
    )


def _json_value(
    value: Any, cap: int, counter: Counter, scrub: Callable[[str], str]
) -> tuple[str, bool, int]:
    """A value as JSON text within cap tokens: strings shortened inside, else the text cut."""
    text = scrub(json.dumps(value, ensure_ascii=False, sort_keys=True))
    short, cut, tokens = _shorten(text, cap, counter)
    if not cut:
        return text, False, tokens
    # Quoted: two quotes more, and escapes the exact count of the whole preamble sees.
    return json.dumps(short, ensure_ascii=False), True, tokens + 2


def _entry(mode: str, r: StepRecord, scrub: Callable[[str], str]) -> str:
    """One history entry in the mode's shape."""
    if mode == "compact":
        return f"- {r.n}. {r.step_id}: {r.outcome}"
    note = f" — {scrub(r.notes[-1])}" if r.notes else ""
    if mode == "summary:medium":
        return f"- {r.n}. {r.step_id} ({r.action}): {r.outcome}{note}"
    extra = []
    if r.duration_ms >= _SHOWN_DURATION_MS:
        extra.append(f"{round(r.duration_ms / 1000)} s")
    if r.attempts > 1:
        extra.append(f"{r.attempts} attempts")
    notes = "".join(f"\n  - note: {scrub(t)}" for t in r.notes)
    detail = f" [{', '.join(extra)}]" if extra else ""
    return f"- {r.n}. {r.step_id} ({r.action}){detail}: {r.outcome}{notes}"


def _fit(
    mode: str,
    head: list[str],
    var_lines: list[str],
    var_tokens: int,
    limit: int,
    counter: Counter,
    view: RunView,
    scrub: Callable[[str], str],
    shortened: tuple[str, ...],
    hidden: int,
) -> Preamble:
    """Keep the most recent entries that fit beside the head and variables; exact final count."""
    titles = {
        "compact": "### Completed steps",
        "summary:medium": "### Recent steps",
        "summary:high": "### History",
    }
    if mode == "summary:high":
        used_actions: dict[str, int] = {}
        for r in view.history:
            used_actions[r.action] = used_actions.get(r.action, 0) + 1
        actions = ", ".join(f"{a} x{c}" for a, c in used_actions.items())
        head = [*head, f"- actions used: {actions or 'none'}"]
    if mode == "summary:medium":
        done = len(view.history)
        head = [*head, f"- progress: {done} steps completed"]
    # The variable lines were counted one by one (var_tokens: with their titles and joints);
    # the exact count of the whole text below corrects any difference.
    fixed = counter.count("\n".join(head)) + var_tokens + 4
    room = limit - fixed
    kept: list[str] = []
    # Newest first, each entry rendered and counted on its own until the room is used: a
    # run of 100,000 steps costs what the shown ones cost.
    # Each entry is counted with the newline that ends it; the whole text's count is then
    # the sum of its lines' (see _joined), so no entry is encoded twice.
    costs: dict[str, int] = {}
    for record in reversed(view.history):
        line = _entry(mode, record, scrub)
        cost = costs[line] = counter.count(line + "\n")
        if cost > room:
            break
        room -= cost
        kept.append(line)
    total = len(view.history)
    var_unit = ["\n".join(var_lines)] if var_lines else []  # inner lines may start with spaces
    last: dict[str, int] = {}

    def render() -> tuple[str, int]:
        dropped = total - len(kept)
        section = [titles[mode]] if total else []
        if dropped:
            section.append(f"- ({dropped} earlier steps not shown)")
        units = [*head, *section, *reversed(kept), *var_unit]
        return "\n".join(units), _joined(units, costs, counter, last)

    text, tokens = render()
    while tokens > limit and kept:
        kept.pop()  # the estimates were short: drop the oldest kept and count again
        text, tokens = render()
    # The estimates bound from above (a shortened value counts its whole room): while the
    # exact count leaves room, older entries are added back one at a time.
    while tokens < limit and len(kept) < total:
        kept.append(_entry(mode, view.history[total - len(kept) - 1], scrub))
        more, n = render()
        if n > limit:
            kept.pop()
            break
        text, tokens = more, n
    kept_lines = kept
    if tokens > limit:  # head and variables alone over a tiny budget: cut, visibly
        return _fit_whole(mode, text, limit, counter, len(view.history))
    return Preamble(
        mode,
        text,
        tokens,
        limit,
        len(kept_lines),
        total - len(kept_lines),
        len([v for v in var_lines if v.startswith(("- `", '  "'))]),
        hidden,
        shortened,
    )


def _joined(units: list[str], known: dict[str, int], counter: Counter, last: dict[str, int]) -> int:
    """Exact tokens of "\\n".join(units): each unit counted with its newline, summed.

    No BPE piece of cl100k_base or o200k_base spans a newline followed by a character that
    is neither whitespace nor "/" (runtime/context/tokens.py, count_joined), and the
    pre-tokeniser has no look-behind: counts add up at such cuts. Units that start
    otherwise are counted with the text around them.
    """
    if any(u[:1].isspace() or u[:1] in ("", "/") for u in units[1:]):
        return counter.count("\n".join(units))
    if not units:
        return 0
    total = 0
    for unit in units[:-1]:  # remembered: a recount after one entry more costs that entry
        n = known.get(unit)
        if n is None:
            n = known[unit] = counter.count(unit + "\n")
        total += n
    end = last.get(units[-1])
    if end is None:
        end = last[units[-1]] = counter.count(units[-1])
    return total + end


def _low(view: RunView, limit: int, counter: Counter, scrub: Callable[[str], str]) -> Preamble:
    """summary:low: one paragraph; the oldest completed step names go first."""
    n = len(view.history) + 1
    last = view.history[-1] if view.history else None
    goal = excerpt(view.goal, 400).rstrip(".") if view.goal else "none given"
    start = (
        f"## Run context\nStep {n} of pipeline {view.pipeline} ({view.total_steps} steps), "
        f"run {view.run_id}, now at {view.step_id}. Goal: {goal}."
    )
    end = f" Last outcome: {last.step_id} {last.outcome}." if last else " No step has completed."
    names = [r.step_id for r in view.history]
    keep = len(names)
    room = limit - counter.count(scrub(start + end)) - 12
    cost = 0
    for i in range(len(names) - 1, -1, -1):
        cost += counter.count(" " + names[i] + ",")
        if cost > room:
            keep = len(names) - 1 - i
            break

    def render(keep: int) -> tuple[str, int]:
        shown = names[len(names) - keep :] if keep else []
        if not names:
            middle = ""
        elif keep == len(names):
            middle = f" Completed: {', '.join(shown)}."
        else:
            middle = f" Completed (last {keep} of {len(names)}): {', '.join(shown)}."
        text = scrub(start + middle + end)
        return text, counter.count(text)

    text, tokens = render(keep)
    while tokens > limit and keep > 0:
        keep -= 1
        text, tokens = render(keep)
    # The estimate keeps 12 tokens spare: while the exact count leaves room, one name more
    # (all of them first: without "(last k of n)" the whole list may fit where one more not).
    if 0 < len(names) - keep <= 3:  # more missing names cost more than "(last k of n)"
        whole, n = render(len(names))
        if n <= limit:
            keep, text, tokens = len(names), whole, n
    while tokens < limit and keep < len(names):
        more, n = render(keep + 1)
        if n > limit:
            break
        keep, text, tokens = keep + 1, more, n
    if tokens > limit:
        return _fit_whole("summary:low", text, limit, counter, len(names))
    return Preamble("summary:low", text, tokens, limit, keep, len(names) - keep, 0, 0, ())


def _fit_whole(mode: str, text: str, limit: int, counter: Counter, steps: int) -> Preamble:
    """A preamble with no history: the text itself cut to the budget with a marker if over."""
    tokens = counter.count(text)
    if tokens > limit:
        marker = "\n… [preamble shortened to its budget]"
        text = counter.truncate(text, max(0, limit - counter.count(marker))) + marker
        tokens = counter.count(text)
        while tokens > limit and text:  # a marker joined to a cut can merge differently
            text = text[:-1]
            tokens = counter.count(text)
    return Preamble(mode, text, tokens, limit, 0, steps, 0, 0, ())


def with_preamble(messages: list[dict[str, Any]], preamble: str) -> list[dict[str, Any]]:
    """Messages whose first system prompt starts with the preamble (one is added if none)."""
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        first["content"] = f"{preamble}\n\n{first.get('content') or ''}"
        return [first, *messages[1:]]
    return [{"role": "system", "content": preamble}, *messages]
