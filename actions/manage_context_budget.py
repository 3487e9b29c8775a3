"""manage_context_budget: guard the global prompt budget with code-aware compaction."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from runtime.context.blocks import block_id, format_block, seed_block
from runtime.contract.action import Action, Outcome, Problem, StepContext
from runtime.errors import RunError

SEP = "\n\n"
# The token counts of context_blocks (by digest), written with it, so the next budget step
# (in this process or after a resume) encodes only what is new (TokenCounter.take_blocks).
COUNTS = "context_block_tokens"

_RULE = {
    "type": "object",
    "required": ["language", "policy"],
    "additionalProperties": False,
    "properties": {
        "language": {"enum": ["sql", "dotnet"]},
        "policy": {"enum": ["always", "threshold", "demand"]},
        "threshold": {"type": "number", "description": "Fraction of max_context_tokens in (0, 1]."},
        "inbox_key": {"type": "string", "minLength": 1, "description": "Demand topic."},
    },
}


class ManageContextBudget(Action):
    """Append node_texts to context_blocks all-or-nothing; on_ok or on_over."""

    name = "manage_context_budget"
    summary = "Keep context_blocks + node_texts within max_context_tokens, compacting code."
    fields = {
        "on_ok": {"type": "string", "description": "Step when everything fits."},
        "on_over": {"type": "string", "description": "Step when it does not (nothing appended)."},
        "divide_new_content": {
            "type": "string",
            "description": "Marker line before each appended batch.",
        },
        "compact_code": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "rules": {
                    "type": "array",
                    "items": _RULE,
                    "description": "First rule whose language matches applies.",
                }
            },
        },
    }
    required = ("on_ok", "on_over")
    outcomes = ("ok", "over")
    reads = ("context_blocks", "node_texts")
    # COUNTS is read with a fallback (absent or stale: the context is counted), so it is no need.
    writes = ("context_blocks", "node_texts", COUNTS)
    # ok with nothing new appended leaves context_blocks as it was: it must exist from the start.
    defaults = {"context_blocks": [], "node_texts": []}
    runnable = True

    @classmethod
    def check(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> Iterator[Problem]:
        """Rules complete and in range; the global budget is set."""
        if not isinstance(settings.get("max_context_tokens"), int):
            yield Problem(
                "BUDGET_SETTING_MISSING",
                "manage_context_budget needs settings.max_context_tokens",
                ("action",),
            )
        rules = (
            (step.get("compact_code") or {}).get("rules")
            if isinstance(step.get("compact_code"), Mapping)
            else None
        )
        for i, rule in enumerate(rules if isinstance(rules, list) else []):
            if not isinstance(rule, Mapping):
                continue
            path = ("compact_code", "rules", i)
            policy = rule.get("policy")
            threshold = rule.get("threshold")
            if policy == "threshold":
                if threshold is None:
                    yield Problem(
                        "COMPACTION_RULE_INVALID", "policy threshold needs `threshold`", path
                    )
                elif not isinstance(threshold, int | float) or not 0 < threshold <= 1:
                    yield Problem(
                        "COMPACTION_RULE_INVALID",
                        f"threshold must be in (0, 1], got {threshold!r}",
                        (*path, "threshold"),
                    )
            if policy == "demand" and not rule.get("inbox_key"):
                yield Problem("COMPACTION_RULE_INVALID", "policy demand needs `inbox_key`", path)

    @staticmethod
    def _language(item: Mapping[str, Any]) -> str:
        lang = item.get("language")
        if lang in ("sql", "dotnet", "unknown"):
            return str(lang)  # set by the indexer through classifiers
        import classifiers

        return classifiers.classify(str(item.get("text", ""))).language

    @classmethod
    def output_bounds(cls, step: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, int]:
        """context_blocks, joined, never exceed settings.max_context_tokens."""
        limit = settings.get("max_context_tokens")
        return {"context_blocks": limit} if isinstance(limit, int) else {}

    def run(self, ctx: StepContext) -> Outcome | None:
        """Append all incoming nodes (compacted per the rules) or none of them."""
        limit = int(ctx.settings["max_context_tokens"])
        counter = ctx.services.tokens()
        marker = ctx.step.get("divide_new_content")
        existing = [b for b in ctx.get("context_blocks", []) if isinstance(b, str)]
        incoming = [i for i in ctx.get("node_texts", []) if isinstance(i, Mapping)]
        rules = list((ctx.step.get("compact_code") or {}).get("rules") or [])
        demand_topics = {r["inbox_key"] for r in rules if r.get("policy") == "demand"}
        demands = [m for m in ctx.messages if m.topic in demand_topics]
        active = {m.topic for m in demands}
        base = [b for b in existing if b != marker] if marker else existing
        present = {block_id(b) for b in base}
        carried = counter.take_blocks(base, ctx.get(COUNTS, None))
        current = counter.count_joined(base, SEP) if base else 0
        raw_blocks = [format_block(i, compact=False, metadata=_metadata(i)) for i in incoming]
        # Counts fetch_node_texts handed on from the index: only headers and joints are encoded.
        seeded = sum(
            seed_block(counter, raw, i) for raw, i in zip(raw_blocks, incoming, strict=True)
        )
        raw_total = counter.count_joined(raw_blocks, SEP) if raw_blocks else 0
        if raw_total > limit:
            raise RunError(
                f"the incoming texts alone need {raw_total} tokens, more than "
                f"max_context_tokens {limit}",
                code="PIPELINE_BUDGET_MISCONFIG",
            )
        # What a node is appended after: the context, then the batch marker (a node that is
        # appended makes the batch non-empty, so the marker comes with it).
        head = base + ([marker] if marker else [])
        new_blocks: list[str] = []
        per_node: list[dict[str, Any]] = []
        for item, raw in zip(incoming, raw_blocks, strict=True):
            nid = item.get("id")
            if nid in present:
                per_node.append({"id": nid, "path": item.get("path"), "skipped": "duplicate"})
                continue
            lang = self._language(item)
            rule = next((r for r in rules if r.get("language") == lang), None)
            policy = rule.get("policy") if rule else None
            before = counter.count_block(raw, SEP)
            # Exact total with this node appended raw (incremental: blocks' counts are cached).
            crossing = policy == "threshold" and (
                counter.count_joined([*head, *new_blocks, raw], SEP)
                > float(rule["threshold"]) * limit
            )
            compact = (
                policy == "always"
                or crossing
                or (policy == "demand" and rule.get("inbox_key") in active)
            )
            block = raw
            if compact:
                import classifiers

                text = classifiers.compact(str(item.get("text", "")), lang, counter=counter)
                compact = text != item.get("text")  # compaction that saves nothing is not claimed
                block = (
                    format_block(item, compact=True, text=text, metadata=_metadata(item))
                    if compact
                    else raw
                )
            after = counter.count_block(block, SEP)
            present.add(nid)
            per_node.append(
                {
                    "id": nid,
                    "path": item.get("path"),
                    "language": lang,
                    "policy": policy,
                    "compacted": compact,
                    "tokens_before": before,
                    "tokens_after": after,
                }
            )
            new_blocks.append(block)
        final = base + ([marker] if marker and new_blocks else []) + new_blocks
        # Exact, and still incremental: count_joined reuses every block's cached count.
        total = counter.count_joined(final, SEP) if final else 0
        fits = total <= limit
        decision = "ok" if fits else "over"
        ctx.trace(
            "MANAGE_CONTEXT_BUDGET",
            budget=limit,
            current_tokens=current,
            total_tokens=total,
            decision=decision,
            demand=sorted(active),
            nodes=per_node,
            carried_counts={"context": carried, "incoming": seeded},
        )
        if not fits:
            for m in demands:  # the demand is not spent: it waits for the next attempt
                ctx.requeue(m)
            return Outcome.to_branch("over")
        if new_blocks:
            ctx.set("context_blocks", final)
        counts = counter.carry_blocks(final)  # every block of final is counted by now
        if counts != ctx.get(COUNTS, None):
            ctx.set(COUNTS, counts)
        ctx.set("node_texts", [])
        return Outcome.to_branch("ok")


def _metadata(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The metadata lines fetch_node_texts selected (and measured) for a node's block."""
    meta = item.get("metadata")
    return meta if isinstance(meta, Mapping) else None
