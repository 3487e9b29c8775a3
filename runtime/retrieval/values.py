"""Values: the principles that keep coming back, clustered from experiences' lessons.

`runtime values rebuild` reads every experience (abandoned ones left out), clusters its
lessons (axis `lesson`) and its surprises (axis `surprise`) and stores one value per
cluster of at least `min_size` experiences: the member nearest the centroid as the
representative text, with `axis`, `cluster_size`, `similarity_to_centroid`, the member
ids and domains, and the union of the members' labels (a value is no less restricted
than what it was drawn from).

Vectors: the embedder's when one is installed, else TF-IDF term vectors of the stemmed,
identifier-split words. Clustering is deterministic: a greedy pass in a fixed order
(tier, then id) joins each text to the nearest centroid at or above the threshold, then
two passes reassign each text to its nearest centroid; ties go to the earlier cluster.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

VALUE_AXES = ("lesson", "surprise")
MIN_SIZE = 2
# Cosine at or above which a text joins a cluster: term vectors share fewer dimensions
# than sentence embeddings, whose unrelated texts are already ~0.2 apart.
TERM_THRESHOLD = 0.3
EMBEDDING_THRESHOLD = 0.6
REFINE_PASSES = 2
_TIER_ORDER = {"gold": 0, "silver": 1, "bronze": 2, "abandoned": 3}

Vector = dict[int, float]


def _terms(text: str) -> list[str]:
    from runtime.retrieval.query import word_stem
    from runtime.retrieval.words import STOPWORDS, WORD, split_identifier

    out = []
    for word in WORD.findall(text):
        for part in split_identifier(word):
            if part not in STOPWORDS and len(part) > 1 and not part.isdigit():
                out.append(word_stem(part))
    return out


def term_vectors(texts: Sequence[str]) -> list[Vector]:
    """TF-IDF vectors (unit length, sparse) of texts, over a vocabulary in sorted order."""
    counts = [Counter(_terms(t)) for t in texts]
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    vocab = {term: i for i, term in enumerate(sorted(df))}
    n = len(texts)
    out = []
    for c in counts:
        # Smoothed IDF (+1): a term every text shares still counts (two texts saying the
        # same thing would otherwise share nothing).
        vec = {
            vocab[t]: (1 + math.log(k)) * (math.log((1 + n) / (1 + df[t])) + 1.0)
            for t, k in c.items()
        }
        out.append(_unit(vec))
    return out


def _unit(vec: Vector) -> Vector:
    norm = math.sqrt(sum(v * v for v in vec.values()))
    return {k: v / norm for k, v in vec.items()} if norm else {}


def _dense(vectors: Sequence[Sequence[float]]) -> list[Vector]:
    return [_unit({i: float(x) for i, x in enumerate(v) if x}) for v in vectors]


def _cos(a: Vector, b: Vector) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b.get(k, 0.0) for k, v in a.items())


def _centroid(members: Sequence[Vector]) -> Vector:
    total: dict[int, float] = {}
    for vec in members:
        for k, v in vec.items():
            total[k] = total.get(k, 0.0) + v
    return _unit(total)


def cluster(vectors: Sequence[Vector], threshold: float) -> list[list[int]]:
    """Clusters (lists of indices into vectors, in index order), deterministically."""
    centroids: list[Vector] = []
    assignment: list[int] = []
    for vec in vectors:
        best, score = -1, threshold
        for c, centroid in enumerate(centroids):
            s = _cos(vec, centroid)
            if s >= score and (best < 0 or s > score):
                best, score = c, s
        if best < 0:
            centroids.append(dict(vec))
            assignment.append(len(centroids) - 1)
        else:
            assignment.append(best)
            members = [vectors[i] for i, a in enumerate(assignment) if a == best]
            centroids[best] = _centroid(members)
    for _ in range(REFINE_PASSES):
        groups = [
            [vectors[i] for i, a in enumerate(assignment) if a == c] for c in range(len(centroids))
        ]
        centroids = [_centroid(g) if g else {} for g in groups]
        changed = False
        for i, vec in enumerate(vectors):
            scores = [_cos(vec, c) for c in centroids]
            best = max(range(len(scores)), key=lambda c: (scores[c], -c))
            if best != assignment[i] and scores[best] > scores[assignment[i]]:
                assignment[i] = best
                changed = True
        if not changed:
            break
    out: dict[int, list[int]] = {}
    for i, a in enumerate(assignment):
        out.setdefault(a, []).append(i)
    return [out[c] for c in sorted(out)]


def build_values(
    experiences: Sequence[Mapping[str, Any]],
    *,
    embedder: Any = None,
    min_size: int = MIN_SIZE,
) -> list[dict[str, Any]]:
    """The value records of the experiences' clusters (see the module docstring)."""
    kept = sorted(
        (e for e in experiences if e.get("confidence_tier") != "abandoned"),
        key=lambda e: (_TIER_ORDER.get(str(e.get("confidence_tier")), 9), str(e["id"])),
    )
    values: list[dict[str, Any]] = []
    for axis in VALUE_AXES:
        members = [e for e in kept if str(e.get(axis) or "").strip()]
        if len(members) < min_size:
            continue
        texts = [str(e[axis]).strip() for e in members]
        if embedder is not None:
            vectors = _dense(embedder.embed(texts))
            threshold, method = EMBEDDING_THRESHOLD, str(embedder.name)
        else:
            vectors = term_vectors(texts)
            threshold, method = TERM_THRESHOLD, "terms"
        for group in cluster(vectors, threshold):
            if len(group) < min_size:
                continue
            centroid = _centroid([vectors[i] for i in group])
            sims = {i: _cos(vectors[i], centroid) for i in group}
            rep = max(group, key=lambda i: (round(sims[i], 9), -i))
            ids = sorted(str(members[i]["id"]) for i in group)
            key = hashlib.sha256(f"{axis}\n{members[rep]['id']}\n{','.join(ids)}".encode())
            values.append(
                {
                    "id": f"val-{axis}-{key.hexdigest()[:12]}",
                    "axis": axis,
                    "text": texts[rep],
                    "cluster_size": len(group),
                    "similarity_to_centroid": round(sims[rep], 6),
                    "members": ids,
                    "representative": str(members[rep]["id"]),
                    "domains": sorted({str(members[i]["domain"]) for i in group}),
                    "labels": sorted({lb for i in group for lb in members[i]["labels"]}),
                    "method": method,
                }
            )
    values.sort(key=lambda v: (v["axis"], -v["cluster_size"], v["id"]))
    return values


def rebuild_values(store: Any, *, min_size: int = MIN_SIZE) -> dict[str, Any]:
    """Recompute and store every value; {values, experiences, method}."""
    experiences = store.all_experiences()
    values = build_values(experiences, embedder=store.embedder, min_size=min_size)
    store.replace_values(values)
    return {
        "values": len(values),
        "experiences": len(experiences),
        "method": values[0]["method"]
        if values
        else ("terms" if store.embedder is None else store.embedder.name),
    }
