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
_GOAL_CHARS = 400  # the goal (the pipeline's description) is shown up to this many characters
_GOAL_CUT = "…"  # ends a goal cut to fit a small budget
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
    """What a preamble is built from (a pure function of this, the mode and the counter).

    `inputs`: the run's input names (declared, or as given when the pipeline declares
    none). A preamble shows only those `include` names, and only while no step has
    written them (`written`): a step's writes may come from retrieval or a model.
    """

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
    inputs: Sequence[str] = ()


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
    """Names a preamble may show, in the `include` list's order: the run's inputs it names
    that no step has written, never secrets nor engine-owned; none without the list.

    A preamble is in the system role: only the run's metadata and what the author chose
    belong there. Nothing a step wrote is shown (search hits, node text, debug data, model
    replies, a copy of any of them), nor an input the author did not name (an input is the
    caller's text, and may hold model output: a chat history's replies). docs/fidelity.md.
    """
    if view.include is None:
        return []
    written = set(view.written)
    inputs = set(view.inputs)
    excluded = set(view.exclude)
    return [
        n
        for n in dict.fromkeys(view.include)
        if n in inputs
        and n not in written
        and n in view.variables
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


def _goal(view: RunView) -> str:
    return excerpt(view.goal, _GOAL_CHARS) if view.goal else ""


def _head(view: RunView, goal: str) -> list[str]:
    """What is the same for every run and step of a pipeline: a server's prefix cache
    reuses it (with the system prompt before it) from one run to the next."""
    return [
        "## Run context",
        f"- pipeline: {view.pipeline} ({view.total_steps} steps)",
        f"- goal: {goal}" if goal else "- goal: (none given)",
    ]


def _now(view: RunView) -> list[str]:
    """What changes per run and step, at the end: the run and the step it is at."""
    return [
        f"- run: {view.run_id}",
        f"- current step: {view.step_id} (step {len(view.history) + 1})",
    ]


def build_preamble(
    mode: str,
    view: RunView,
    counter: Counter,
    scrub: Callable[[str], str] = lambda s: s,
    budget: int | None = None,
) -> Preamble:
    """The markdown preamble of a fresh conversation in `mode`, within its token budget.

    Stable first (pipeline, goal), then the run's inputs, the completed steps, and last the
    run id and current step. Over budget, the oldest history entries go first (the most
    recent are kept), then the goal is cut; the run id and the current step are always
    kept. The variables section takes at most half the budget; a value longer than the
    mode allows is shortened with a visible marker.
    """
    if mode not in BUDGETS:
        raise ValueError(f"no preamble for fidelity {mode!r}")
    limit = BUDGETS[mode] if budget is None else budget
    if mode == "truncate":
        return _truncate(view, limit, counter, scrub)
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
            var_lines = ["### Inputs", "```json", "{", *var_lines, "}", "```"]
    else:
        var_lines = ["### Inputs", *var_lines] if var_lines else []
    if hidden:
        var_lines.append(f"- ({hidden} more inputs not shown)")
    return _fit(mode, var_lines, used + 12, limit, counter, view, scrub, tuple(shortened), hidden)


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


def _entry(mode: str, r: StepRecord) -> str:
    """One history entry in the mode's shape: step names, actions and outcomes.

    Never the notes (model replies, caught errors' messages): they may quote retrieved
    text or model output, which stays out of the system role.
    """
    if mode == "compact":
        return f"- {r.n}. {r.step_id}: {r.outcome}"
    if mode == "summary:medium":
        return f"- {r.n}. {r.step_id} ({r.action}): {r.outcome}"
    extra = []
    if r.duration_ms >= _SHOWN_DURATION_MS:
        extra.append(f"{round(r.duration_ms / 1000)} s")
    if r.attempts > 1:
        extra.append(f"{r.attempts} attempts")
    detail = f" [{', '.join(extra)}]" if extra else ""
    return f"- {r.n}. {r.step_id} ({r.action}){detail}: {r.outcome}"


def _fit(
    mode: str,
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
    goal = _goal(view)
    head = [scrub(line) for line in _head(view, goal)]
    now = ["### Now"]
    if mode == "summary:high":
        used_actions: dict[str, int] = {}
        for r in view.history:
            used_actions[r.action] = used_actions.get(r.action, 0) + 1
        actions = ", ".join(f"{a} x{c}" for a, c in used_actions.items())
        now.append(f"- actions used: {actions or 'none'}")
    if mode == "summary:medium":
        now.append(f"- progress: {len(view.history)} steps completed")
    now = [scrub(line) for line in [*now, *_now(view)]]
    # The variable lines were counted one by one (var_tokens: with their titles and joints);
    # the exact count of the whole text below corrects any difference.
    fixed = counter.count("\n".join([*head, *now])) + var_tokens + 4
    room = limit - fixed
    kept: list[str] = []
    # Newest first, each entry rendered and counted on its own until the room is used: a
    # run of 100,000 steps costs what the shown ones cost.
    # Each entry is counted with the newline that ends it; the whole text's count is then
    # the sum of its lines' (see _joined), so no entry is encoded twice.
    costs: dict[str, int] = {}
    for record in reversed(view.history):
        line = scrub(_entry(mode, record))
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
        units = [*head, *var_unit, *section, *reversed(kept), *now]
        return "\n".join(units), _joined(units, costs, counter, last)

    text, tokens = render()
    while tokens > limit and kept:
        kept.pop()  # the estimates were short: drop the oldest kept and count again
        text, tokens = render()
    # The estimates bound from above (a shortened value counts its whole room): while the
    # exact count leaves room, older entries are added back one at a time.
    while tokens < limit and len(kept) < total:
        kept.append(scrub(_entry(mode, view.history[total - len(kept) - 1])))
        more, n = render()
        if n > limit:
            kept.pop()
            break
        text, tokens = more, n
    if tokens > limit:  # head, variables and the step alone over a small budget
        units = [
            *var_unit,
            *([titles[mode], f"- ({total} earlier steps not shown)"] if total else []),
        ]
        rest = "\n".join([*units, *now])
        return _cut_goal(mode, goal, rest, limit, counter, view, scrub)
    return Preamble(
        mode,
        text,
        tokens,
        limit,
        len(kept),
        total - len(kept),
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


def _cut_goal(
    mode: str,
    goal: str,
    rest: str,
    limit: int,
    counter: Counter,
    view: RunView,
    scrub: Callable[[str], str],
) -> Preamble:
    """The head with its goal cut to fit beside `rest` (what follows the head, the run id and
    current step last): the description goes before anything else. When even no goal does
    not fit, the text is cut from the end of its middle, the last two lines kept."""

    def render(g: str) -> str:
        return "\n".join([*(scrub(line) for line in _head(view, g)), rest])

    return _shrink_goal(mode, goal, render, limit, counter, len(view.history), keep=2)


def _shrink_goal(
    mode: str,
    goal: str,
    render: Callable[[str], str],
    limit: int,
    counter: Counter,
    steps: int,
    keep: int,
) -> Preamble:
    """The longest prefix of the goal (marked with "…") whose rendering fits the limit."""
    text = render(goal)
    tokens = counter.count(text)
    if tokens <= limit:
        return Preamble(mode, text, tokens, limit, 0, steps, 0, 0, ())
    low, high = 0, counter.count(goal)  # goal tokens kept: low fits (or is 0), high does not
    best = render(_GOAL_CUT)
    while high - low > 1:
        mid = (low + high) // 2
        candidate = render(counter.truncate(goal, mid).rstrip() + _GOAL_CUT)
        if counter.count(candidate) <= limit:
            low, best = mid, candidate
        else:
            high = mid
    tokens = counter.count(best)
    if tokens <= limit:
        return Preamble(mode, best, tokens, limit, 0, steps, 0, 0, ())
    return _fit_whole(mode, best, limit, counter, steps, keep)


def _truncate(view: RunView, limit: int, counter: Counter, scrub: Callable[[str], str]) -> Preamble:
    """truncate: pipeline, goal, run id and current step; the goal is cut first."""
    goal = _goal(view)
    rest = "\n".join(scrub(line) for line in _now(view))

    def render(g: str) -> str:
        return "\n".join([*(scrub(line) for line in _head(view, g)), rest])

    return _shrink_goal("truncate", goal, render, limit, counter, len(view.history), keep=2)


def _low(view: RunView, limit: int, counter: Counter, scrub: Callable[[str], str]) -> Preamble:
    """summary:low: one paragraph; the oldest completed step names go first, then the goal."""
    n = len(view.history) + 1
    last = view.history[-1] if view.history else None
    goal = _goal(view).rstrip(".")

    def opening(g: str) -> str:
        return (
            f"## Run context\nPipeline {view.pipeline} ({view.total_steps} steps). "
            f"Goal: {g or 'none given'}."
        )

    start = opening(goal)
    done = f" Last outcome: {last.step_id} {last.outcome}." if last else " No step has completed."
    end = f"{done}\nRun {view.run_id}, now at step {n}: {view.step_id}."
    names = [r.step_id for r in view.history]
    keep = len(names)
    room = limit - counter.count(scrub(start + end)) - 12
    cost = 0
    for i in range(len(names) - 1, -1, -1):
        cost += counter.count(" " + names[i] + ",")
        if cost > room:
            keep = len(names) - 1 - i
            break

    def middle(keep: int) -> str:
        shown = names[len(names) - keep :] if keep else []
        if not names:
            return ""
        if not keep:
            return f" Completed: {len(names)} steps."
        if keep == len(names):
            return f" Completed: {', '.join(shown)}."
        return f" Completed (last {keep} of {len(names)}): {', '.join(shown)}."

    def render(keep: int) -> tuple[str, int]:
        text = scrub(start + middle(keep) + end)
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
    if tokens > limit:  # no name left: the goal is cut, then the middle of the text
        rest = scrub(middle(0) + end)
        cut = _shrink_goal(
            "summary:low", goal, lambda g: scrub(opening(g)) + rest, limit, counter, len(names), 1
        )
        return cut
    return Preamble("summary:low", text, tokens, limit, keep, len(names) - keep, 0, 0, ())


def _fit_whole(
    mode: str, text: str, limit: int, counter: Counter, steps: int, keep: int = 0
) -> Preamble:
    """A preamble with no history: the text cut to the budget with a marker if over.

    `keep`: that many last lines (the run id and current step) stay whole after the marker
    when they fit; what is cut is the text before them.
    """
    tokens = counter.count(text)
    if tokens > limit:
        marker = "\n… [preamble shortened to its budget]"
        lines = text.split("\n")
        tail = "\n" + "\n".join(lines[len(lines) - keep :]) if 0 < keep < len(lines) else ""
        body = text[: len(text) - len(tail)] if tail else text
        end = marker + tail
        if counter.count(end) > limit:
            body, end = text, marker
        room = max(0, limit - counter.count(end))
        text = counter.truncate(body, room) + end
        tokens = counter.count(text)
        while tokens > limit and room > 0:  # a cut joined to the marker can merge differently
            room -= 1
            text = counter.truncate(body, room) + end
            tokens = counter.count(text)
        while tokens > limit and text:  # the marker alone over a tiny budget
            text = text[:-1]
            tokens = counter.count(text)
    return Preamble(mode, text, tokens, limit, 0, steps, 0, 0, ())


def with_preamble(messages: list[dict[str, Any]], preamble: str) -> list[dict[str, Any]]:
    """Messages whose first system prompt ends with the preamble (one is added if none).

    The prompt file's text comes first: it is the same for every run of the step, so it
    and the preamble's stable head form a prefix a server's cache reuses across runs.
    """
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        content = first.get("content") or ""
        first["content"] = f"{content}\n\n{preamble}" if content else preamble
        return [first, *messages[1:]]
    return [{"role": "system", "content": preamble}, *messages]
