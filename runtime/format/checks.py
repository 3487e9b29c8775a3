"""Graph and semantic checks: pure functions over plain pipeline data.

Each check is a generator of `Finding` (a code, a message and a JSON path inside
the pipeline). The validator maps paths to file positions; nothing here knows
about files, YAML or output formats.
"""

from __future__ import annotations

import difflib
import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime import codes
from runtime.contract.action import Action
from runtime.contract.registry import Registry
from runtime.format.source import PathT
from runtime.format.transitions import Edge, outgoing

Step = Mapping[str, Any]


@dataclass(frozen=True)
class Finding:
    """A problem at a path inside one pipeline."""

    code: str
    message: str
    path: PathT
    hint: str = ""
    severity: str = "error"
    key: bool = False


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """A "did you mean" hint, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


@dataclass
class Graph:
    """The step graph: ids, actions, and transitions (normal and catch)."""

    steps: list[Step]
    actions: dict[str, type[Action] | None]
    ids: list[str]
    edges: dict[str, list[tuple[Edge, PathT]]]  # path: where the target step id is written
    pos: dict[str, int]
    unknown: set[str]  # steps not judged on flow: unknown action, or a value failed the schema

    @classmethod
    def build(
        cls, steps: Sequence[Step], registry: Registry, doubtful: frozenset[int] = frozenset()
    ) -> Graph:
        """Collect transitions of every step (short or long form) through `outgoing`.

        `doubtful`: indices of steps with a value that failed the schema (and was left
        out); like steps of unknown actions they may end, so no flow error cascades.
        """
        ids: list[str] = []
        actions: dict[str, type[Action] | None] = {}
        edges: dict[str, list[tuple[Edge, PathT]]] = {}
        pos: dict[str, int] = {}
        unknown: set[str] = set()
        for i, step in enumerate(steps):
            sid = step.get("id")
            if not isinstance(sid, str) or sid in actions:
                continue
            ids.append(sid)
            pos[sid] = i
            action = registry.get(str(step.get("action")))
            actions[sid] = action
            if action is None or i in doubtful:
                unknown.add(sid)
            edges[sid] = [(e, ("steps", i, *e.path)) for e in outgoing(step, action)]
        return cls(list(steps), actions, ids, edges, pos, unknown)

    def successors(self, sid: str, *, with_catch: bool = True) -> list[str]:
        """Known step ids this step can go to."""
        return [
            t.target
            for t, _ in self.edges.get(sid, ())
            if t.target in self.actions and (with_catch or not t.label.startswith("catch "))
        ]

    def is_terminal(self, step: Step) -> bool:
        """True when the step ends the run."""
        action = self.actions.get(str(step.get("id")))
        return step.get("end") is True or bool(action and action.terminal)


def check_ids(steps: Sequence[Step]) -> Iterator[Finding]:
    """Duplicate step ids."""
    seen: dict[str, int] = {}
    for i, step in enumerate(steps):
        sid = step.get("id")
        if isinstance(sid, str):
            if sid in seen:
                yield Finding(
                    "DUPLICATE_STEP_ID",
                    f"step id {sid!r} is already used by step #{seen[sid] + 1}",
                    ("steps", i, "id"),
                )
            else:
                seen[sid] = i


def check_entry(graph: Graph, settings: Mapping[str, Any]) -> Iterator[Finding]:
    """settings.entry_step_id is set and names a step."""
    entry = settings.get("entry_step_id")
    if entry is None:
        first = graph.ids[0] if graph.ids else "<first step id>"
        yield Finding(
            "ENTRY_STEP_MISSING",
            "settings.entry_step_id is not set",
            ("settings",),
            hint=f"add `entry_step_id: {first}` under settings",
            key=True,
        )
    elif isinstance(entry, str) and entry not in graph.actions:
        yield Finding(
            "ENTRY_STEP_UNKNOWN",
            f"entry_step_id {entry!r} names no step",
            ("settings", "entry_step_id"),
            hint=did_you_mean(entry, graph.ids),
        )


def check_targets(graph: Graph) -> Iterator[Finding]:
    """Every transition names an existing step."""
    for sid in graph.ids:
        for t, path in graph.edges[sid]:
            if t.target not in graph.actions:
                yield Finding(
                    "UNKNOWN_STEP",
                    f"step {sid!r} {t.label} -> {t.target!r}: no such step",
                    path,
                    hint=did_you_mean(t.target, graph.ids),
                )


def check_inbox_targets(graph: Graph) -> Iterator[Finding]:
    """Inbox rules target existing steps."""
    for i, step in enumerate(graph.steps):
        action = graph.actions.get(str(step.get("id")))
        if action is None:
            continue
        for rel, target in action.inbox_targets(step):
            if target not in graph.actions:
                yield Finding(
                    "INBOX_TARGET_UNKNOWN",
                    f"inbox rule targets unknown step {target!r}",
                    ("steps", i, *rel),
                    hint=did_you_mean(target, graph.ids),
                    key=True,
                )


def _index_of(graph: Graph, sid: str) -> int:
    return graph.pos.get(sid, 0)


def check_flow(graph: Graph, settings: Mapping[str, Any]) -> Iterator[Finding]:
    """Unreachable steps, steps with no way on, steps that never reach an end."""
    entry = settings.get("entry_step_id")
    if isinstance(entry, str) and entry in graph.actions:
        reached = {entry}
        queue = deque([entry])
        while queue:
            for nxt in graph.successors(queue.popleft()):
                if nxt not in reached:
                    reached.add(nxt)
                    queue.append(nxt)
        for sid in graph.ids:
            if sid not in reached:
                yield Finding(
                    "UNREACHABLE_STEP",
                    f"step {sid!r} is never reached from {entry!r}",
                    ("steps", _index_of(graph, sid), "id"),
                    severity="warning",
                )
    stuck: set[str] = set()
    for sid in graph.ids:
        step = graph.steps[_index_of(graph, sid)]
        normal = [t for t, _ in graph.edges[sid] if not t.label.startswith("catch ")]
        if not graph.is_terminal(step) and not normal and sid not in graph.unknown:
            stuck.add(sid)
            action = graph.actions.get(sid)
            branches = ", ".join(f"on_{o}" for o in action.outcomes) if action else ""
            yield Finding(
                "NO_TRANSITION",
                f"step {sid!r} has no way on and no `end: true`",
                ("steps", _index_of(graph, sid), "id"),
                hint=f"add `next:`{', ' + branches if branches else ''} or `end: true`",
            )
    # Reverse search from the ends; a step with an unknown target gets the benefit of the doubt.
    preds: dict[str, list[str]] = {sid: [] for sid in graph.ids}
    ends: list[str] = []
    for sid in graph.ids:
        step = graph.steps[_index_of(graph, sid)]
        if (
            graph.is_terminal(step)
            or sid in graph.unknown
            or any(t.target not in graph.actions for t, _ in graph.edges[sid])
        ):
            ends.append(sid)
        for nxt in graph.successors(sid):
            preds[nxt].append(sid)
    can_end = set(ends)
    queue = deque(ends)
    while queue:
        for prev in preds[queue.popleft()]:
            if prev not in can_end:
                can_end.add(prev)
                queue.append(prev)
    for sid in graph.ids:
        if sid not in can_end and sid not in stuck:
            yield Finding(
                "NO_PATH_TO_END",
                f"no path from step {sid!r} reaches an end",
                ("steps", _index_of(graph, sid), "id"),
            )


def _cycles(nodes: list[str], succ: Mapping[str, list[str]]) -> list[list[str]]:
    """Strongly connected components that contain a cycle (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = succ.get(node, [])
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1 or node in succ.get(node, []):
                    out.append(comp)
    return out


def check_cycles(graph: Graph, settings: Mapping[str, Any]) -> Iterator[Finding]:
    """Cycles that pass no bounding step, unless the pipeline sets max_steps."""
    limit = settings.get("max_steps")
    if isinstance(limit, int) and not isinstance(limit, bool):  # `max_steps: true` is no limit
        return
    # A cycle is bounded iff it passes a bounding step: drop those and look for cycles left.
    free = [s for s in graph.ids if not getattr(graph.actions.get(s), "bounds_loops", False)]
    keep = set(free)
    succ = {s: [n for n in graph.successors(s) if n in keep] for s in free}
    for comp in _cycles(free, succ):
        order = sorted(comp, key=lambda s: _index_of(graph, s))
        yield Finding(
            "UNBOUNDED_CYCLE",
            f"steps {', '.join(order)} form a cycle that passes no loop_guard",
            ("steps", _index_of(graph, order[0]), "id"),
        )


def _fidelity(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def check_threads(graph: Graph, settings: Mapping[str, Any]) -> Iterator[Finding]:
    """A thread named where no arrival resolves to `full` is never joined (a warning).

    Fidelity on arrival: the transition's, else the step's, else settings.default_fidelity,
    else compact (docs/fidelity.md); the entry step is arrived at with no transition.
    """
    default = _fidelity(settings.get("default_fidelity")) or "compact"
    entry = settings.get("entry_step_id")
    entry = entry if isinstance(entry, str) else (graph.ids[0] if graph.ids else None)
    incoming: dict[str, list[Mapping[str, str]]] = {sid: [] for sid in graph.ids}
    if entry in incoming:
        incoming[entry].append({})
    for sid in graph.ids:
        for edge, _ in graph.edges[sid]:
            if edge.target in incoming:
                incoming[edge.target].append(edge.attrs)

    def resolved(attrs: Mapping[str, str], sid: str) -> str:
        own = _fidelity(graph.steps[_index_of(graph, sid)].get("fidelity"))
        return attrs.get("fidelity") or own or default

    any_full = False
    for sid in graph.ids:
        i = _index_of(graph, sid)
        # An unreached step (reported on its own) is judged by its own fidelity.
        modes = {resolved(a, sid) for a in incoming[sid] or [{}]}
        any_full = any_full or "full" in modes
        thread = graph.steps[i].get("thread_id")
        if isinstance(thread, str) and "full" not in modes:
            yield Finding(
                "THREAD_WITHOUT_FULL",
                f"step {sid!r} names thread {thread!r}, but every way into it resolves to "
                f"{', '.join(sorted(modes))}, never full",
                ("steps", i, "thread_id"),
                severity="warning",
            )
        for edge, path in graph.edges[sid]:
            thread = edge.attrs.get("thread_id")
            if thread is None or edge.target not in incoming:
                continue
            mode = resolved(edge.attrs, edge.target)
            if mode != "full":
                yield Finding(
                    "THREAD_WITHOUT_FULL",
                    f"step {sid!r} {edge.label} -> {edge.target!r} names thread {thread!r}, but "
                    f"the arrival resolves to {mode}, not full",
                    (*path[:-1], "thread_id"),
                    severity="warning",
                )
    thread = settings.get("default_thread")
    if isinstance(thread, str) and graph.ids and not any_full:
        yield Finding(
            "THREAD_WITHOUT_FULL",
            f"settings.default_thread {thread!r} is never used: no step is arrived at with "
            "fidelity full",
            ("settings", "default_thread"),
            severity="warning",
        )


FIDELITY_FIELDS = ("fidelity", "thread_id")


def check_fidelity_readers(graph: Graph, reads: Callable[[str], bool]) -> Iterator[Finding]:
    """`fidelity` / `thread_id` where no model call reads them: a warning at the field.

    On a step, or on a long-form transition into a step, whose action makes no model
    call that takes a fidelity preamble or a thread (`reads(step_id)` is False).

    Steps of unknown actions (reported on their own) are not judged.
    """

    def judged(sid: str) -> bool:
        return sid in graph.pos and sid not in graph.unknown and not reads(sid)

    for sid in graph.ids:
        i = _index_of(graph, sid)
        action = graph.steps[i].get("action")
        for field in FIDELITY_FIELDS:
            if field in graph.steps[i] and judged(sid):
                yield Finding(
                    "FIDELITY_WITHOUT_MODEL",
                    f"step {sid!r} sets {field}, but its action {action} makes no model call "
                    "that reads it: it has no effect",
                    ("steps", i, field),
                    severity="warning",
                    key=True,
                )
        for edge, path in graph.edges[sid]:
            fields = [f for f in FIDELITY_FIELDS if f in edge.attrs]
            if not fields or not judged(edge.target):
                continue
            target = graph.steps[_index_of(graph, edge.target)].get("action")
            for field in fields:
                yield Finding(
                    "FIDELITY_WITHOUT_MODEL",
                    f"step {sid!r} {edge.label} -> {edge.target!r} sets {field}, but "
                    f"{edge.target!r} ({target}) makes no model call that reads it: "
                    "it has no effect",
                    (*path[:-1], field),
                    severity="warning",
                    key=True,
                )


def check_thread_fallback(
    graph: Graph, settings: Mapping[str, Any], reads: Callable[[str], bool]
) -> Iterator[Finding]:
    """A `full` arrival that names no thread joins the previous step's id: a warning when no
    other model step joins that thread, so the step starts an empty conversation.

    The thread of a `full` step is the step's thread_id, the transition's, default_thread,
    the step's group, else the previous step's id (docs/fidelity.md). A chain of `full` steps
    that names none breaks at its third step: the second appended to the first's thread, and
    the third looks for the second's. Only model steps (`reads`) join threads.
    """
    from runtime.context.fidelity import resolve_mode, resolve_thread

    entry = settings.get("entry_step_id")
    entry = entry if isinstance(entry, str) else (graph.ids[0] if graph.ids else None)
    # (step, previous step or None, the arrival's attributes, where to warn)
    arrivals: list[tuple[str, str | None, Mapping[str, str], tuple[str | int, ...]]] = []
    if entry in graph.pos:
        arrivals.append((entry, None, {}, ()))
    for sid in graph.ids:
        for edge, path in graph.edges[sid]:
            if edge.target in graph.pos:
                arrivals.append((edge.target, sid, edge.attrs, path))
    joined: dict[str, set[str]] = {}  # thread -> the steps that join it
    fallbacks = []
    for sid, previous, attrs, path in arrivals:
        if sid in graph.unknown or not reads(sid):
            continue
        step = graph.steps[_index_of(graph, sid)]
        if resolve_mode(attrs, step, settings)[0] != "full":
            continue
        thread, source = resolve_thread(sid, step, attrs, settings, previous)
        joined.setdefault(thread, set()).add(sid)
        if source == "previous step":
            fallbacks.append((sid, thread, attrs, path))
    seen: set[tuple[str, str]] = set()
    for sid, thread, attrs, path in fallbacks:
        if joined[thread] - {sid} or (sid, thread) in seen:
            continue
        seen.add((sid, thread))
        i = _index_of(graph, sid)
        if "fidelity" in attrs:
            where: tuple[str | int, ...] = (*path[:-1], "fidelity")
        elif "fidelity" in graph.steps[i]:
            where = ("steps", i, "fidelity")
        else:
            where = ("steps", i, "id")
        yield Finding(
            "THREAD_FALLBACK_EMPTY",
            f"step {sid!r} runs in fidelity full and no thread is named, so arriving from "
            f"{thread!r} it joins thread {thread!r} (the previous step's id), which no other "
            "model step joins: it starts an empty conversation",
            where,
            severity="warning",
        )


def check_inputs(inputs: Any, engine_owned: frozenset[str]) -> Iterator[Finding]:
    """Declared inputs may not take the name of an engine-owned field."""
    if not isinstance(inputs, Mapping):
        return
    for name in inputs:
        if name in engine_owned:
            yield Finding(
                "INPUT_SPEC_INVALID",
                f"input {name!r} is an engine-owned field; no input may set it",
                ("inputs", name),
                hint="rename the input",
                key=True,
            )
        spec = inputs[name]
        if not isinstance(spec, Mapping):
            continue
        for field in ("maxLength", "minLength", "pattern"):
            if field in spec and spec.get("type") != "string":
                yield Finding(
                    "INPUT_SPEC_INVALID",
                    f"input {name!r}: {field} applies to `type: string` inputs only",
                    ("inputs", name, field),
                    hint=f"declare `type: string`, or remove {field}",
                    key=True,
                )
        if isinstance(spec.get("pattern"), str):
            try:
                re.compile(spec["pattern"])
            except re.error as exc:
                yield Finding(
                    "INPUT_SPEC_INVALID",
                    f"input {name!r}: pattern {spec['pattern']!r} is not a regular expression "
                    f"({exc})",
                    ("inputs", name, "pattern"),
                    key=True,
                )
        low, high = spec.get("minLength"), spec.get("maxLength")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            yield Finding(
                "INPUT_SPEC_INVALID",
                f"input {name!r}: minLength {low} is over maxLength {high}: no value fits",
                ("inputs", name, "minLength"),
                key=True,
            )


_CODE_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")  # the schema reports other spellings


def check_error_codes(steps: Sequence[Step]) -> Iterator[Finding]:
    """`catch` keys and `retry.on` entries name codes of the (closed) code table, or ALL."""
    live = [c.name for c in codes.CODES.values() if not c.removed]

    def problem(code: Any, what: str, path: PathT, key: bool) -> Finding | None:
        if not isinstance(code, str) or code == "ALL" or not _CODE_NAME.match(code):
            return None
        known = codes.CODES.get(code)
        if known is not None and not known.removed:
            return None
        why = "was removed and is never raised" if known else "is not an error code"
        return Finding(
            "ERROR_CODE_UNKNOWN",
            f"{what} {code!r}, which {why}",
            path,
            hint=did_you_mean(code, [*live, "ALL"]),
            key=key,
        )

    for i, step in enumerate(steps):
        sid = step.get("id")
        catch = step.get("catch")
        for code in catch if isinstance(catch, Mapping) else ():
            found = problem(code, f"step {sid!r} catches", ("steps", i, "catch", code), True)
            if found:
                yield found
        retry = step.get("retry")
        on = retry.get("on") if isinstance(retry, Mapping) else None
        for j, code in enumerate(on if isinstance(on, list) else ()):
            found = problem(code, f"step {sid!r} retries on", ("steps", i, "retry", "on", j), False)
            if found:
                yield found


def check_pack_budgets(steps: Sequence[Step], settings: Mapping[str, Any]) -> Iterator[Finding]:
    """`pack_budget:` fractions (settings, each step) sum to at most 1 (docs/packs.md)."""
    from runtime.context.packs import budget_problems

    for message, path in budget_problems(settings.get("pack_budget")):
        yield Finding("PACK_BUDGET_INVALID", message, ("settings", "pack_budget", *path))
    for i, step in enumerate(steps):
        for message, path in budget_problems(step.get("pack_budget")):
            yield Finding(
                "PACK_BUDGET_INVALID",
                f"step {step.get('id')!r}: {message}",
                ("steps", i, "pack_budget", *path),
            )


def check_settings_refs(
    steps: Sequence[Step], settings: Mapping[str, Any], registry: Registry
) -> Iterator[Finding]:
    """`*_from_settings` fields name an existing setting of the right type."""
    from runtime.format.fastcheck import compile_check

    for i, step in enumerate(steps):
        action = registry.get(str(step.get("action")))
        for field, value in step.items():
            if not field.endswith("_from_settings") or not isinstance(value, str):
                continue
            path = ("steps", i, field)
            if value not in settings:
                yield Finding(
                    "SETTING_MISSING",
                    f"{field} names setting {value!r}, which is not set",
                    path,
                    hint=did_you_mean(value, list(settings)),
                )
                continue
            target = field[: -len("_from_settings")]
            schema = action.fields.get(target) if action else None
            if schema:
                fast = compile_check(schema)
                if fast is not None and fast(settings[value]):
                    continue  # valid: jsonschema (and its import) only to say what is wrong
                import jsonschema

                validator = jsonschema.Draft202012Validator(schema)
                error = next(iter(validator.iter_errors(settings[value])), None)
                if error is not None:
                    yield Finding(
                        "SETTING_TYPE",
                        f"setting {value!r} (read by {field}) is invalid for {target}: "
                        f"{error.message}",
                        path,
                    )


def check_actions(
    steps: Sequence[Step], settings: Mapping[str, Any], registry: Registry
) -> Iterator[Finding]:
    """Each action's own cross-field rules."""
    for i, step in enumerate(steps):
        action = registry.get(str(step.get("action")))
        if action is None:
            continue
        for p in action.check(step, settings):
            yield Finding(p.code, p.message, ("steps", i, *p.path), p.hint, p.severity, p.key)


def check_snapshot_trio(graph: Graph) -> Iterator[Finding]:
    """The older engine's fork_action: its `search_action` leads to one merge_action and not
    back to the fork (runtime/format/compat.py); a merge_action no fork leads to."""
    from runtime.format.compat import snapshot_segment

    names = {sid: str(graph.steps[graph.pos[sid]].get("action")) for sid in graph.ids}
    merged: set[str] = set()
    broken = False  # a malformed fork leaves its merge unaccounted: no second error for it
    for sid in graph.ids:
        if names[sid] != "fork_action":
            continue
        step = graph.steps[graph.pos[sid]]
        search = step.get("search_action")
        if not isinstance(search, str):
            continue  # the schema said so
        try:
            _, merge = snapshot_segment(
                sid, search, names, lambda s: graph.successors(s, with_catch=True)
            )
        except ValueError as exc:
            yield Finding(
                "SNAPSHOT_TRIO_INVALID", str(exc), ("steps", graph.pos[sid], "search_action")
            )
            broken = True
            continue
        merged.add(merge)
    for sid in graph.ids:
        if names[sid] == "merge_action" and sid not in merged and not broken:
            yield Finding(
                "SNAPSHOT_TRIO_INVALID",
                f"merge_action step {sid!r} is reached from no fork_action's search_action: "
                "it would have no snapshot results to merge",
                ("steps", graph.pos[sid], "action"),
            )


def check_unused_settings(
    steps: Sequence[Step], settings: Mapping[str, Any], registry: Registry
) -> Iterator[Finding]:
    """Settings nothing reads: no known setting, no `*_from_settings` target, no action's."""
    from runtime.format.branches import with_branch_steps
    from runtime.format.compat import OLDER_SETTINGS
    from runtime.format.schema import SETTINGS_SCHEMA

    read = set(SETTINGS_SCHEMA["properties"])
    for step in with_branch_steps(steps):  # a branch's steps read the settings too
        action = registry.get(str(step.get("action")))
        if action is not None:
            read.update(action.reads_settings)
        read.update(
            v for k, v in step.items() if k.endswith("_from_settings") and isinstance(v, str)
        )
    for key in settings:
        if isinstance(key, str) and key not in read:
            what = f" ({OLDER_SETTINGS[key]})" if key in OLDER_SETTINGS else ""
            yield Finding(
                "SETTING_UNUSED",
                f"setting {key!r}{what} is read by nothing in this pipeline",
                ("settings", key),
                hint=did_you_mean(key, sorted(read)) or "remove it, or read it with a field",
                severity="warning",
                key=True,
            )


def check_governance(steps: Sequence[Step], settings: Mapping[str, Any]) -> Iterator[Finding]:
    """settings.redact's kinds and patterns; settings.exceptions (docs/access.md)."""
    from runtime.governance import exceptions, redaction

    for p in redaction.config_problems(settings.get("redact")):
        yield Finding(p.code, p.message, ("settings", "redact", *p.path))
    ids = [str(step.get("id")) for step in steps]
    for f in exceptions.problems(settings, ids, exceptions.today_utc()):
        yield Finding(f.code, f.message, f.path, f.hint, f.severity)


def run_all(
    steps: Sequence[Step],
    settings: Mapping[str, Any],
    registry: Registry,
    doubtful: frozenset[int] = frozenset(),
    graph: Graph | None = None,
) -> Iterator[Finding]:
    """Every graph and semantic check (`doubtful`: see `Graph.build`; `graph`: built once)."""
    graph = graph or Graph.build(steps, registry, doubtful)
    yield from check_ids(steps)
    yield from check_entry(graph, settings)
    yield from check_targets(graph)
    yield from check_inbox_targets(graph)
    yield from check_flow(graph, settings)
    yield from check_cycles(graph, settings)
    yield from check_threads(graph, settings)
    yield from check_error_codes(steps)
    yield from check_settings_refs(steps, settings, registry)
    yield from check_pack_budgets(steps, settings)
    yield from check_actions(steps, settings, registry)
    yield from check_governance(steps, settings)
    yield from check_snapshot_trio(graph)
    yield from check_unused_settings(steps, settings, registry)
