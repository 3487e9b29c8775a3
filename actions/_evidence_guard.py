"""What a call_model step lets through of the text it did not write (issue 29).

Before the prompt is assembled, `guard(ctx)` reads each user part's value once and decides:

- evidence blocks under the step's `relevance_floor` are dropped as off-topic: a block's
  relevance is the share of the question's informative words (stems, identifiers split)
  its id, path or text holds; the question decides nothing when it has no such word;
- with `on_injection: drop`, evidence blocks the detector flags
  (runtime/context/injection.py) are dropped; by default (`neutralise`) they are sent with
  their flagged lines quoted as data, as before;
- a part that reads the run's evidence (`context_blocks`, `node_texts`) or held evidence
  blocks, and has none left (nothing retrieved, every block dropped), gets
  `SAFE_CONTEXT`: a fixed text that says nothing relevant was found, never an empty
  part nor a partial one that invites invention;
- any other part that a step wrote (not a run input: what the person gave, the question
  first) is text a store, an assembly or a model made: its flagged lines are quoted as
  data too; so are conversation_history's turns (earlier turns are data).

Each decision is traced (`EVIDENCE_DROPPED`, `RETRIEVED_INSTRUCTION_FLAGGED`,
`MINIMAL_SAFE_CONTEXT`) and listed for the context pack's drop report (`drops`). The
step's reads then go through `GuardedContext`, so the messages, the budget stage and the
pack all see the same values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.context.blocks import HEADER, as_evidence, block_id, split_block, split_blocks
from runtime.context.injection import neutralise, scan
from runtime.contract.action import VARIABLE_PATTERN, StepContext

# The run's evidence variables: a part reading one is evidence even when it holds nothing.
EVIDENCE_SOURCES = frozenset({"context_blocks", "node_texts"})
# Never altered: what the person asks.
QUESTION_SOURCES = frozenset({"question"})
SAFE_CONTEXT = (
    "No evidence: nothing relevant to the question was found (the search returned nothing, "
    "or every item retrieved was dropped as off-topic or unsafe). Say that no evidence was "
    "found; do not answer from memory and cite nothing."
)
MAX_FINDINGS = 50

RELEVANCE_SCHEMA: dict[str, Any] = {
    "description": "Evidence blocks less relevant than this to the question are not sent: "
    "relevance is the share of the question's informative words a block's id, path or text "
    "holds (0-1). A number, or {min, query_from} (docs/retrieval-defenses.md).",
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        {
            "type": "object",
            "required": ["min"],
            "additionalProperties": False,
            "properties": {
                "min": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "query_from": {
                    "type": "string",
                    "pattern": VARIABLE_PATTERN,
                    "description": "Variable holding the question (default question).",
                },
            },
        },
    ],
}
INJECTION_SCHEMA: dict[str, Any] = {
    "enum": ["neutralise", "drop"],
    "description": "Evidence blocks (in user parts and tool results) the injection detector "
    "flags: sent with the flagged lines quoted as data (neutralise, the default) or not "
    "sent (drop). Other flagged text is always neutralised (docs/retrieval-defenses.md).",
}


def floor_of(step: Mapping[str, Any]) -> tuple[float, str] | None:
    """(min, query_from) of the step's relevance_floor, or None."""
    value = step.get("relevance_floor")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value), "question"
    if isinstance(value, Mapping) and isinstance(value.get("min"), int | float):
        return float(value["min"]), str(value.get("query_from") or "question")
    return None


def relevance(question_stems: frozenset[str], block: str) -> float:
    """The share of the question's stems the block (header and text) holds; 1.0 when the
    question has none (nothing to judge by)."""
    from runtime.retrieval.query import question_stems as stems_of

    if not question_stems:
        return 1.0
    return len(question_stems & stems_of(block)) / len(question_stems)


@dataclass
class Guarded:
    """What guard() decided: the values to read instead, the drop report's entries."""

    values: dict[str, Any] = field(default_factory=dict)
    drops: list[dict[str, Any]] = field(default_factory=list)


def guard(ctx: StepContext, count: Callable[[str], int]) -> Guarded:
    """Each user part's value as the model may see it (module docstring), and
    conversation_history's turns when the step sends them; traced. `count`: the model's
    token counter (what a dropped block would have cost)."""
    out = Guarded()
    parts = ctx.step.get("user_parts") or {}
    floor = floor_of(ctx.step)
    stems: frozenset[str] = frozenset()
    if floor is not None:
        from runtime.retrieval.query import question_stems

        asked = ctx.get(floor[1], None)
        stems = question_stems(asked if isinstance(asked, str) else json.dumps(asked))
    drop_flagged = ctx.step.get("on_injection") == "drop"
    seen: set[str] = set()
    for name, part in parts.items():
        source = part.get("source") if isinstance(part, Mapping) else None
        if not isinstance(source, str) or source in seen or part.get("handle"):
            continue
        seen.add(source)
        raw = ctx.get(source, None)
        value = as_evidence(raw)
        blocks = _blocks(value)
        if blocks is not None:
            kept = []
            for block in blocks:
                why = _drop_reason(ctx, block, stems, floor, drop_flagged, out, count)
                if why is None:
                    kept.append(block)
            if len(kept) < len(blocks):
                out.values[source] = kept if kept else SAFE_CONTEXT
            if not kept:
                _safe(ctx, name, source, "all_dropped", len(blocks))
        elif source in EVIDENCE_SOURCES and raw in (None, "", [], {}):
            out.values[source] = SAFE_CONTEXT
            _safe(ctx, name, source, "no_evidence", 0)
        elif source not in QUESTION_SOURCES and source not in ctx.inputs and raw is not None:
            text = raw if isinstance(raw, str) else _rendered(raw)
            safe, findings = neutralise(text)
            if findings:
                out.values[source] = safe
                _flagged(ctx, out, f"user_parts.{name}", findings, source=source)
    if ctx.step.get("use_history"):
        turns = ctx.get("conversation_history", None)
        if isinstance(turns, list):
            out.values["conversation_history"] = _history(ctx, turns, out)
    return out


