"""set_variables: shape state with ordered rules (copy, lists, lines, JSON, context blocks, clear)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from runtime.contract.action import (
    ENGINE_OWNED,
    VARIABLE_PATTERN,
    Action,
    Outcome,
    Problem,
    StepContext,
    VariableRead,
)
from runtime.errors import RunError

TRANSFORMS = ("copy", "to_list", "split_lines", "parse_json", "to_context_blocks", "clear")


def _fail(message: str) -> RunError:
    return RunError(message, code="TRANSFORM_FAILED")


def apply_transform(name: str, value: Any, current: Any = None) -> Any:
    """Apply one transform to a value (`current` is the destination's present value)."""
    if name == "copy":
        return value
    if name == "to_list":
        if value is None:
            return []
        if isinstance(value, list):
            return value
        if isinstance(value, str):
            return [value] if value.strip() else []
        return [value]
    if name == "split_lines":
        if value is None:
            return []
        if not isinstance(value, str):
            raise _fail(f"split_lines needs a string, got {type(value).__name__}")
        return [line.strip() for line in value.splitlines() if line.strip()]
    if name == "parse_json":
        if not isinstance(value, str):
            raise _fail(f"parse_json needs a string, got {type(value).__name__}")
        try:
            return json.loads(value)
        except ValueError as exc:
            raise _fail(f"parse_json: invalid JSON: {exc}") from exc
    if name == "to_context_blocks":
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if value.strip() else []
        if isinstance(value, list):
            out = []
            for item in value:
                if isinstance(item, str):
                    text = item
                elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
                    text = item["text"]
                else:
                    raise _fail(
                        "to_context_blocks: items must be strings or {text: str}, got "
                        f"{type(item).__name__}"
                    )
                if text.strip():
                    out.append(text.strip())
            return out
        raise _fail(f"to_context_blocks cannot use a {type(value).__name__}")
    if name == "clear":
        for kind in (list, dict, str):
            if isinstance(current, kind):
                return kind()
        return None
    raise _fail(f"unknown transform {name!r}")


def _rules(step: Mapping[str, Any]) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(index, rule) of the step's rules that are mappings (a rule that failed is left out)."""
    rules = step.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, Mapping):
            yield i, rule


class SetVariables(Action):
    """Apply `rules` in order: `{set, from | value, transform}`."""

    name = "set_variables"
    summary = "Write state variables from other variables or literals, with transforms."
    fields = {
        "rules": {
            "type": "array",
            "minItems": 1,
            "description": "Rules applied in order.",
            "items": {
                "type": "object",
                "required": ["set"],
                "additionalProperties": False,
                "properties": {
                    "set": {
                        "type": "string",
                        "pattern": VARIABLE_PATTERN,
                        "description": "Destination variable (no dots, not engine-owned).",
                    },
                    "from": {"type": "string", "description": "Source variable."},
                    "value": {"description": "A literal value."},
                    "transform": {"enum": list(TRANSFORMS), "description": "Default copy."},
                },
            },
        },
    }
    required = ("rules",)
    writes = ("<rules[].set>",)
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Exactly one of from/value; destinations not engine-owned."""
        rules = step.get("rules")
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            if not isinstance(rule, Mapping):
                continue
            if ("from" in rule) == ("value" in rule):
                yield Problem(
                    "RULE_INVALID", "a rule needs exactly one of `from` and `value`", ("rules", i)
                )
            if rule.get("set") in ENGINE_OWNED:
                yield Problem(
                    "PROTECTED_FIELD", f"{rule['set']!r} is engine-owned", ("rules", i, "set")
                )

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """Each rule's `from`, unless an earlier rule of the step sets it."""
        earlier: set[str] = set()
        for i, rule in _rules(step):
            source = rule.get("from")
            if isinstance(source, str) and source not in earlier:
                yield VariableRead((source,), ("rules", i, "from"))
            if isinstance(rule.get("set"), str):
                earlier.add(rule["set"])

    @classmethod
    def step_writes(cls, step: Mapping[str, Any]) -> Iterator[str]:
        """Each rule's `set`."""
        return (rule["set"] for _, rule in _rules(step) if isinstance(rule.get("set"), str))

    def run(self, ctx: StepContext) -> Outcome | None:
        """Apply the rules in order; later rules see earlier writes."""
        for rule in ctx.step["rules"]:
            dest = rule["set"]
            value = ctx.get(rule["from"]) if "from" in rule else _literal(rule.get("value"))
            transform = rule.get("transform", "copy")
            try:
                result = apply_transform(transform, value, ctx.get(dest, None))
            except RunError as exc:
                exc.message = f"rule set {dest!r}: {exc.message}"
                raise
            ctx.set(dest, result)
        return None


def _literal(value: Any) -> Any:
    """A literal from the pipeline as plain JSON of its own: the run's value is never the
    pipeline's object (which every run of the pipeline shares)."""
    if isinstance(value, list):
        return [_literal(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _literal(v) for k, v in value.items()}
    return value
