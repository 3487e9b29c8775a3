"""The node index on Postgres against SQLite (issue 34): golden recall and search latency.

Run: python benchmarks/pg_index.py golden [--index /tmp/golden-realworld.db] [--types bm25]
     python benchmarks/pg_index.py latency [--nodes 50000] [--queries 300]

A PostgreSQL 15 is started for the run (tests/postgres.py: initdb into a temporary folder,
127.0.0.1, fsync off) and stopped after it.

golden: every golden set in the repository, recall@5 on both backends: the 30 questions
over the eshop sample (tests/data/retrieval/questions.json) and the four sets over the six
real corpora (tests/data/golden/questions.json, heldout*.json) from an index of the
corpora (benchmarks/golden_realworld.py builds one; --index). The SQLite index is copied
into Postgres with `runtime store copy --what index`'s function, so both hold the same
nodes and vectors.

latency: BM25 p50/p95 over n synthetic nodes (benchmarks/retrieval.py's generator: Zipf
words over a 4,000-word vocabulary, 2 to 4 words a query), the same index on both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.engine.indexcopy import copy_index  # noqa: E402
from runtime.retrieval.indexes import open_index  # noqa: E402
from runtime.retrieval.node import Scope  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "golden"
SETS = ("questions", "heldout", "heldout2", "heldout3")


def found_at(hits: list[dict[str, Any]], expected: set[str]) -> bool:
    """Whether a hit is, or holds as a child, an expected node."""
    return any(h["id"] in expected or expected & set(h.get("children") or ()) for h in hits)


def expected_ids(sqlite_store: Any, repo: str, expect: list[str]) -> set[str]:
    """Every definition of each expected `kind:qualified name` (as golden_realworld)."""
    out: set[str] = set()
    for item in expect:
        kind, _, name = item.partition(":")
        rows = sqlite_store.conn().execute(
            "SELECT id FROM nodes WHERE repository = ? AND kind = ? AND qualified_name = ?",
            (repo, kind, name),
        )
        out |= {r[0] for r in rows}
    return out


def golden(args: argparse.Namespace, server: PostgresServer) -> None:
    """Recall@5 per golden set on both backends."""
    from runtime.retrieval.indexer import index_paths

    types = args.types.split(",")
    embedder = None
    if {"semantic", "hybrid"} & set(types):
        from benchmarks.golden_realworld import minilm

        embedder = minilm()
    tmp = Path(tempfile.mkdtemp(prefix="pgindex-"))
    sample = open_index(str(tmp / "sample.db"), create=True)
    index_paths(
        sample,
        [str(ROOT / "pipelines" / "sample" / "eshop")],
        repository="eshop",
        snapshot="main",
        label_rules=[("Database/Procedures/usp_CapturePayment.sql", ["confidential"])],
    )
    real = open_index(args.index, create=True)  # a layout-3 index is migrated in place
    backends: dict[str, tuple[Any, Any]] = {"sqlite": (sample, real)}
    for name, store in (("sample", sample), ("real", real)):
        url = server.create_database(f"pg_{name}")
        t0 = time.perf_counter()
        report = copy_index(store.path, url)
        print(
            f"copied {name}: {sum(t.rows for t in report.tables)} rows in "
            f"{time.perf_counter() - t0:.1f} s, verified"
        )
    backends["postgres"] = (open_index(server.url("pg_sample")), open_index(server.url("pg_real")))
    sample_q = json.loads((ROOT / "tests/data/retrieval/questions.json").read_text())
    print("| golden set | questions | search | SQLite recall@5 | Postgres recall@5 |")
    print("|---|---|---|---|---|")
    for kind in types:
        found = {}
        for backend, (s, _) in backends.items():
            found[backend] = sum(
                bool(
                    {
                        h["id"]
                        for h in s.search(
                            q["q"],
                            scope=Scope("eshop", "main", ("confidential",)),
                            top_k=5,
                            search_type=kind,
                            embedder=embedder,
                        )
                    }
                    & set(q["expect"])
                )
                for q in sample_q
            )
        print(
            f"| eshop sample (tests/data/retrieval) | {len(sample_q)} | {kind} | {found['sqlite']} | {found['postgres']} |"
        )
        for name in SETS:
            qs = json.loads((GOLDEN / f"{name}.json").read_text())
            got: dict[str, int] = {}
            misses: dict[str, list[str]] = {}
            for backend, (_, r) in backends.items():
                got[backend] = 0
                for q in qs:
                    expected = expected_ids(real, q["repo"], q["expect"])
                    hits = r.search(
                        q["q"], scope=Scope(q["repo"]), top_k=5, search_type=kind, embedder=embedder
                    )
                    if found_at(hits, expected):
                        got[backend] += 1
                    else:
                        misses.setdefault(backend, []).append(q["q"])
            print(f"| {name}.json | {len(qs)} | {kind} | {got['sqlite']} | {got['postgres']} |")
            if args.v:
                only_pg = set(misses.get("postgres", [])) - set(misses.get("sqlite", []))
                only_sq = set(misses.get("sqlite", [])) - set(misses.get("postgres", []))
                for q in sorted(only_pg):
                    print(f"    missed on Postgres only: {q}")
                for q in sorted(only_sq):
                    print(f"    missed on SQLite only: {q}")


def words_source(seed: int) -> Any:
    """k Zipf words over benchmarks/retrieval.py's 4,000-word vocabulary (seeded)."""
    import random

    from benchmarks.retrieval import _vocabulary

    rng = random.Random(1)
    vocab = _vocabulary(rng)  # the build's words continue this generator (as before)
    if seed != 1:
        rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(vocab))]

    def words(k: int) -> list[str]:
        return rng.choices(vocab, weights=weights, k=k)

    return words, rng


