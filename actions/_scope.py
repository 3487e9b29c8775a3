"""Security scope of a run: repository, snapshot and allowed labels from inputs, else settings.

Model output never reaches this: the scope comes only from what the caller
passed in (run inputs) or what the pipeline author configured (settings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.errors import StateError

if TYPE_CHECKING:
    from runtime.retrieval.node import Scope


def run_scope(ctx: Any) -> Scope:
    """The caller's scope for this run."""
    from runtime.retrieval.node import Scope  # loaded with the first search, not at validation

    def pick(name: str) -> Any:
        if name in ctx.inputs and ctx.inputs[name] is not None:
            return ctx.inputs[name]
        return ctx.settings.get(name)

    labels = pick("allowed_labels")
    if labels is not None and not (
        isinstance(labels, list) and all(isinstance(x, str) for x in labels)
    ):
        raise StateError("allowed_labels must be a list of strings", code="VARIABLE_TYPE")
    repo, snap = pick("repository"), pick("snapshot")
    return Scope(
        str(repo) if repo else None,
        str(snap) if snap else None,
        tuple(labels) if labels is not None else None,
    )
