"""remember: write memories (what the team decided, how a thing is done) to the memory store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions._memory import author_labels, items_from, run_scope_values, scrubber
from runtime.contract.action import (
    VARIABLE_PATTERN,
    Action,
    Outcome,
    Problem,
    StepContext,
    VariableRead,
)
from runtime.errors import RunError

_VARIABLE = {"type": "string", "pattern": VARIABLE_PATTERN}
_LABELS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "description": "Security labels of every memory written (required; [] for memories anyone "
    "may read). An item's own labels are added, never removed.",
}


class Remember(Action):
    """Validate the memories in `from` and store them; write their ids to `output_to`."""

    name = "remember"
    summary = "Store memories (validated, labelled, scoped to the run) in the memory store."
    fields = {
        "from": {
            **_VARIABLE,
            "description": "Variable holding a text, a memory object, or a list of either.",
        },
        "text": {"type": "string", "minLength": 1, "description": "A memory's text, given here."},
        "type": {
            "enum": ["episodic", "procedural", "semantic"],
            "description": "Type of memories that do not name one (default semantic).",
        },
        "labels": _LABELS,
        "importance": {"type": "number", "minimum": 0, "maximum": 1},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "ttl_seconds": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Memories expire this long after they are written.",
        },
        "half_life_days": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "Their search score halves every this many days.",
        },
        "session_from": {
            **_VARIABLE,
            "description": "Variable holding a session id: the memories are seen only in it.",
        },
        "output_to": {**_VARIABLE, "description": "Variable the ids go to (default remembered)."},
    }
    required = ("labels",)
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Exactly one of from and text."""
        given = [k for k in ("from", "text") if k in step]
        if len(given) != 1:
            yield Problem(
                "SCHEMA_INVALID",
                "remember needs exactly one of `from` and `text`",
                (given[-1],) if given else ("action",),
            )

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`from` and `session_from`, when given."""
        for key in ("from", "session_from"):
            if isinstance(step.get(key), str):
                yield VariableRead((step[key],), (key,))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """`output_to` (default remembered)."""
        yield str(step.get("output_to") or "remembered")

    def run(self, ctx: StepContext) -> Outcome | None:
        """Build the items, stamp the step's labels and the run's scope, store them."""
        step = ctx.step
        raw = step["text"] if "text" in step else ctx.get(step["from"])
        where = f"step {ctx.step_id!r}: " + ("" if "text" in step else f"{step['from']}: ")
        scope = run_scope_values(ctx, step.get("session_from"))
        labels = author_labels(step)
        items = []
        for i, item in enumerate(items_from(raw, where)):
            item = {"text": item} if isinstance(item, str) else dict(item)
            item.setdefault("type", step.get("type", "semantic"))
            for key in ("importance", "confidence", "ttl_seconds", "half_life_days"):
                if key in step:
                    item.setdefault(key, step[key])
            # The step's labels always apply: an item (maybe a model's output) may add
            # labels, never drop one.
            own = item.get("labels", [])
            if not isinstance(own, list):
                raise RunError(
                    f"{where}memory {i + 1} field 'labels' must be a list", code="MEMORY_INVALID"
                )
            item["labels"] = sorted({*labels, *own})
            mine = item.get("scope") or {}
            if not isinstance(mine, Mapping):
                raise RunError(
                    f"{where}memory {i + 1} field 'scope' must be a mapping", code="MEMORY_INVALID"
                )
            for key, value in scope.items():
                if mine.get(key, value) != value:
                    raise RunError(
                        f"{where}memory {i + 1} field 'scope.{key}' is not the run's {key}; "
                        "a memory is written for the run's scope",
                        code="SCOPE_WIDENED",
                    )
            item["scope"] = {**mine, **scope}
            item.setdefault("provenance", {"source": f"run:{ctx.run_id}"})
            items.append(item)
        store = ctx.services.memory_writer()
        ids = store.remember(items, scrub=scrubber(ctx), where=where)
        target = step.get("output_to") or "remembered"
        ctx.set(target, ids)
        ctx.trace("REMEMBERED", ids=ids, count=len(ids), labels=labels, scope=scope)
        return None
