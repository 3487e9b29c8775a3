"""redact: a variable with personal data and secrets masked, written to another (docs/access.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions import _redact
from runtime.contract.action import (
    VARIABLE_PATTERN,
    Action,
    Outcome,
    Problem,
    StepContext,
    VariableRead,
)
from runtime.governance import redaction


class Redact(Action):
    """Mask `source` (a string, or every string in a list or mapping) into `target`."""

    name = "redact"
    summary = (
        "Mask e-mail addresses, phone numbers, card numbers, IBANs, secrets and custom patterns."
    )
    fields = {
        "source": {"type": "string", "minLength": 1, "description": "Variable to mask."},
        "target": {
            "type": "string",
            "pattern": VARIABLE_PATTERN,
            "description": "Variable that gets the masked value (not engine-owned).",
        },
        "kinds": {
            "type": "array",
            "items": {"type": "string"},
            "uniqueItems": True,
            "description": f"Kinds to mask (default settings.redact's, else all: "
            f"{', '.join(redaction.KINDS)}).",
        },
        "patterns": {
            **redaction.SCHEMA["anyOf"][1]["properties"]["patterns"],
            "description": "Custom patterns {name, regex}, added to settings.redact's.",
        },
    }
    required = ("source", "target")
    writes = ("<target>",)
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Kinds are known ones; each custom pattern compiles and does not backtrack away."""
        own = {k: step[k] for k in ("kinds", "patterns") if k in step}
        for p in redaction.config_problems(own):
            yield Problem(p.code, p.message, p.path)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """The source variable."""
        if isinstance(step.get("source"), str):
            yield VariableRead((step["source"],), ("source",))

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """The target variable."""
        if isinstance(step.get("target"), str):
            yield step["target"]

    def run(self, ctx: StepContext) -> Outcome | None:
        """Mask the source into the target; trace REDACTED (kinds and counts, no value)."""
        own = {k: ctx.step[k] for k in ("kinds", "patterns") if k in ctx.step}
        config = redaction.resolve(own or True, ctx.settings.get("redact") or True)
        # A governed exception lifting `redaction` for this step copies the value unmasked.
        redactor = _redact.redactor_for(ctx, config)
        value = ctx.get(ctx.step["source"])
        if redactor is None:
            ctx.set(ctx.step["target"], value)
            return None
        masking = _redact.Masking(ctx, redactor)
        ctx.set(ctx.step["target"], masking.value(value))
        masking.trace()
        return None
