"""Security scope of a run: repository, snapshot and allowed labels.

The pipeline's settings may pin each of them; the run's inputs may then only narrow
what is pinned, never widen or replace it:

- `repository` / `snapshot`: an input equal to the pinned value, or absent (None), is
  accepted; any other value is SCOPE_WIDENED. Unpinned, the input decides, and absent
  means every repository (snapshot).
- `allowed_labels`: an input must be a subset of the pinned list (SCOPE_WIDENED names
  the extra labels); `[]` narrows to unlabelled nodes only. Unpinned, the input decides.

Every value, from inputs or settings, must be a non-blank string without surrounding
whitespace (SCOPE_INVALID): `""` must never reach a read, where it would mean "all".
Values are compared exactly: a case variant, a look-alike character, a wildcard or SQL
syntax is a different name, not a pattern. Model output never reaches this: the scope
comes only from what the caller passed in (run inputs) and what the pipeline author
configured (settings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.errors import RunError, StateError

if TYPE_CHECKING:
    from runtime.retrieval.node import Scope


def _given(value: Any, where: str) -> str:
    from runtime.retrieval.node import scope_value_problem

    problem = scope_value_problem(value)
    if problem is not None:
        if not isinstance(value, str):
            raise StateError(f"{where} must be a string", code="VARIABLE_TYPE")
        raise RunError(f"{where} {problem}", code="SCOPE_INVALID")
    return str(value)


def _name(ctx: Any, name: str) -> str | None:
    """A repository or snapshot: the input when it repeats the pinned value or none is pinned."""
    pinned = ctx.settings.get(name)
    if pinned is not None:
        pinned = _given(pinned, f"settings.{name}")
    value = ctx.inputs.get(name)
    if value is None:
        return pinned
    value = _given(value, f"input {name}")
    if pinned is not None and value != pinned:
        # The pinned value is not quoted: the caller need not learn what the author pinned.
        raise RunError(
            f"input {name} {value!r} is not the {name} pinned in settings; "
            "inputs may only narrow the scope",
            code="SCOPE_WIDENED",
        )
    return value


def _labels(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and all(isinstance(x, str) for x in value)):
        raise StateError(f"{where} must be a list of strings", code="VARIABLE_TYPE")
    return [_given(label, f"{where} label") for label in value]


def run_scope(ctx: Any) -> Scope:
    """The caller's scope for this run: the inputs, within what settings pin."""
    from runtime.retrieval.node import Scope  # loaded with the first search, not at validation

    pinned = _labels(ctx.settings.get("allowed_labels"), "settings.allowed_labels")
    labels = _labels(ctx.inputs.get("allowed_labels"), "allowed_labels")
    if labels is None:
        labels = pinned
    elif pinned is not None:
        extra = sorted(set(labels) - set(pinned))
        if extra:
            raise RunError(
                f"input allowed_labels adds {', '.join(map(repr, extra))}, not allowed by "
                "settings.allowed_labels; inputs may only narrow the labels",
                code="SCOPE_WIDENED",
            )
    return Scope(
        _name(ctx, "repository"),
        _name(ctx, "snapshot"),
        tuple(labels) if labels is not None else None,
    )
