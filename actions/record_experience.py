"""record_experience: store what was tried, what was expected and what happened."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions._memory import author_labels, items_from, scrubber
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
_NAME = {"type": "string", "minLength": 1}
# Fields the step may give for every experience it writes (an item may give the others).
PINNED = ("domain", "strategy", "pipeline")


class RecordExperience(Action):
    """Validate the experiences in `from` (or the step's own fields) and store them."""

    name = "record_experience"
    summary = "Store an experience (goal, hypothesis, action, prediction, outcome, lesson)."
    fields = {
        "from": {
            **_VARIABLE,
            "description": "Variable holding an experience object or a list of them (e.g. a "
            "model's JSON reply, parsed).",
        },
        "domain": {**_NAME, "description": "Domain of every experience (an item may not differ)."},
        "strategy": {**_NAME, "description": "Strategy tried (an item may not differ)."},
        "pipeline": {**_NAME, "description": "Pipeline the experience belongs to."},
        "goal_from": {**_VARIABLE, "description": "Variable holding the goal (e.g. question)."},
        "outcome_status": {"enum": ["success", "partial", "failure", "unknown"]},
        "confidence_tier": {"enum": ["gold", "silver", "bronze", "abandoned"]},
        "labels": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "description": "Security labels of every experience written (required; [] for "
            "ones anyone may read). An item's own labels are added, never removed.",
        },
        "output_to": {**_VARIABLE, "description": "Variable the ids go to (default recorded)."},
    }
    required = ("labels", "domain", "strategy")
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Experiences come from somewhere: `from`, or `goal_from` with `outcome_status`."""
        if "from" not in step and not ("goal_from" in step and "outcome_status" in step):
            yield Problem(
                "SCHEMA_INVALID",
                "record_experience needs `from`, or `goal_from` with `outcome_status`",
                ("action",),
            )

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`from` and `goal_from`, when given."""
        for key in ("from", "goal_from"):
            if isinstance(step.get(key), str):
                yield VariableRead((step[key],), (key,))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """`output_to` (default recorded)."""
        yield str(step.get("output_to") or "recorded")

    def run(self, ctx: StepContext) -> Outcome | None:
        """Build the experiences from the variable and the step; store them all or none."""
        step = ctx.step
        where = f"step {ctx.step_id!r}: " + (f"{step['from']}: " if "from" in step else "")
        raw = ctx.get(step["from"]) if "from" in step else {}
        labels = author_labels(step)
        items = []
        given = items_from(raw, where)
        for i, item in enumerate(given):
            if not isinstance(item, Mapping):
                raise RunError(
                    f"{where}experience {i + 1} must be an object of fields",
                    code="MEMORY_INVALID",
                )
            item = dict(item)
            for key in PINNED:
                if key in step and item.setdefault(key, step[key]) != step[key]:
                    raise RunError(
                        f"{where}experience {i + 1} field {key!r} is not the step's {key}",
                        code="MEMORY_INVALID",
                    )
            if "goal_from" in step:
                item.setdefault("goal", ctx.get(step["goal_from"]))
            for key in ("outcome_status", "confidence_tier"):
                if key in step:
                    item.setdefault(key, step[key])
            own = item.get("labels", [])
            if not isinstance(own, list):
                raise RunError(
                    f"{where}experience {i + 1} field 'labels' must be a list",
                    code="MEMORY_INVALID",
                )
            item["labels"] = sorted({*labels, *own})
            if len(given) == 1:  # the run's one experience: `runtime feedback RUN_ID` finds it
                item.setdefault("run_id", ctx.run_id)
            items.append(item)
        store = ctx.services.memory_writer()
        ids = store.record_experiences(items, scrub=scrubber(ctx), where=where)
        ctx.set(step.get("output_to") or "recorded", ids)
        ctx.trace("EXPERIENCE_RECORDED", ids=ids, count=len(ids), labels=labels)
        return None
