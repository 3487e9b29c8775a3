"""Memories on Postgres against SQLite: write rate and search latency (issue 34).

The memories are real text: the sentences of this repository's docs/*.md (a quarter
labelled `secret`, so the label filter and the admitted-only statistics do work), written
in batches of 100 with BM25 only (no embedder). Each search asks one of 40 questions made
of words from the same docs, limit 10, as a caller without the label (the store holds
items it may not see: SQLite scores with FTS5's formula over the admitted items) and as
one cleared for it (SQLite: FTS5's own bm25()). The Postgres server
is started here (tests/postgres.py, fsync off as in the tests), on 127.0.0.1 over TCP.

Run: python benchmarks/pg_memories.py [--sizes 1000,5000] [--queries 40]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.retrieval.memories import SqliteMemoryStore  # noqa: E402
from runtime.retrieval.pgmemories import PostgresMemoryStore  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402


def sentences() -> list[str]:
    """Every sentence of docs/*.md between 30 and 400 characters, in a fixed order."""
    out: dict[str, None] = {}
    for path in sorted((ROOT / "docs").glob("*.md")):
        for part in re.split(r"(?<=[.!?])\s+|\n\n", path.read_text()):
            part = " ".join(part.split())
            if 30 <= len(part) <= 400:
                out[part] = None
    return list(out)


def items(texts: list[str], n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        text = texts[i % len(texts)] + ("" if i < len(texts) else f" (copy {i // len(texts)})")
        out.append({"type": "semantic", "text": text, "labels": ["secret"] if i % 4 == 0 else []})
    return out


def questions(texts: list[str], count: int) -> list[str]:
    rng = random.Random(34)
    words = [w for t in texts for w in re.findall(r"[A-Za-z_]{4,}", t)]
    return [" ".join(rng.sample(words, 3)) for _ in range(count)]


def measure(store: Any, batch: list[dict[str, Any]], asked: list[str]) -> dict[str, float]:
    t0 = time.perf_counter()
    for i in range(0, len(batch), 100):
        store.remember(batch[i : i + 100])
    write = len(batch) / (time.perf_counter() - t0)
    out = {"write_per_s": write}
    for who, labels in (("", None), ("cleared_", frozenset({"secret"}))):
        store.search_memories(asked[0], limit=10, labels=labels)  # warm
        times = []
        for q in asked:
            t = time.perf_counter()
            store.search_memories(q, limit=10, labels=labels)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        out[f"{who}p50_ms"] = statistics.median(times)
        out[f"{who}p95_ms"] = times[int(0.95 * (len(times) - 1))]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    texts = sentences()
    asked = questions(texts, args.queries)
    print(f"{len(texts)} distinct sentences from docs/*.md; {len(asked)} questions")
    server = PostgresServer.start()
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            batch = items(texts, n)
            with tempfile.TemporaryDirectory() as tmp:
                lite = measure(
                    SqliteMemoryStore(f"{tmp}/m.db", create=True, embedder=None), batch, asked
                )
            pg = PostgresMemoryStore(server.create_database(), create=True)
            post = measure(pg, batch, asked)
            pg.close()
            for name, got in (("sqlite", lite), ("postgres", post)):
                print(
                    f"{n:>6} memories {name:>8}: write {got['write_per_s']:8.0f}/s, "
                    f"search p50 {got['p50_ms']:7.2f} ms, p95 {got['p95_ms']:7.2f} ms; "
                    f"cleared caller p50 {got['cleared_p50_ms']:7.2f} ms, "
                    f"p95 {got['cleared_p95_ms']:7.2f} ms"
                )
    finally:
        server.close()


if __name__ == "__main__":
    main()
