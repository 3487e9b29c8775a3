"""inbox_dispatcher: turn a model's `dispatch` directives into inbox messages, by allowlist."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from actions import _jsonish
from runtime.contract.action import Action, Outcome, StepContext, VariableRead

_TARGET_KEYS = ("target_step_id", "target", "id")


class InboxDispatcher(Action):
    """Only listed targets and allowed keys pass; the topic is always the rule's."""

    name = "inbox_dispatcher"
    summary = "Send allow-listed inbox messages from a model's dispatch directives."
    fields = {
        "directives_key": {
            "type": "string",
            "description": "Key holding the directives (default dispatch).",
        },
        "source": {
            "type": "string",
            "description": "Variable to read (default last_model_response).",
        },
        "rules": {
            "type": "object",
            "minProperties": 1,
            "description": "Target step id -> {topic, allow_keys, rename}.",
            "additionalProperties": {
                "type": "object",
                "required": ["topic"],
                "additionalProperties": False,
                "properties": {
                    "topic": {"type": "string", "minLength": 1},
                    "allow_keys": {"type": "array", "items": {"type": "string"}},
                    "rename": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
    }
    required = ("rules",)
    reads = ("last_model_response",)
    runnable = True

    @classmethod
    def inbox_targets(cls, step: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str]]:
        """Rule keys are step ids."""
        rules = step.get("rules")
        for target in rules if isinstance(rules, Mapping) else []:
            yield ("rules", target), str(target)

    @classmethod
    def step_reads(cls, step: Mapping[str, Any]) -> Iterator[VariableRead]:
        """`source` (default last_model_response): unset, nothing is ever sent."""
        yield VariableRead.named(step, "source", "last_model_response")

    def run(self, ctx: StepContext) -> Outcome | None:
        """Filter, rename and send each directive; drop the rest (traced)."""
        parsed = _jsonish.parse(ctx.get(ctx.step.get("source", "last_model_response"), None))
        directives: Any = None
        if isinstance(parsed, Mapping):
            directives = parsed.get(ctx.step.get("directives_key", "dispatch"))
        if isinstance(directives, Mapping):
            directives = [directives]
        sent, dropped = 0, []
        for d in directives if isinstance(directives, list) else []:
            if not isinstance(d, Mapping):
                dropped.append("not an object")
                continue
            target = next((d[k] for k in _TARGET_KEYS if isinstance(d.get(k), str)), None)
            rule = ctx.step["rules"].get(target) if target else None
            if rule is None:
                dropped.append(f"target {target!r} not allowed")
                continue
            raw = (
                d.get("payload")
                if isinstance(d.get("payload"), Mapping)
                else {k: v for k, v in d.items() if k not in (*_TARGET_KEYS, "topic", "payload")}
            )
            allow = rule.get("allow_keys")
            payload = {k: v for k, v in raw.items() if allow is None or k in allow}
            rename = rule.get("rename") or {}
            payload = {rename.get(k, k): v for k, v in payload.items()}
            if not payload:
                dropped.append(f"empty payload for {target!r}")
                continue
            ctx.enqueue(target, rule["topic"], payload)  # the rule's topic, never the model's
            sent += 1
        ctx.trace("INBOX_DISPATCH", sent=sent, dropped=dropped)
        return None