def build_sqlite(path: Path, nodes: int) -> Any:
    """The synthetic SQLite index of `nodes` class nodes at path (built once, then reused)."""
    from runtime.retrieval.node import Node

    store = open_index(str(path), create=True)
    if store.counts()["nodes"]:
        return store
    words, _ = words_source(1)
    t0 = time.perf_counter()
    per_file = 500
    with store.batch():
        for f in range(nodes // per_file):
            made = []
            for j in range(per_file):
                a, b, c = (w.title() for w in words(3))
                name = f"{a}{b}Service{f}_{j}"
                text = (
                    f"public class {name} {{ public Task Handle{c}Async(int id) "
                    f"{{ return _{a.lower()}Repository.Load{b}(id); }} }} // {' '.join(words(30))}"
                )
                made.append(
                    Node(
                        f"big::main::class::{name}",
                        *("big", "main", "class", name, name, f"src/f{f}.cs", "dotnet", 1, 3),
                        text,
                    )
                )
            store.replace_file(
                "big", "main", f"src/f{f}.cs", str(f), made, {"symbols": [], "deps": []}
            )
    store.optimize()
    print(f"built SQLite: {nodes} nodes in {time.perf_counter() - t0:.0f} s")
    return store


def latency(args: argparse.Namespace, server: PostgresServer | None) -> None:
    """BM25 p50/p95 over n synthetic nodes on both backends."""
    import os

    tmp = Path(args.dir or tempfile.mkdtemp(prefix="pgindex-"))
    store = build_sqlite(tmp / f"big{args.nodes}.db", args.nodes)
    words, rng = words_source(2)
    queries = [" ".join(words(rng.randint(2, 4))) for _ in range(args.queries)]
    if args.url:
        url = args.url
    else:
        assert server is not None
        url = server.create_database(f"big{args.nodes}")
    pg = open_index(url, create=True)
    if not pg.counts()["nodes"]:
        pg.close()
        t0 = time.perf_counter()
        copy_index(str(store.path), url)
        print(f"copied into Postgres: {args.nodes} nodes in {time.perf_counter() - t0:.0f} s")
        pg = open_index(url)
        with pg.conn().store._conn() as conn:
            conn.execute("VACUUM ANALYZE")  # index-only scans need the visibility map
    scope = Scope("big", "main")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| nodes | backend | BM25 p50 ms | p95 ms |")
    print("|---|---|---|---|")
    backends = {"SQLite": store, "Postgres": pg}
    for name in args.backends.split(","):
        s = backends[name]
        for q in queries[:10]:
            s.search(q, scope=scope, top_k=8)
        times = []
        for q in queries:
            t0 = time.perf_counter()
            s.search(q, scope=scope, top_k=8)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        print(
            f"| {args.nodes} | {name} | {statistics.median(times):.1f} |"
            f" {times[int(len(times) * 0.95)]:.1f} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def main() -> None:
    """Start Postgres, run the chosen measurement, stop it."""
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("golden")
    g.add_argument("--index", default="/tmp/golden-realworld.db")
    g.add_argument("--types", default="bm25")
    g.add_argument("-v", action="store_true")
    lat = sub.add_parser("latency")
    lat.add_argument("--nodes", type=int, default=50_000)
    lat.add_argument("--queries", type=int, default=300)
    lat.add_argument("--dir", default=None, help="keep the SQLite index here (reused)")
    lat.add_argument("--url", default=None, help="a Postgres database to use (filled if empty)")
    lat.add_argument("--backends", default="SQLite,Postgres")
    args = ap.parse_args()
    if args.what == "latency" and args.url:
        latency(args, None)
        return
    # shared_buffers: the tests' 16MB would make a 500k-node index read from the OS cache.
    with PostgresServer.start(shared_buffers="256MB") as server:
        (golden if args.what == "golden" else latency)(args, server)


if __name__ == "__main__":
    main()