def _blocks(value: Any) -> list[str] | None:
    """The evidence blocks of a value, or None when it is not evidence."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, str) for v in value)
        and any(v.startswith(HEADER) for v in value)
    ):
        return list(value)
    if isinstance(value, str) and HEADER in value:
        return split_blocks(value)
    return None


def _rendered(value: Any) -> str:
    """A non-text value as call_model renders it (JSON, or plain strings one per line)."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    return json.dumps(value, ensure_ascii=False, indent=1)


def _drop_reason(
    ctx: StepContext,
    block: str,
    stems: frozenset[str],
    floor: tuple[float, str] | None,
    drop_flagged: bool,
    out: Guarded,
    count: Callable[[str], int],
) -> str | None:
    """Why a block is not sent (traced and recorded), or None when it is."""
    header, text = split_block(block)
    if not header:
        return None
    node = block_id(block) or "(no id)"
    findings = scan(text)
    if findings and drop_flagged:
        _flagged(ctx, out, node, findings, action="dropped", tokens=count(block))
        return "injection"
    if floor is not None:
        score = relevance(stems, block)
        if score < floor[0]:
            tokens = count(block)
            ctx.trace(
                "EVIDENCE_DROPPED",
                node=node,
                reason="off_topic",
                relevance=round(score, 4),
                floor=floor[0],
                tokens=tokens,
            )
            out.drops.append(
                {
                    "id": node,
                    "reason": "off_topic",
                    "tokens_saved": tokens,
                    "relevance": round(score, 4),
                    "floor": floor[0],
                    "by": "relevance_floor",
                }
            )
            return "off_topic"
    if findings:  # sent quoted as data: call_model traces it as it renders the block
        out.drops.append(_entry(node, findings, "neutralised", 0))
    return None


def _flagged(
    ctx: StepContext,
    out: Guarded | None,
    where: str,
    findings: list[Any],
    *,
    action: str = "neutralised",
    tokens: int | None = 0,
    **extra: Any,
) -> None:
    """RETRIEVED_INSTRUCTION_FLAGGED for text that is not an evidence block in a user part
    (those call_model traces as it renders them), and the drop report's entry."""
    ctx.trace(
        "RETRIEVED_INSTRUCTION_FLAGGED",
        node=where,
        action=action,
        count=len(findings),
        findings=[
            {"kind": f.kind, "line": f.line, "excerpt": f.excerpt} for f in findings[:MAX_FINDINGS]
        ],
        **extra,
    )
    if out is not None:
        out.drops.append(_entry(where, findings, action, tokens))


def _entry(where: str, findings: list[Any], action: str, tokens: int | None) -> dict[str, Any]:
    """The drop report's entry of flagged text (dropped, or sent neutralised: 0 saved)."""
    return {
        "id": where,
        "reason": "injection",
        "tokens_saved": tokens,
        "action": action,
        "kinds": sorted({f.kind for f in findings}),
        "by": "injection detector",
    }


def _safe(ctx: StepContext, part: str, source: str, cause: str, considered: int) -> None:
    ctx.trace(
        "MINIMAL_SAFE_CONTEXT",
        part=part,
        source=source,
        cause=cause,
        considered=considered,
        text=SAFE_CONTEXT,
    )


def _history(ctx: StepContext, turns: list[Any], out: Guarded) -> list[Any]:
    """conversation_history's turns with flagged lines quoted as data; each traced.
    Turns that are not {role, content} are left for call_model to refuse."""
    kept = []
    for i, turn in enumerate(turns):
        content = turn.get("content") if isinstance(turn, Mapping) else None
        if isinstance(content, str):
            safe, findings = neutralise(content)
            if findings:
                _flagged(ctx, out, f"history[{i}]", findings, role=turn.get("role"))
                turn = {**turn, "content": safe}
        kept.append(turn)
    return kept


class GuardedContext:
    """The step context with the guarded values read instead of the run's."""

    def __init__(self, ctx: StepContext, values: Mapping[str, Any]) -> None:
        self._ctx = ctx
        self._values = dict(values)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def get(self, name: str, *default: Any) -> Any:
        """The guarded value when there is one, else the run's."""
        if name in self._values:
            return self._values[name]
        return self._ctx.get(name, *default)

    def set(self, name: str, value: Any) -> None:
        """Written to the real context; a later read sees the new value."""
        self._values.pop(name, None)
        self._ctx.set(name, value)
