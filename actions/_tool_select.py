"""Tool selection by retrieval: `tools: {select: auto, max: N, from: [...]}` (docs/tools.md).

Each candidate tool is a small document: its name (split at `_` and CamelCase), its
description, its argument names and their descriptions. The question is scored against them
with BM25 (k1 1.2, b 0.75; words lower-cased, stop words dropped, lightly stemmed), fused by
reciprocal rank with cosine similarity of MiniLM vectors when that extra is installed and
`vectors: auto` (the default) asks. Before ranking, a tool is left out when a safety tag it
declares is denied (`deny_tags`) or one it needs is missing (`allow_tags`: every tag of
the tool must be allowed), or when the subject's access policy refuses it (the seam is
`refusal`). The best `max` are offered; every candidate not offered is named with the
reason. Deterministic: ties keep the order of `from`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.retrieval.words import STOPWORDS, split_identifier

K1 = 1.2
B = 0.75
DEFAULT_MAX = 4
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def words(text: str) -> list[str]:
    """The ranking terms of a text: identifiers split, lower case, stop words out, stemmed."""
    out: list[str] = []
    for raw in _WORD.findall(text):
        for part in split_identifier(raw) or [raw.lower()]:
            if part in STOPWORDS or len(part) < 2:
                continue
            out.append(_stem(part))
    return out


def _stem(word: str) -> str:
    """A light stemmer: plural, -ing, -ed and a final e go (procedures and procedure meet)."""
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif (word.endswith("es") and word[-3:-2] in ("s", "x")) or word.endswith(("ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) > 3:
        word = word[:-1]
    return word


def tool_text(spec: Mapping[str, Any]) -> str:
    """The text a tool is ranked by: name, description, argument names and descriptions."""
    fn = spec.get("function", spec)
    parts = [str(fn.get("name", "")), str(fn.get("description", ""))]
    props = (fn.get("parameters") or {}).get("properties") or {}
    for arg, schema in props.items() if isinstance(props, Mapping) else ():
        parts.append(str(arg))
        if isinstance(schema, Mapping) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return " ".join(parts)


def bm25_scores(query: str, docs: Sequence[str]) -> list[float]:
    """BM25 of the query against each document."""
    tokenized = [words(d) for d in docs]
    n = len(tokenized)
    if not n:
        return []
    avg = sum(len(t) for t in tokenized) / n or 1.0
    df: dict[str, int] = {}
    for terms in tokenized:
        for term in set(terms):
            df[term] = df.get(term, 0) + 1
    asked = list(dict.fromkeys(words(query)))
    scores = []
    for terms in tokenized:
        tf: dict[str, int] = {}
        for term in terms:
            tf[term] = tf.get(term, 0) + 1
        score = 0.0
        for term in asked:
            f = tf.get(term)
            if not f:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * f * (K1 + 1) / (f + K1 * (1 - B + B * len(terms) / avg))
        scores.append(round(score, 6))
    return scores


def vector_scores(query: str, docs: Sequence[str]) -> list[float] | None:
    """Cosine similarity with MiniLM vectors, or None when the extra is not installed."""
    try:
        from runtime.retrieval.embeddings import make_embedder

        embedder = make_embedder("minilm")
        vectors = embedder.embed([query, *docs])
    except Exception:
        return None
    q = vectors[0]
    return [round(sum(a * b for a, b in zip(q, v, strict=False)), 6) for v in vectors[1:]]


@dataclass
class Selection:
    """What selection offered and why the others were not."""

    offered: list[str]
    scores: dict[str, float]
    not_offered: list[dict[str, Any]] = field(default_factory=list)
    ranker: str = "bm25"

    def trace(self) -> dict[str, Any]:
        """The TOOLS_SELECTED event's data."""
        return {
            "offered": self.offered,
            "not_offered": self.not_offered,
            "scores": self.scores,
            "ranker": self.ranker,
        }


def select(
    question: str,
    candidates: Sequence[tuple[str, Mapping[str, Any], Sequence[str]]],
    *,
    max_tools: int = DEFAULT_MAX,
    allow_tags: Sequence[str] | None = None,
    deny_tags: Sequence[str] = (),
    refusal: Callable[[str], str | None] | None = None,
    vectors: bool = False,
    rank: bool = True,
) -> Selection:
    """Rank (name, spec, safety tags) candidates against the question; the best max offered."""
    out: list[dict[str, Any]] = []
    eligible: list[tuple[str, Mapping[str, Any]]] = []
    for name, spec, tags in candidates:
        denied = [t for t in tags if t in deny_tags]
        unallowed = [t for t in tags if allow_tags is not None and t not in allow_tags]
        why = refusal(name) if refusal is not None else None
        if denied:
            out.append({"name": name, "reason": f"safety tag {', '.join(denied)} is denied"})
        elif unallowed:
            out.append(
                {"name": name, "reason": f"safety tag {', '.join(unallowed)} is not allowed"}
            )
        elif why is not None:
            out.append({"name": name, "reason": f"access policy: {why}"})
        else:
            eligible.append((name, spec))
    if not rank:  # `select: all`: every tool the tags and the policy allow
        return Selection([n for n, _ in eligible], {}, out, "none")
    docs = [tool_text(spec) for _, spec in eligible]
    lexical = bm25_scores(question, docs)
    scores = dict(zip([n for n, _ in eligible], lexical, strict=True))
    ranker = "bm25"
    order = sorted(range(len(eligible)), key=lambda i: (-lexical[i], i))
    dense = vector_scores(question, docs) if vectors and eligible else None
    if dense is not None:
        ranker = "bm25+minilm"
        by_dense = sorted(range(len(eligible)), key=lambda i: (-dense[i], i))
        fused = dict.fromkeys(range(len(eligible)), 0.0)
        for ranking in (order, by_dense):
            for rank, i in enumerate(ranking):
                fused[i] += 1.0 / (60 + rank + 1)
        order = sorted(fused, key=lambda i: (-fused[i], i))
        # A tool no word of the question matches may still be offered on meaning alone.
        scores = {eligible[i][0]: round(fused[i] * 1000, 3) for i in fused}
    # The best max are offered, a tool no word matched included when fewer matched (ties keep
    # the order of `from`): a model left without a tool cannot look anything up.
    offered = [eligible[i][0] for i in order[:max_tools]]
    for i in order[max_tools:]:
        out.append({"name": eligible[i][0], "reason": f"ranked below the best {max_tools}"})
    return Selection(offered, scores, out, ranker)
