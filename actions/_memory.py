"""What the `remember` and `record_experience` actions share: items, labels, scope, secrets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actions._scope import run_scope
from runtime.errors import RunError


def items_from(raw: Any, where: str) -> list[Any]:
    """The items a variable holds: a text or an object is one item, a list is several."""
    if isinstance(raw, str | Mapping):
        return [raw]
    if isinstance(raw, list):
        for i, item in enumerate(raw):
            if not isinstance(item, str | Mapping):
                raise RunError(
                    f"{where}item {i + 1} must be a text or an object, not {type(item).__name__}",
                    code="MEMORY_INVALID",
                )
        return list(raw)
    raise RunError(
        f"{where}must hold a text, an object or a list of them, not {type(raw).__name__}",
        code="MEMORY_INVALID",
    )


def author_labels(step: Mapping[str, Any]) -> list[str]:
    """The step's `labels` (the pipeline author's), checked like scope values."""
    from runtime.retrieval.node import scope_value_problem

    labels = step.get("labels")
    if not isinstance(labels, list):
        raise RunError("the step's `labels` must be a list", code="MEMORY_UNLABELLED")
    for label in labels:
        problem = scope_value_problem(label)
        if problem:
            raise RunError(f"step label {problem}", code="SCOPE_INVALID")
    return sorted(set(labels))


def run_scope_values(ctx: Any, session_from: str | None) -> dict[str, str]:
    """The run's repository and snapshot (when set) and the session the step names."""
    from runtime.retrieval.node import scope_value_problem

    scope = run_scope(ctx)
    out = {
        key: value
        for key, value in (("repository", scope.repository), ("snapshot", scope.snapshot))
        if value is not None
    }
    if session_from:
        session = ctx.get(session_from)
        problem = scope_value_problem(session)
        if problem:
            raise RunError(f"session from {session_from!r} {problem}", code="SCOPE_INVALID")
        out["session"] = session
    return out


def scrubber(ctx: Any) -> Any:
    """A scrubber of every key the pipeline configures: no stored field may hold one."""
    from runtime.models.guard import scrubber_for

    return scrubber_for(ctx.settings)
