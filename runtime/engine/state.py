"""Run state: JSON variables addressed by name, plus engine-owned fields no step may overwrite."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.contract.action import ENGINE_OWNED
from runtime.errors import InputError, StateError
from runtime.format.pipeline import Pipeline

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def check_json(value: Any, what: str, step_id: str | None = None) -> None:
    """Raise STATE_NOT_SERIALIZABLE unless the value is plain JSON data."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StateError(
            f"{what} is not JSON-serialisable: {exc}",
            code="STATE_NOT_SERIALIZABLE",
            step_id=step_id,
        ) from exc


@dataclass
class RunState:
    """Everything a checkpoint holds besides the inbox."""

    variables: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    step_trace: list[str] = field(default_factory=list)
    step_count: int = 0
    # Variables written since the last checkpoint: only these are serialised again.
    dirty: set[str] | None = None  # None: everything (a new run)

    def engine_dict(self) -> dict[str, Any]:
        """Engine-owned part as JSON data."""
        return {
            "counters": self.counters,
            "step_trace": self.step_trace,
            "step_count": self.step_count,
        }


def _type_ok(value: Any, type_name: str) -> bool:
    if type_name == "any":
        return True
    if isinstance(value, bool) and type_name in ("integer", "number"):
        return False
    return isinstance(value, _PY_TYPES[type_name])


def apply_inputs(pipeline: Pipeline, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Check inputs against the pipeline's declaration; return the initial variables."""
    values = dict(inputs)
    for name in values:
        if name in ENGINE_OWNED:
            raise InputError(f"input {name!r} is an engine-owned field", code="STATE_PROTECTED")
        check_json(values[name], f"input {name!r}")
    if pipeline.inputs is None:
        return values
    unknown = sorted(set(values) - set(pipeline.inputs))
    if unknown:
        raise InputError(
            f"unknown input(s) {', '.join(unknown)}; declared: "
            f"{', '.join(sorted(pipeline.inputs)) or 'none'}",
            code="INPUT_UNKNOWN",
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
    return values
