"""The evidence hook: how an evaluation shapes the evidence a run fetches, without editing it.

`fetch_node_texts` consults `services.evidence_hook` when one is set (never otherwise;
`runtime eval` sets one per run, docs/eval.md):

1. `candidates(step_id, ids)` before the budget: the pipeline's own candidates, then the
   plan's distractors not already there; with `k` the list is cut or padded to k ids
   (kept first: the evidence the pipeline found, the distractors, the pipeline's other
   candidates, then `extra`: nodes most similar to the evidence).
2. `budget(step_id, unit, budget)`: the evidence budget (a `tokens` variant sets it).
3. `arrange(step_id, ids)` after the budget: the ids fetched, the evidence among them moved
   to `position` (start, middle, end, or shuffled with the seed); the others keep their order.

Pure functions of what they are given: the node store is read by the caller.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

POSITIONS = ("start", "middle", "end", "shuffled")


@dataclass
class EvidencePlan:
    """One evaluation run's plan for the evidence path (docs/eval.md, "The evidence hook")."""

    evidence: frozenset[str] = frozenset()
    distractors: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()  # padding for k: nodes most similar to the evidence
    position: str | None = None
    seed: int = 0
    k: int | None = None
    tokens: int | None = None
    applied: list[dict[str, object]] = field(default_factory=list)

    def describe(self) -> dict[str, object]:
        """What the plan does, for the EVIDENCE_HOOK trace event."""
        return {
            "position": self.position,
            "seed": self.seed,
            "k": self.k,
            "tokens": self.tokens,
            "distractors": len(self.distractors),
        }

    def candidates(self, step_id: str, ids: Sequence[str]) -> list[str]:
        """The pipeline's candidates with the distractors added; with k, exactly k ids.

        With k, what is kept first: the pipeline's candidates that are evidence (never
        added by the plan: recall still measures the pipeline), the distractors, the
        pipeline's other candidates, then padding; kept ids stay in that listing order.
        """
        own = list(dict.fromkeys(ids))
        seen = set(own)
        added = [d for d in dict.fromkeys(self.distractors) if d not in seen]
        if self.k is None:
            out = own + added
        else:
            pad = [d for d in dict.fromkeys(self.extra) if d not in seen and d not in added]
            wanted = set(self.distractors)
            ranked = [i for i in own if i in self.evidence] + list(dict.fromkeys(self.distractors))
            ranked += [i for i in own if i not in self.evidence and i not in wanted] + pad
            keep = set(ranked[: self.k])
            out = [i for i in own + added + pad if i in keep]
        self.applied.append({"step": step_id, "stage": "candidates", "ids": len(out)})
        return out

    def budget(self, step_id: str, unit: str, budget: int) -> int:
        """The evidence budget: the variant's tokens when it gives them, else the step's."""
        if self.tokens is not None and unit == "tokens":
            return self.tokens
        return budget

    def arrange(self, step_id: str, ids: Sequence[str]) -> list[str]:
        """The fetched ids with the evidence among them at the plan's position."""
        out = place(ids, self.evidence, self.position, self.seed)
        self.applied.append({"step": step_id, "stage": "arrange", "ids": len(out)})
        return out


def place(
    ids: Sequence[str], evidence: frozenset[str], position: str | None, seed: int
) -> list[str]:
    """ids with those in evidence moved to position; None keeps the order."""
    ids = list(ids)
    if position is None:
        return ids
    if position not in POSITIONS:
        raise ValueError(f"unknown evidence position {position!r}")
    if position == "shuffled":
        random.Random(seed).shuffle(ids)
        return ids
    hits = [i for i in ids if i in evidence]
    rest = [i for i in ids if i not in evidence]
    if position == "start":
        return hits + rest
    if position == "end":
        return rest + hits
    # middle: as many others before the evidence as after it (one more after when odd)
    half = len(rest) // 2
    return rest[:half] + hits + rest[half:]
