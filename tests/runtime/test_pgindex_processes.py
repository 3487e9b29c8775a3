"""A 50k-node index on Postgres searched from 8 processes at once (issue 34).

Each process searches the same 12 queries and writes what it got; every process must get
exactly the ranking one process alone got first, with no error.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.retrieval.node import Node, Scope
from runtime.retrieval.nodestore import node_row

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent.parent

CHILD = """
import json, sys
from runtime.retrieval.indexes import open_index
from runtime.retrieval.node import Scope
store = open_index(sys.argv[1])
queries = json.loads(sys.argv[2])
out = [[h["id"] for h in store.search(q, scope=Scope("big", "main"), top_k=8)] for q in queries]
print(json.dumps(out))
"""


def build(url: str, n: int) -> list[str]:
    """n synthetic class nodes (Zipf words, as benchmarks/retrieval.py); the queries."""
    from runtime.retrieval.pgindex import PostgresNodeStore

    rng = random.Random(1)
    vocab = [f"w{i}x" for i in range(2000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]

    def words(k: int) -> list[str]:
        return rng.choices(vocab, weights=weights, k=k)

    store = PostgresNodeStore(url, create=True)
    batch = []
    for i in range(n):
        a, b = (w.title() for w in words(2))
        name = f"{a}{b}Service{i}"
        text = f"public class {name} {{ }} // {' '.join(words(20))}"
        batch.append(
            node_row(
                Node(
                    f"big::main::class::{name}",
                    "big",
                    "main",
                    "class",
                    name,
                    name,
                    f"src/f{i // 500}.cs",
                    "dotnet",
                    1,
                    1,
                    text,
                    labels=["hr"] if i % 10 == 0 else [],
                )
            )
        )
        if len(batch) == 5000:
            store.put_rows(batch)
            batch = []
    store.put_rows(batch)
    store.close()
    return [" ".join(words(rng.randint(2, 4))) for _ in range(12)]


def test_eight_processes_search_a_50k_index_at_once(pg_url):
    from runtime.retrieval.indexes import open_index

    queries = build(pg_url, 50_000)
    alone = open_index(pg_url)
    want = [
        [h["id"] for h in alone.search(q, scope=Scope("big", "main"), top_k=8)] for q in queries
    ]
    alone.close()
    assert sum(map(len, want)) > 60  # the queries find things
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, pg_url, json.dumps(queries)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for _ in range(8)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        assert json.loads(out) == want
    # the labelled tenth (i % 10 == 0, label hr) is never among them
    assert all(int(nid.rsplit("Service", 1)[1]) % 10 for ids in want for nid in ids)
