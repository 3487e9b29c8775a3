"""Access policy cost: the built-in rule on BM25 at 50,000 nodes, Cedar per node, OPA per query.

Run: python benchmarks/access.py [--nodes 50000] [--queries 300]
Targets (issue 28): the built-in rule adds under 5% to BM25 p50 at 50,000 nodes; a
per-resource engine under 50 us per node in process (Cedar); the HTTP engine's cost per
query reported (against tests/opa_support.py's server on 127.0.0.1: OPA's data API over
OPA's own Rego engine, evaluating pipelines/access/policy.rego; no `opa` binary installs
from the registries here).

The index: benchmarks/retrieval.py's synthetic nodes (Zipf words over a 4,000-word
vocabulary), each file labelled public or internal and tenant a or b (a quarter each).
The subject is tenant a cleared for public: it may see a quarter of the nodes.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.governance.access_policy import BuiltinEngine, Resource  # noqa: E402
from runtime.governance.engines import load_engine  # noqa: E402
from runtime.governance.subject import parse_subject  # noqa: E402
from runtime.retrieval.node import Node, Scope  # noqa: E402
from runtime.retrieval.nodestore import open_store  # noqa: E402
from runtime.retrieval.policed import AccessView  # noqa: E402

LABELS = [
    ("public", "tenant:a"),
    ("internal", "tenant:a"),
    ("public", "tenant:b"),
    ("internal", "tenant:b"),
]
SUBJECT = parse_subject({"tenant": "a", "clearance": ["public"]})
CEDAR = {
    "engine": "cedar",
    "policies": str(ROOT / "pipelines" / "access" / "policy.cedar"),
    "schema": str(ROOT / "pipelines" / "access" / "schema.cedarschema"),
}


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    syl = ["ord", "er", "pay", "ment", "cust", "om", "ship", "stock", "in", "voice", "line"]
    syl += ["item", "cart", "bask", "et", "re", "fund", "tax", "rate", "user", "acc", "ount"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syl) for _ in range(rng.randint(2, 3))))
    return sorted(words)


def build(path: Path, n: int) -> tuple[Any, list[str]]:
    """An index of n labelled synthetic nodes; (store, queries)."""
    rng = random.Random(1)
    vocab = vocabulary(rng)
    weights = [1 / (i + 1) for i in range(len(vocab))]

    def words(k: int) -> list[str]:
        return rng.choices(vocab, weights=weights, k=k)

    store = open_store(str(path), create=True)
    per_file = 500
    with store.batch():
        for f in range(n // per_file):
            labels = list(LABELS[f % 4])
            nodes = []
            for j in range(per_file):
                a, b, c = (w.title() for w in words(3))
                name = f"{a}{b}Service{f}_{j}"
                text = (
                    f"public class {name} {{ public Task Handle{c}Async(int id) "
                    f"{{ return _{a.lower()}Repository.Load{b}(id); }} }} // {' '.join(words(30))}"
                )
                nodes.append(
                    Node(
                        f"big::main::class::{name}",
                        "big",
                        "main",
                        "class",
                        name,
                        name,
                        f"src/f{f}.cs",
                        "dotnet",
                        1,
                        3,
                        text,
                        labels=labels,
                    )
                )
            store.replace_file(
                "big", "main", f"src/f{f}.cs", str(f), nodes, {"symbols": [], "deps": []}
            )
    store.optimize()  # as runtime index does after writing
    queries = [" ".join(words(rng.randint(2, 4))) for _ in range(1000)]
    return store, queries


def p50(fn: Any, queries: list[str]) -> float:
    """Median ms of fn(query) over the queries (after one warm-up pass over ten)."""
    for q in queries[:10]:
        fn(q)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def paired(fns: Any, queries: list[str], clock: Any = time.perf_counter) -> list[float]:
    """Median ms of each fn over the queries, the fns timed one after another on each query
    (so a load that drifts while measuring weighs on each alike); clock: wall time, or
    time.process_time for CPU time (steadier on a loaded machine)."""
    for q in queries[:10]:
        for fn in fns:
            fn(q)
    times: list[list[float]] = [[] for _ in fns]
    for q in queries:
        for fn, out in zip(fns, times, strict=True):
            t0 = clock()
            fn(q)
            out.append((clock() - t0) * 1000)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--rule-only", action="store_true", help="the built-in rule's BM25 figures only"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store, queries = build(Path(tmp) / "access.db", args.nodes)
        print(f"built {args.nodes} labelled nodes in {time.perf_counter() - t0:.1f} s")
        qs = queries[: args.queries]
        every = Scope("big", "main", tuple(sorted({x for ls in LABELS for x in ls})))
        visible = Scope("big", "main", ("public", "tenant:a"))
        view = AccessView(store, BuiltinEngine(), SUBJECT, None, Scope("big", "main"))
        # The rule as it ranked before the admitted statistics (FTS5's whole-table bm25()
        # over the visible sets' matches): a second reader of the same file, for comparison.
        before = open_store(str(Path(tmp) / "access.db"))
        before._admitted = lambda scope, lengths=True: None  # type: ignore[method-assign]
        # The admitted statistics by walking FTS5's order only (what a short-lived command
        # does: the rows are copied into a table of their own after MATERIALISE_AFTER).
        walk = open_store(str(Path(tmp) / "access.db"))
        walk._materialise_admitted = lambda scope: None  # type: ignore[method-assign]
        fresh = open_store(str(Path(tmp) / "access.db"))
        first = []
        for q in qs[:40]:
            t0 = time.perf_counter()
            fresh.search(q, scope=visible, top_k=8)
            first.append((time.perf_counter() - t0) * 1000)
        print(
            f"first {len(first)} searches by the restricted subject on a new connection: "
            f"median {statistics.median(first):.2f} ms, slowest {max(first):.1f} ms "
            "(the one that copies the admitted rows)"
        )
        fns = (
            lambda q: store.search(q, scope=every, top_k=8),
            lambda q: store.search(q, scope=visible, top_k=8),
            lambda q: view.search(q, top_k=8),
            lambda q: before.search(q, scope=visible, top_k=8),
            lambda q: walk.search(q, scope=visible, top_k=8),
        )
        for clock, what in ((time.perf_counter, "wall"), (time.process_time, "CPU")):
            rounds = []
            for _ in range(3):  # rounds of queries, each query timed under every variant
                rounds.append(paired(fns, qs, clock))
                view.ledgers.clear()
            base, rule, counted, whole, walked = (
                statistics.median(r[i] for r in rounds) for i in range(5)
            )
            print(f"{what}: BM25 p50, no rule (every label allowed): {base:.2f} ms")
            print(
                f"{what}: BM25 p50, built-in rule in the query: {rule:.2f} ms "
                f"({(rule / base - 1) * 100:+.1f}%)"
            )
            print(
                f"{what}: BM25 p50, rule + denied counts (AccessView): {counted:.2f} ms "
                f"({(counted / base - 1) * 100:+.1f}%)"
            )
            print(
                f"{what}: BM25 p50, rule with whole-table statistics (before): {whole:.2f} ms "
                f"({(whole / base - 1) * 100:+.1f}%)"
            )
            print(
                f"{what}: BM25 p50, rule, admitted statistics by the walk alone: {walked:.2f} ms "
                f"({(walked / base - 1) * 100:+.1f}%)"
            )
        if args.rule_only:
            return

        nodes = store.get_nodes(
            [h["id"] for q in qs[:40] for h in store.search(q, scope=every, top_k=25)], scope=every
        )
        resources = [
            Resource(n.id, "node", n.repository, n.snapshot, n.path, n.kind, tuple(n.labels))
            for n in nodes.values()
        ]
        cedar = load_engine(CEDAR)
        times, cpu = [], []
        for _ in range(7):
            t0, c0 = time.perf_counter(), time.process_time()
            cedar.decide(SUBJECT, "search", resources, None)
            times.append((time.perf_counter() - t0) / len(resources) * 1e6)
            cpu.append((time.process_time() - c0) / len(resources) * 1e6)
        print(
            f"Cedar: {statistics.median(times):.1f} us per node wall, {statistics.median(cpu):.1f} "
            f"us CPU (median of 7 batches of {len(resources)})"
        )
        cview = AccessView(store, cedar, SUBJECT, None, Scope("big", "main"))
        print(
            f"BM25 p50 under Cedar (over-fetch x4, top_k 8): {p50(lambda q: cview.search(q, top_k=8), qs[:100]):.2f} ms"
        )

        sys.path.insert(0, str(ROOT))
        from tests.opa_support import OpaServer

        server = OpaServer()
        try:
            opa = load_engine({"engine": "opa", "url": server.rule_url})
            oview = AccessView(store, opa, SUBJECT, None, Scope("big", "main"))
            ms = p50(lambda q: oview.search(q, top_k=8), qs[:100])
            calls = opa.calls
            batch = resources[:32]
            document = {
                "subject": SUBJECT.to_dict(),
                "action": "search",
                "resources": [r.to_dict() for r in batch],
            }
            one, rego = [], []
            for _ in range(50):
                t0 = time.perf_counter()
                opa.decide(SUBJECT, "search", batch, None)
                one.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                server.evaluate("step_runtime.access.allowed", document)
                rego.append((time.perf_counter() - t0) * 1000)
        finally:
            server.close()
        print(
            f"OPA over HTTP (127.0.0.1, OPA's Rego engine): BM25 + decisions p50 {ms:.2f} ms "
            f"per query ({calls / 110:.2f} requests per query); one request of 32 resources "
            f"p50 {statistics.median(one):.2f} ms, of which the Rego evaluation "
            f"{statistics.median(rego):.2f} ms"
        )


if __name__ == "__main__":
    main()
