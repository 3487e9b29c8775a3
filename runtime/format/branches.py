"""Map and parallel steps as the format layer reads them (actions/branches.py runs them).

A step written `type: map` or `type: parallel` names no action: it is the action of that
name. Its branches are `steps` (map: one branch, `item`) or `branches` (parallel: by
name). Validation, the unused-settings check, prompt hashing, the graph and the action
all read them through these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

BRANCH_TYPES = ("map", "parallel")


def kind_of(step: Mapping[str, Any]) -> str | None:
    """`map` or `parallel` for a branch step (written with `type:` or `action:`), else None."""
    kind = step.get("type") or step.get("action")
    return kind if kind in BRANCH_TYPES else None


def as_action(step: Any) -> Any:
    """The step with `action` set when it was written `type: map|parallel` only."""
    if isinstance(step, Mapping) and step.get("type") in BRANCH_TYPES and "action" not in step:
        return {**step, "action": step["type"]}
    return step


def branch_steps(step: Mapping[str, Any]) -> dict[str, Any]:
    """A branch step's branches: name -> its steps (map: `item`); {} for any other step."""
    kind = kind_of(step)
    if kind == "map":
        return {"item": step.get("steps")}
    if kind == "parallel" and isinstance(step.get("branches"), Mapping):
        return dict(step["branches"])
    return {}


def branch_refs(step: Mapping[str, Any]) -> dict[str, str]:
    """A branch step's branches given as pipelines (`pipeline: file.yaml#name`): name -> ref."""
    kind = kind_of(step)
    if kind == "map" and isinstance(step.get("pipeline"), str):
        return {"item": step["pipeline"]}
    if kind == "parallel" and isinstance(step.get("branches"), Mapping):
        return {
            str(name): branch["pipeline"]
            for name, branch in step["branches"].items()
            if isinstance(branch, Mapping) and isinstance(branch.get("pipeline"), str)
        }
    return {}


def ref_target(ref: str, base_file: str | None) -> tuple[str, str | None]:
    """(file, pack member or None) of `file.yaml#name`, the file relative to the folder of
    the pipeline that names it (base_file)."""
    file, _, member = ref.partition("#")
    path = Path(file)
    if not path.is_absolute():
        path = (Path(base_file).parent if base_file else Path.cwd()) / path
    return str(path), member or None


def with_branch_steps(steps: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """The steps, then (breadth first) the steps of their branches, nested ones too, each
    with its `action` set."""
    pending = list(steps)
    while pending:
        step = pending.pop(0)
        if not isinstance(step, Mapping):
            continue
        for branch in branch_steps(step).values():
            if isinstance(branch, list):
                pending.extend(branch)
        yield as_action(step)
