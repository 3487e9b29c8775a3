"""Context packs: what one model call was shown, why, and what was left out (docs/packs.md).

A pack is a plain JSON-able dict, one per model call, stored with the run
(`RunStore.save_pack`, table `run_context_packs`). It holds ids, token counts, scores,
labels and hashes, never prompt text: a pack of a huge prompt stays bounded
(`MAX_ITEMS`, `MAX_DROPS`, `MAX_FIELD`) and no secret in a prompt reaches it.

- `PackBuilder` is fed by the action that calls the model (call_model): sections typed
  `SECTIONS`, items with their source, score, labels, retrieval evidence, the decision that
  admitted them and a content hash, and a drop report of what was not sent or sent shortened.
- `canonical_bytes(pack)` is the byte form a ledger hashes; `summary(pack)` the small stable
  dict an exporter reads (pack id, section tokens).
- `budget_problems` checks a `pack_budget:` mapping for `validate`; `adherence` enforces it.
- `assert_coverage(pack)` is the test helper: PACK_COVERAGE_LOW below `MIN_COVERAGE`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from runtime.context import canonical
from runtime.errors import RunError

VERSION = 1
SECTIONS = ("policy", "task", "user", "tools", "knowledge", "memory", "history", "fidelity")
# `safety` is headroom a budget may keep unassigned: it counts in the sum, no section holds it.
BUDGET_KEYS = (*SECTIONS, "safety")
WARN_OVER = 0.05  # a section over its budget by more than this: PACK_BUDGET_OVER event
ERROR_OVER = 0.10  # ...by more than this: PACK_BUDGET_EXCEEDED
MIN_COVERAGE = 0.95  # the share of removed tokens the drop report must account for
MAX_ITEMS = 1000  # items kept per pack (the rest counted in `items_omitted`)
MAX_DROPS = 1000
MAX_FIELD = 200  # characters kept of a query, a filter value or a reason

PACK_BUDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {k: {"type": "number", "minimum": 0, "maximum": 1} for k in BUDGET_KEYS},
    "description": "Section budgets as fractions of the prompt budget (docs/packs.md): "
    "policy, task, user, tools, knowledge, memory, history, fidelity, and safety (headroom); "
    "they sum to at most 1. A section over its budget by 5-10% is a PACK_BUDGET_OVER event, "
    "by more a PACK_BUDGET_EXCEEDED error.",
}


class PackBudgetExceededError(RunError):
    """A section of a model call's pack is over its `pack_budget` share by more than 10%."""

    default_code = "PACK_BUDGET_EXCEEDED"


class PackCoverageError(AssertionError):
    """The drop report accounts for less than MIN_COVERAGE of the tokens removed."""

    code = "PACK_COVERAGE_LOW"


def content_hash(text: str) -> str:
    """sha256 of a text's UTF-8 bytes, as `sha256:<hex>` (a megabyte at a time: a large
    input is not copied whole)."""
    if len(text) <= 1 << 20:  # most texts: one encode, one call
        return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    digest = hashlib.sha256()
    for at in range(0, len(text), 1 << 20):
        digest.update(text[at : at + (1 << 20)].encode("utf-8", "surrogatepass"))
    return "sha256:" + digest.hexdigest()


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the messages sent (role and content, canonical JSON)."""
    body = [{"role": m.get("role"), "content": m.get("content") or ""} for m in messages]
    return "sha256:" + hashlib.sha256(canonical.compact_utf8(body)).hexdigest()


# Kept beside the body, not in it: the run (a column), the id (the body's hash), the number.
OUTSIDE_BODY = frozenset({"run_id", "pack_id", "seq"})


def canonical_bytes(pack: Mapping[str, Any]) -> bytes:
    """The pack's body: canonical JSON (sorted keys, no spaces, UTF-8) of all but its run id,
    pack id and number. What the store keeps and a ledger hashes; the pack id is its hash."""
    return canonical.sorted_utf8({k: v for k, v in pack.items() if k not in OUTSIDE_BODY})


def pack_id_of(body: bytes) -> str:
    """`pk_` and the first 16 hex digits of the body's sha256."""
    return "pk_" + hashlib.sha256(body).hexdigest()[:16]


