"""Run state: JSON variables addressed by name, plus engine-owned fields no step may overwrite."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.contract.action import ENGINE_OWNED, VARIABLE_PATTERN, Action
from runtime.contract.text import invalid_text
from runtime.errors import ActionContractError, InputError, StateError
from runtime.format.pipeline import Pipeline

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


# Values are checked where they enter (inputs, writes, inbox payloads, trace data) by walking
# them, not by encoding them: a 1 MB string is one type test instead of 1 MB of throwaway JSON.
JSON_SCALARS: frozenset[type] = frozenset({str, int, bool, type(None)})
_MAX_DEPTH = 400  # deeper is refused, which also ends a walk round a circular reference


def json_problem(value: Any) -> str | None:
    """Why a value is not plain JSON data (where, and what is wrong), or None when it is.

    Plain JSON data round-trips through a checkpoint unchanged: strings, integers, finite
    floats, booleans, None, lists (tuples come back as lists) and dicts with string keys.
    """
    if type(value) in JSON_SCALARS:
        return None
    bad = _walk(value, 0)
    if bad is None:
        return None
    path, reason = bad
    path.reverse()
    where = "".join(f"[{p!r}]" for p in path[:12]) + ("[...]" if len(path) > 12 else "")
    return f"at value{where}: {reason}" if where else reason


def _walk(value: Any, depth: int) -> tuple[list[Any], str] | None:
    """(path from the innermost part outwards, reason) of the first non-JSON part, or None."""
    kind = type(value)
    if kind in JSON_SCALARS:
        return None
    if kind is float or (kind is not dict and isinstance(value, float)):
        return None if value - value == 0.0 else ([], f"{value!r} is not a JSON number")
    if depth >= _MAX_DEPTH:
        return ([], f"nested deeper than {_MAX_DEPTH} levels (a circular reference?)")
    if kind is list or kind is tuple or (kind is not dict and isinstance(value, list | tuple)):
        for i, item in enumerate(value):
            if type(item) in JSON_SCALARS:
                continue
            bad = _walk(item, depth + 1)
            if bad is not None:
                bad[0].append(i)
                return bad
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str and not isinstance(key, str):
                return ([], f"key {key!r} ({type(key).__name__}) is not a string")
            if type(item) in JSON_SCALARS:
                continue
            bad = _walk(item, depth + 1)
            if bad is not None:
                bad[0].append(key)
                return bad
        return None
    if isinstance(value, str | int):  # subclasses; bool is an int
        return None
    return ([], f"type {kind.__name__} is not JSON data")


def check_json(value: Any, what: str, step_id: str | None = None) -> None:
    """Raise STATE_NOT_SERIALIZABLE unless the value is plain JSON data (see json_problem)
    whose strings are valid Unicode (no lone surrogate: runtime/contract/text.py)."""
    if type(value) is str:
        # Valid JSON text too: a lone surrogate cannot be written as UTF-8 (store, --json).
        problem = invalid_text(value)
    elif type(value) in JSON_SCALARS:
        return
    else:
        problem = json_problem(value) or invalid_text(value)
    if problem is not None:
        raise StateError(
            f"{what} is not JSON-serialisable: {problem}",
            code="STATE_NOT_SERIALIZABLE",
            step_id=step_id,
        )


@dataclass
class RunState:
    """Everything a checkpoint holds besides the inbox."""

    variables: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    step_trace: list[str] = field(default_factory=list)
    step_count: int = 0
    # Variables written since the last checkpoint: only these are serialised again.
    dirty: set[str] | None = None  # None: everything (a new run)
    # Conversation threads of `full` model steps (docs/fidelity.md): id -> messages. Part of
    # the run state, checkpointed with it (the store appends only new messages).
    threads: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def engine_dict(self) -> dict[str, Any]:
        """Engine-owned part as JSON data."""
        out: dict[str, Any] = {
            "counters": self.counters,
            "step_trace": self.step_trace,
            "step_count": self.step_count,
        }
        if self.threads:
            out["threads"] = self.threads
        return out


def _type_ok(value: Any, type_name: str) -> bool:
    if type_name == "any":
        return True
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _PY_TYPES[type_name])


def _near_inputs(unknown: Iterable[str], declared: list[str]) -> str:
    """The hint for unknown inputs: each one near a declared name, as "'question' for 'questoin'"."""
    import difflib

    near = []
    for name in unknown:
        close = difflib.get_close_matches(name, declared, n=1, cutoff=0.6)
        close = close or [d for d in declared if d.lower() == name.lower()][:1]
        if close:
            near.append(f"{close[0]!r} for {name!r}")
    return f"did you mean {', '.join(near)}?" if near else ""


def apply_inputs(pipeline: Pipeline, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Check inputs against the pipeline's declaration; return the initial variables."""
    values = dict(inputs)
    # The subject is the run's, not a variable: checked here, kept in the run's inputs
    # (ctx.inputs, which no step changes), never in the state a step may write.
    if "subject" in values:
        from runtime.governance.subject import parse_subject

        problem = invalid_text(values["subject"])
        if problem is not None:
            raise InputError(
                f"input 'subject' is not valid Unicode text: {problem}", code="INPUT_INVALID_TEXT"
            )
        parse_subject(values.pop("subject"))
    for name in values:
        if name in ENGINE_OWNED:
            raise InputError(f"input {name!r} is an engine-owned field", code="STATE_PROTECTED")
        # One policy for text that is not valid Unicode: refused where it enters, here for
        # the embedding API and resume as in the CLI (runtime/contract/text.py).
        problem = invalid_text(name) or invalid_text(values[name])
        if problem is not None:
            raise InputError(
                f"input {name!r} is not valid Unicode text: {problem}", code="INPUT_INVALID_TEXT"
            )
        check_json(values[name], f"input {name!r}")
    if pipeline.inputs is None:
        return values
    unknown = sorted(set(values) - set(pipeline.inputs))
    if unknown:
        raise InputError(
            f"unknown input(s) {', '.join(unknown)}; declared: "
            f"{', '.join(sorted(pipeline.inputs)) or 'none'}",
            code="INPUT_UNKNOWN",
            hint=_near_inputs(unknown, sorted(pipeline.inputs)) or None,
        )
    for name, spec in pipeline.inputs.items():
        if name not in values:
            if spec.has_default:
                values[name] = spec.default
            elif spec.required:
                raise InputError(f"required input {name!r} is missing", code="INPUT_MISSING")
            continue
        if not _type_ok(values[name], spec.type):
            raise InputError(
                f"input {name!r} must be {spec.type}, got {type(values[name]).__name__}",
                code="INPUT_TYPE",
            )
        value = values[name]
        if not isinstance(value, str):
            continue
        if spec.max_length is not None and len(value) > spec.max_length:
            raise InputError(
                f"input {name!r} holds {len(value)} characters; its maxLength is {spec.max_length}",
                code="INPUT_TOO_LONG",
            )
        if spec.min_length is not None and len(value) < spec.min_length:
            raise InputError(
                f"input {name!r} holds {len(value)} characters; its minLength is {spec.min_length}",
                code="INPUT_TOO_SHORT",
            )
        if spec.pattern is not None and re.search(spec.pattern, value) is None:
            raise InputError(
                f"input {name!r} ({len(value)} characters) does not match its pattern "
                f"`{spec.pattern}`",
                code="INPUT_PATTERN",
            )
    return values


