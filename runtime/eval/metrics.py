"""The arithmetic of `runtime eval`: per-run measures, retrieval ranks, means and intervals.

Pure functions of plain values, so each figure can be checked by hand (tests/runtime/eval/).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Student's t at 97.5% for n-1 degrees of freedom (a two-sided 95% interval), 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def knowledge_ids(pack: Mapping[str, Any]) -> list[str]:
    """The node ids of a pack's knowledge section, in the order the model saw them."""
    for section in pack.get("sections") or ():
        if section.get("type") == "knowledge":
            return [
                str(item["id"])
                for item in section.get("items") or ()
                if item.get("source") in ("search", "expansion", "assembly")
                and not str(item["id"]).startswith("user_parts.")
            ]
    return []


def seen_ids(packs: Sequence[Mapping[str, Any]]) -> set[str]:
    """Every node id any model call of the run was shown as evidence."""
    out: set[str] = set()
    for p in packs:
        out.update(knowledge_ids(p))
    return out


def evidence_recall(expected: Sequence[set[str]], seen: set[str]) -> float | None:
    """Share of expected entries with a node the model saw; None when none is expected."""
    if not expected:
        return None
    return sum(1 for ids in expected if ids & seen) / len(expected)


def positions(order: Sequence[str], evidence: set[str]) -> list[float]:
    """Where the evidence sat among the blocks: 0 the first block, 1 the last."""
    n = len(order)
    if n == 0:
        return []
    return [i / (n - 1) if n > 1 else 0.0 for i, nid in enumerate(order) if nid in evidence]


def fact_coverage(facts: Sequence[Any], answer: str) -> float | None:
    """Share of facts the answer states; None when the case lists none."""
    if not facts:
        return None
    return sum(1 for f in facts if f.found(answer)) / len(facts)


def contains_all(needles: Sequence[str], answer: str) -> float | None:
    """1.0 when the answer holds every string (any case), else 0.0; None when none given."""
    if not needles:
        return None
    folded = answer.casefold()
    return 1.0 if all(n.casefold() in folded for n in needles) else 0.0


def tools_used(expected: Sequence[str], called: Iterable[str]) -> float | None:
    """Share of the expected tools the model called; None when none is expected."""
    if not expected:
        return None
    got = set(called)
    return sum(1 for t in expected if t in got) / len(expected)


def found_rank(hits: Sequence[Mapping[str, Any]], expected: Sequence[set[str]]) -> int | None:
    """1-based rank of the first hit that is, or holds as a child, an expected node."""
    every = set().union(*expected) if expected else set()
    for i, h in enumerate(hits, 1):
        if h["id"] in every or every & set(h.get("children") or ()):
            return i
    return None


def ndcg(hits: Sequence[Mapping[str, Any]], expected: Sequence[set[str]], k: int) -> float:
    """nDCG@k with binary gains: a hit scores when it is (or holds) an entry not yet credited."""
    if not expected:
        return 0.0
    credited: set[int] = set()
    dcg = 0.0
    for i, h in enumerate(hits[:k], 1):
        ids = {h["id"], *(h.get("children") or ())}
        for j, entry in enumerate(expected):
            if j not in credited and entry & ids:
                credited.add(j)
                dcg += 1.0 / math.log2(i + 1)
                break
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(len(expected), k) + 1))
    return dcg / ideal


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None; None when there are none."""
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def interval(values: Sequence[float]) -> tuple[float, float] | None:
    """A 95% confidence interval of the mean (Student's t); None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    m = sum(values) / n
    sd = statistics.stdev(values)
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * sd / math.sqrt(n)
    return (m - half, m + half)
