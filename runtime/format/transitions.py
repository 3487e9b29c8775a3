"""Transitions of a step, short or long form: the one reader of every outgoing edge.

A target is written wherever a step id goes (`next`, `on_<outcome>`, `catch`
values, router `routes`) either short, as the step id, or long, as a mapping:

    next: {step: review, fidelity: full, thread_id: coding}

The long form's other keys are the transition's attributes (what the engine hands
the next step as its `arrival`). Actions never see the long form: `short_config`
rewrites each one to its step id, so `Action.targets`, routers and `ctx.step`
keep reading plain step ids. Graph checks, `runtime graph`, the engine and the
dataflow checks all read edges through `outgoing`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.contract.action import STEP_ID_PATTERN, Action, Transition

FIDELITY_MODES: tuple[str, ...] = (
    "full",
    "truncate",
    "compact",
    "summary:low",
    "summary:medium",
    "summary:high",
)
# What a long-form transition may carry besides `step`, in the order docs and labels show them.
TRANSITION_ATTRS: tuple[str, ...] = ("fidelity", "thread_id")
LONG_FORM_TITLE = "transition"  # marks the long form's schema, so its errors get their own codes
# How deep a long form may sit below the step: `routes.<name>.next` is the deepest built-in.
_MAX_DEPTH = 3

Path = tuple[str | int, ...]
EMPTY: Mapping[str, str] = {}


@dataclass(frozen=True)
class Edge:
    """An outgoing transition: label, target step id, attributes and where the target is written.

    `path` is relative to the step and ends at the step id itself: `("next",)` for the
    short form, `("next", "step")` for the long one. `attrs` holds only the attributes the
    long form sets (`{}` for the short form).
    """

    label: str
    target: str
    attrs: Mapping[str, str] = field(default_factory=dict)
    path: Path = ()

    @property
    def long(self) -> bool:
        """True when the transition was written in the long form."""
        return self.path[-1:] == ("step",)


def is_long_form(value: Any) -> bool:
    """True for a mapping that names its target under `step`."""
    return isinstance(value, Mapping) and isinstance(value.get("step"), str)


def target_of(value: Any) -> str | None:
    """The step id of a short- or long-form target, or None when the value is neither."""
    if isinstance(value, str):
        return value
    return value["step"] if is_long_form(value) else None


def attrs_of(value: Any) -> dict[str, str]:
    """The attributes a long-form target sets (string values only); `{}` for the short form."""
    if not is_long_form(value):
        return {}
    return {k: value[k] for k in TRANSITION_ATTRS if isinstance(value.get(k), str)}


def _desugar(value: Any, depth: int) -> Any:
    """A copy with every long form down to `_MAX_DEPTH` replaced by its step id."""
    if is_long_form(value):
        return value["step"]
    if depth >= _MAX_DEPTH or not isinstance(value, Mapping):
        return value
    return {k: _desugar(v, depth + 1) for k, v in value.items()}


def _at(step: Mapping[str, Any], path: Path) -> Any:
    node: Any = step
    for seg in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(seg)
    return node


def _declared(step: Mapping[str, Any], action: type[Action] | None) -> list[Transition]:
    """The action's transitions over the short form (any `on_*` field for an unknown action)."""
    probe = {k: _desugar(v, 1) for k, v in step.items()}  # the step itself is no long form
    if action is not None:
        return list(action.targets(probe))
    # Unknown action (reported elsewhere): every on_* field is a branch, so one typo does
    # not cascade into flow errors.
    return list(Action.targets(probe)) + [
        Transition(k[3:], (k,), v)
        for k, v in probe.items()
        if k.startswith("on_") and isinstance(v, str)
    ]


def outgoing(step: Mapping[str, Any], action: type[Action] | None) -> list[Edge]:
    """Every transition of a step as (label, target, attrs, path), in the action's order."""
    edges = []
    for t in _declared(step, action):
        raw = _at(step, t.path)
        if is_long_form(raw):
            edges.append(Edge(t.label, t.target, attrs_of(raw), (*t.path, "step")))
        else:
            edges.append(Edge(t.label, t.target, {}, t.path))
    return edges


def short_config(step: Mapping[str, Any], action: type[Action] | None) -> dict[str, Any]:
    """The step's configuration with each long-form transition replaced by its step id.

    Only values at transition paths change; a mapping elsewhere keeps its shape.
    """
    out: dict[str, Any] = dict(step)
    for edge in outgoing(step, action):
        if not edge.long:
            continue
        node: dict[Any, Any] = out
        rel = edge.path[:-1]  # the long form itself
        for seg in rel[:-1]:  # copy each container on the way, never the caller's
            child = node[seg]
            node[seg] = child = dict(child)
            node = child
        node[rel[-1]] = edge.target
    return out


def arrivals(
    step: Mapping[str, Any], action: type[Action] | None
) -> dict[tuple[str, str], dict[str, str]]:
    """(label, target) -> attrs of every long-form transition that sets an attribute."""
    return {(e.label, e.target): dict(e.attrs) for e in outgoing(step, action) if e.attrs}


def target_schema(description: str = "", *, pattern: bool = True) -> dict[str, Any]:
    """The JSON Schema of a transition target: a step id, or the long form.

    `pattern=False` keeps a field that never checked the id's spelling (the `on_*` fields
    and routes actions declare as plain strings) that way: a misspelt id stays UNKNOWN_STEP
    with its did-you-mean, in either form.
    """
    ref: dict[str, Any] = {"type": "string"}
    if pattern:
        ref["pattern"] = STEP_ID_PATTERN
    schema: dict[str, Any] = {"anyOf": [ref, long_form_schema(pattern=pattern)]}
    if description:
        schema["description"] = description
    return schema


def long_form_schema(*, pattern: bool = True) -> dict[str, Any]:
    """The long form: `{step, fidelity?, thread_id?}`, nothing else."""
    step: dict[str, Any] = {"type": "string", "description": "Target step."}
    if pattern:
        step["pattern"] = STEP_ID_PATTERN
    return {
        "type": "object",
        "title": LONG_FORM_TITLE,
        "required": ["step"],
        "properties": {
            "step": step,
            "fidelity": fidelity_schema("Fidelity of the target step when arrived at this way."),
            "thread_id": {
                "type": "string",
                "minLength": 1,
                "description": "Thread a `full` target joins when arrived at this way.",
            },
        },
        "additionalProperties": False,
    }


def fidelity_schema(description: str) -> dict[str, Any]:
    """A fidelity mode."""
    return {"type": "string", "enum": list(FIDELITY_MODES), "description": description}