def action_defaults(actions: Iterable[type[Action]]) -> dict[str, Any]:
    """The state defaults the given actions declare (``Action.defaults``), checked once."""
    out: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for cls in actions:
        for name, value in cls.defaults.items():
            if not isinstance(name, str) or not re.fullmatch(VARIABLE_PATTERN, name):
                raise ActionContractError(
                    f"action {cls.name!r} declares a default for {name!r}, which is no "
                    "variable name"
                )
            if name in ENGINE_OWNED:
                raise ActionContractError(
                    f"action {cls.name!r} declares a default for engine-owned {name!r}"
                )
            try:
                text = json.dumps(value, allow_nan=False, sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise ActionContractError(
                    f"action {cls.name!r}: default of {name!r} is not JSON: {exc}"
                ) from exc
            if name in out:
                # Two actions starting one variable differently: neither value may win silently.
                if json.dumps(out[name], sort_keys=True) != text:
                    raise ActionContractError(
                        f"actions {owner[name]!r} and {cls.name!r} declare different defaults "
                        f"for {name!r}: {out[name]!r} and {value!r}"
                    )
                continue
            out[name], owner[name] = value, cls.name
    return out


def initial_variables(defaults: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A new run's variables: fresh copies of the action defaults, then the inputs (inputs win)."""
    # A JSON round trip copies: no run may share a default list with another.
    seeded = {n: json.loads(json.dumps(v)) for n, v in defaults.items() if n not in inputs}
    return {**seeded, **inputs}