def summary(pack: Mapping[str, Any]) -> dict[str, Any]:
    """The small stable form (for exporters): id, step, model, prompt hash and token counts."""
    return {
        "pack_id": pack.get("pack_id"),
        "step_id": pack.get("step_id"),
        "model": pack.get("model"),
        "prompt_hash": pack.get("prompt_hash"),
        "prompt_tokens": (pack.get("tokens") or {}).get("prompt"),
        "sections": {s["type"]: s["tokens"] for s in pack.get("sections") or ()},
        "items": sum(len(s.get("items") or ()) for s in pack.get("sections") or ()),
        "drops": len((pack.get("drops") or {}).get("items") or ()),
        "coverage": (pack.get("drops") or {}).get("coverage"),
    }


def clip(value: Any) -> Any:
    """A string cut at MAX_FIELD characters (said so); other values as they are."""
    if isinstance(value, str) and len(value) > MAX_FIELD:
        return value[:MAX_FIELD] + f"… [{len(value):,} chars]"
    return value


def budget_problems(value: Any) -> Iterator[tuple[str, tuple[str | int, ...]]]:
    """What is wrong with a `pack_budget:` mapping (message, path inside it); schema aside."""
    if not isinstance(value, Mapping):
        return
    numbers = {
        k: v for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    total = sum(numbers.values())
    if total > 1 + 1e-9:
        parts = " + ".join(f"{k} {v:g}" for k, v in numbers.items())
        yield (f"pack_budget fractions sum to {total:g} ({parts}), more than 1", ())


def resolve_budget(
    settings: Mapping[str, Any], step: Mapping[str, Any]
) -> tuple[dict[str, float], str] | None:
    """The step's `pack_budget`, else the settings'; with where it came from; None if neither."""
    for where, source in (("step", step), ("settings", settings)):
        value = source.get("pack_budget")
        if isinstance(value, Mapping) and value:
            return {str(k): float(v) for k, v in value.items()}, where
    return None


def adherence(pack: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each budgeted section's verdict: ok (within 5%), warning (5-10% over), error (more)."""
    out = []
    for s in pack.get("sections") or ():
        budget = s.get("budget")
        if budget is None:
            continue
        over = (s["tokens"] - budget) / budget if budget > 0 else (1.0 if s["tokens"] else 0.0)
        verdict = "error" if over > ERROR_OVER else "warning" if over > WARN_OVER else "ok"
        out.append(
            {
                "section": s["type"],
                "budget": budget,
                "tokens": s["tokens"],
                "over": round(over, 4),
                "verdict": verdict,
            }
        )
    return out


def assert_coverage(pack: Mapping[str, Any], minimum: float = MIN_COVERAGE) -> None:
    """Test helper: the drop report accounts for at least `minimum` of the tokens removed."""
    drops = pack.get("drops") or {}
    coverage = drops.get("coverage", 1.0)
    if coverage < minimum:
        raise PackCoverageError(
            f"PACK_COVERAGE_LOW: pack {pack.get('pack_id')} (step {pack.get('step_id')}): the "
            f"drop report accounts for {drops.get('tokens_accounted')} of "
            f"{drops.get('tokens_removed')} tokens removed ({coverage:.1%} < {minimum:.0%})"
        )


class PackBuilder:
    """Collects one model call's sections, items and drops; `finish` returns the pack."""

    def __init__(
        self,
        *,
        run_id: str,
        step_id: str,
        model: str,
        prompt_budget: int | None,
        pack_budget: tuple[Mapping[str, float], str] | None = None,
    ) -> None:
        self.run_id, self.step_id, self.model = run_id, step_id, model
        self.prompt_budget = prompt_budget
        self.fractions = dict(pack_budget[0]) if pack_budget else {}
        self.budget_from = pack_budget[1] if pack_budget else None
        self.sections: dict[str, dict[str, Any]] = {
            kind: {"type": kind, "tokens": 0, "reason": "", "items": []} for kind in SECTIONS
        }
        self.drops: list[dict[str, Any]] = []
        self.items = 0
        self.items_omitted = 0
        self.drops_omitted = 0
        self.outside = 0  # section tokens sent outside the messages (tool specs)
        self.removed = 0  # tokens the call's own reductions removed (measured)
        self.body = b""  # the finished pack's canonical bytes
        self.body_sha256 = ""  # ...and their SHA-256 (hex)
        self.accounted = 0  # ...of which the drop report names

    def reason(self, kind: str, reason: str) -> None:
        """Why the section holds what it holds (kept once: the first reason given)."""
        section = self.sections[kind]
        if not section["reason"]:
            section["reason"] = clip(reason)

    def add(self, kind: str, tokens: int, *, item: Mapping[str, Any] | None = None) -> None:
        """Count tokens into a section, and record an item of it when one is given."""
        section = self.sections[kind]
        section["tokens"] += tokens
        if item is None:
            return
        if self.items >= MAX_ITEMS:
            self.items_omitted += 1
            return
        self.items += 1
        kept = {**item, "tokens": tokens}
        for key in ("id", "reason"):  # a hostile node id (also in a reason) stays short
            value = kept.get(key)
            if type(value) is str and len(value) > MAX_FIELD:
                kept[key] = clip(value)
        section["items"].append(kept)

    def drop(self, item_id: str, reason: str, tokens_saved: int | None, **detail: Any) -> None:
        """Something considered and not sent, or sent shortened."""
        if len(self.drops) >= MAX_DROPS:
            self.drops_omitted += 1
            return
        record = {"id": clip(item_id), "reason": reason, "tokens_saved": tokens_saved}
        record.update({k: clip(v) for k, v in detail.items() if v is not None})
        self.drops.append(record)

    def removed_by_call(self, removed: int, accounted: int) -> None:
        """Tokens this call's own reductions removed, and how many of them the drops name."""
        self.removed += max(0, removed)
        self.accounted += max(0, min(accounted, removed))

    def finish(
        self, messages: Sequence[Mapping[str, Any]], prompt_tokens: int, **extra: Any
    ) -> dict[str, Any]:
        """The pack: sections in SECTIONS order, token totals, the drop report, its id."""
        sections = []
        for kind in SECTIONS:
            s = self.sections[kind]
            fraction = self.fractions.get(kind)
            budget = (
                int(fraction * self.prompt_budget)
                if fraction is not None and self.prompt_budget is not None
                else None
            )
            if not s["reason"]:
                s["reason"] = "nothing of this kind in the prompt" if not s["tokens"] else ""
            sections.append({**s, "fraction": fraction, "budget": budget})
        in_sections = sum(s["tokens"] for s in sections)
        coverage = self.accounted / self.removed if self.removed else 1.0
        pack: dict[str, Any] = {
            "version": VERSION,
            "run_id": self.run_id,
            "step_id": self.step_id,
            "model": self.model,
            "prompt_hash": prompt_hash(messages),
            "prompt_budget": self.prompt_budget,
            "pack_budget_from": self.budget_from,
            "tokens": {
                "prompt": prompt_tokens,  # the messages, exact, as the budget stage counted
                "tool_specs": self.outside,  # sent beside the messages (in `tools`)
                "sections": in_sections,
                # Role markers, delimiters and joints: what the sections do not hold.
                "framing": prompt_tokens + self.outside - in_sections,
            },
            "sections": sections,
            "items_omitted": self.items_omitted,
            "drops": {
                "items": self.drops,
                "omitted": self.drops_omitted,
                "tokens_removed": self.removed,
                "tokens_accounted": self.accounted,
                "coverage": round(coverage, 4),
            },
            **extra,
        }
        pack["adherence"] = adherence(pack)
        # Content-addressed without the run id: the same context gives the same pack id in
        # every run (a replay's packs match its recording's). The body is kept for the store.
        self.body = canonical_bytes(pack)
        self.body_sha256 = hashlib.sha256(self.body).hexdigest()  # a ledger's `pack` entry
        pack["pack_id"] = "pk_" + self.body_sha256[:16]  # pack_id_of(self.body)
        return pack


class MemoryPackStore:
    """Packs kept in memory (a run without a run store): the RunStore's pack API."""

    def __init__(self) -> None:
        self._packs: dict[str, list[dict[str, Any]]] = {}

    def save_pack(
        self,
        run_id: str,
        pack: Mapping[str, Any],
        body: bytes | None = None,
        sha256: str | None = None,
    ) -> int:
        """Store a pack (`body`: its canonical bytes, when known); its number in the run."""
        packs = self._packs.setdefault(run_id, [])
        stored = json.loads(body if body is not None else canonical_bytes(pack))
        packs.append(
            {**stored, "run_id": run_id, "pack_id": pack["pack_id"], "seq": len(packs) + 1}
        )
        return len(packs)

    def packs(self, run_id: str, step_id: str | None = None) -> list[dict[str, Any]]:
        """A run's packs in call order (one step's with step_id)."""
        return [
            dict(p)
            for p in self._packs.get(run_id, ())
            if step_id is None or p.get("step_id") == step_id
        ]
