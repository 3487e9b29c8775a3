"""Dataflow checks: state variables followed through the step graph before a run.

Each action says which variables a step needs set (`Action.step_reads`, with the
field that names each) and which it may write (`Action.step_writes`); see
runtime/contract/action.py. From the entry step, a forward "may" analysis over every
transition (`outgoing`: `next`, `on_*`, router routes, `catch`, short or long form)
collects the variables that some path can have set on arrival at each step:

- at the entry: the declared inputs (any declared input, required or not), or, for a
  pipeline that declares no `inputs`, the older engine's request fields
  (`compat.REQUEST_INPUTS`); and the defaults of every action the pipeline uses;
- along a normal transition: what was set on arrival plus what the step may write;
- along a `catch` transition: what was set on arrival plus `last_error` (the engine
  writes it there), and none of the failed step's writes (an attempt's writes are
  staged and dropped when it fails).

A step that needs a variable no path from the entry sets on arrival is a
`VARIABLE_NEVER_WRITTEN` warning at the field naming it (an error under
`runtime validate --strict`). "Some path" is deliberate: a loop writes on its first
pass what it reads on the next, and a branch may write what only its own later steps
read, so requiring every path to write a variable would flag correct pipelines.

Steps that are not judged: steps no path reaches (UNREACHABLE_STEP says so), and
steps of unknown actions or with a value that failed the schema; such a step may
write anything, so nothing after it warns either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.contract.action import VariableRead
from runtime.contract.registry import Registry
from runtime.format.checks import Finding, Graph, Step, did_you_mean
from runtime.format.compat import REQUEST_INPUTS

# Written by the engine on every `catch` transition (docs/runs.md).
CATCH_VARIABLES: tuple[str, ...] = ("last_error",)
_ANY = -1  # every bit set: what a step of an unknown action may have written


@dataclass
class StepFlow:
    """What one step needs and may write."""

    reads: list[VariableRead]
    writes: frozenset[str]
    judged: bool  # False: unknown action or a failed value; it may write anything


class _Bits:
    """Variable names as bits of an int, so a set union is one `|`."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def bit(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.index)
        return 1 << found

    def of(self, names: Iterator[str] | Sequence[str] | frozenset[str]) -> int:
        out = 0
        for name in names:
            out |= self.bit(name)
        return out

    def names(self, bits: int) -> list[str]:
        if bits == _ANY:
            return sorted(self.index)
        return sorted(n for n, i in self.index.items() if bits >> i & 1)


def step_flows(graph: Graph) -> dict[str, StepFlow]:
    """Each step's reads and writes, from its action (steps not judged read nothing)."""
    out: dict[str, StepFlow] = {}
    for sid in graph.ids:
        step = graph.steps[graph.pos[sid]]
        action = graph.actions.get(sid)
        if action is None or sid in graph.unknown:
            out[sid] = StepFlow([], frozenset(), judged=False)
            continue
        out[sid] = StepFlow(
            list(action.step_reads(step)), frozenset(action.step_writes(step)), True
        )
    return out


def start_variables(graph: Graph, inputs: Any) -> list[str]:
    """Variables every run starts with: inputs (or the request fields) and action defaults."""
    names = list(inputs) if isinstance(inputs, Mapping) else list(REQUEST_INPUTS)
    for action in {a for a in graph.actions.values() if a is not None}:
        names.extend(action.defaults)
    return names


def arrivals(
    graph: Graph, flows: Mapping[str, StepFlow], entry: str, start: int, bits: _Bits
) -> dict[str, int]:
    """Step id -> the variables some path from the entry can have set on arrival (bits).

    A worklist to the fixed point: a step is visited again only when a new variable
    reaches it, so a pipeline without loops visits each step once.
    """
    catch = bits.of(CATCH_VARIABLES)
    known = graph.actions
    # (target, by catch) of each transition to a step that exists (UNKNOWN_STEP is reported).
    succ = {
        sid: [(e.target, e.label.startswith("catch ")) for e, _ in edges if e.target in known]
        for sid, edges in graph.edges.items()
    }
    writes = {sid: bits.of(f.writes) if f.judged else _ANY for sid, f in flows.items()}
    seen: dict[str, int] = {entry: start}
    queue = deque([entry])
    queued = {entry}
    while queue:
        sid = queue.popleft()
        queued.discard(sid)
        here = seen[sid]
        normal = here | writes[sid]
        caught = here | catch
        for target, by_catch in succ[sid]:
            out = caught if by_catch else normal
            before = seen.get(target)
            if before is not None:
                out |= before
                if out == before:
                    continue
            seen[target] = out
            if target not in queued:
                queued.add(target)
                queue.append(target)
    return seen


def check_dataflow(
    steps: Sequence[Step],
    settings: Mapping[str, Any],
    inputs: Any,
    registry: Registry,
    doubtful: frozenset[int] = frozenset(),
) -> Iterator[Finding]:
    """VARIABLE_NEVER_WRITTEN warnings: needed variables no path from the entry writes."""
    return check_graph(Graph.build(steps, registry, doubtful), settings, inputs)


def check_graph(graph: Graph, settings: Mapping[str, Any], inputs: Any) -> Iterator[Finding]:
    """`check_dataflow` over a step graph already built (validation shares one)."""
    entry = settings.get("entry_step_id")
    if not isinstance(entry, str) or entry not in graph.actions:
        return  # ENTRY_STEP_MISSING / ENTRY_STEP_UNKNOWN say why; no path to follow
    flows = step_flows(graph)
    if not any(flow.reads for flow in flows.values()):
        return
    bits = _Bits()
    start = bits.of(start_variables(graph, inputs))
    seen = arrivals(graph, flows, entry, start, bits)
    writers: dict[str, list[str]] | None = None  # for the messages: made on the first finding
    declared = isinstance(inputs, Mapping)
    for sid in graph.ids:
        here = seen.get(sid)
        if here is None or here == _ANY:
            continue  # unreachable, or after a step that may write anything
        for read in flows[sid].reads:
            if any(here & bits.bit(name) for name in read.names):
                continue
            if writers is None:
                writers = {}
                for wid, flow in flows.items():
                    for name in flow.writes:
                        writers.setdefault(name, []).append(wid)
            yield _finding(sid, graph.pos[sid], read, entry, here, bits, writers, declared)


def _finding(
    sid: str,
    index: int,
    read: VariableRead,
    entry: str,
    here: int,
    bits: _Bits,
    writers: Mapping[str, list[str]],
    declared: bool,
) -> Finding:
    names = read.names
    field = read.field or _dotted(read.path) or "read by the action"
    quoted = ", ".join(repr(n) for n in names)
    if len(names) == 1:
        what = f"reads {quoted} ({field}), which no step writes on any path from {entry!r} to it"
        what += ", and which is no declared input" if declared else ""
    else:
        what = f"reads one of {quoted} ({field}), none of which a step writes on any path "
        what += f"from {entry!r} to it" + (" or is a declared input" if declared else "")
    elsewhere = sorted({w for n in names for w in writers.get(n, ())})
    if elsewhere:
        listed = ", ".join(repr(w) for w in elsewhere[:3]) + (" ..." if len(elsewhere) > 3 else "")
        what += f" (written by {listed}, on no path before this step)"
    available = bits.names(here)
    hint = did_you_mean(names[0], available) if len(names) == 1 else ""
    if set(names) & set(CATCH_VARIABLES):
        advice = "the engine sets last_error only on the way through a `catch`"
    else:
        advice = "write it in a step before this one, or declare it under `inputs`"
    hint = f"{hint} Or {advice}" if hint else advice[0].upper() + advice[1:]
    path = ("steps", index, *read.path) if read.path else ("steps", index, "action")
    return Finding(
        "VARIABLE_NEVER_WRITTEN", f"step {sid!r} {what}", path, hint=hint, severity="warning"
    )


def _dotted(path: tuple[str | int, ...]) -> str:
    """`user_parts.question.source`, `rules[2].from`."""
    out = ""
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else seg)
    return out


def variables_on_arrival(
    steps: Sequence[Step], settings: Mapping[str, Any], inputs: Any, registry: Registry
) -> dict[str, list[str]]:
    """Step id -> the variables some path can have set on arrival (reached steps only)."""
    graph = Graph.build(steps, registry)
    entry = settings.get("entry_step_id")
    if not isinstance(entry, str) or entry not in graph.actions:
        return {}
    bits = _Bits()
    flows = step_flows(graph)
    seen = arrivals(graph, flows, entry, bits.of(start_variables(graph, inputs)), bits)
    return {sid: bits.names(seen[sid]) for sid in graph.ids if sid in seen}
