"""assemble_context: assembly and premortem latency, dedup of 500 items, peak memory.

Targets (issue 27): five sources over a 50k-node index, 10k memories, 5k experiences and
20k commits: assembly median < 200 ms, premortem < 300 ms; dedup of 500 items < 20 ms;
peak memory < 50 MB per assembly. Data: 50,000 synthetic C# nodes (Zipf words, as in
benchmarks/retrieval.py) beside the indexed eShop sample and its docs, 20,000 commit
nodes and the memory store from benchmarks/assembly_data.py's generators.

    python benchmarks/assembly.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIVE = [
    {"name": "code", "kind": "code", "weight": 2, "max_items": 10},
    {"name": "docs", "kind": "docs", "max_items": 5},
    {"name": "decisions", "kind": "memories", "max_items": 10},
    {"name": "earlier", "kind": "experiences", "axis": "full", "max_items": 10},
    {"name": "changes", "kind": "commits", "max_items": 10},
]
QUESTIONS = [
    "payment capture retries",
    "cancel order stock reservation",
    "basket total currency",
    "audit trigger orders",
    "inventory shortage check",
    "refund idempotency key",
]


def build(tmp: Path) -> dict[str, float]:
    """The index (sample + 50k nodes + 20k commits) and the memory store; seconds."""
    from benchmarks.assembly_data import add_commits, build_memory_store
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.node import Node
    from runtime.retrieval.nodestore import open_store

    took: dict[str, float] = {}
    start = time.perf_counter()
    store = open_store(str(tmp / "index.db"), create=True)
    index_paths(store, [str(ROOT / "pipelines/sample/eshop")], repository="eshop", snapshot="main")
    # Commits first: their Touches edges go to the sample's files, not to the 50k nodes
    # (500 per generated file would make tens of millions of edges).
    took["commits"] = add_commits(str(tmp / "index.db"), 20_000)
    start = time.perf_counter()
    rng = random.Random(1)
    vocab = [
        f"{a}{b}"
        for a in ("order", "pay", "stock", "cart", "ship", "audit", "refund", "price")
        for b in ("", "ment", "er", "ing", "line", "item", "log", "queue", "lock", "key")
    ]
    vocab += [f"w{i}" for i in range(3000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    from runtime.retrieval.nodestore import node_row

    rows = []
    for f in range(100):
        for j in range(500):
            a, b, c = (w.title() for w in rng.choices(vocab, weights=weights, k=3))
            name = f"{a}{b}Service{f}_{j}"
            text = (
                f"public class {name} {{ public Task Handle{c}Async(int id) "
                f"{{ return _{a.lower()}Repository.Load{b}(id); }} }} // "
                + " ".join(rng.choices(vocab, weights=weights, k=30))
            )
            node = Node(
                f"eshop::main::class::{name}",
                "eshop",
                "main",
                "class",
                name,
                name,
                f"gen/f{f}.cs",
                "dotnet",
                1 + j * 3,
                3 + j * 3,
                text,
            )
            rows.append(node_row(node))
    with store.batch():
        store.put_loose_rows(rows)  # as add_commits writes its nodes: one insert pass
    took["nodes"] = time.perf_counter() - start
    took.update(build_memory_store(str(tmp / "memories.db")))
    return took


def _engine(tmp: Path, step: dict[str, Any]) -> Any:
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.format.pipeline import Pipeline
    from runtime.retrieval.memories import SqliteMemoryStore
    from runtime.retrieval.nodestore import open_store

    settings = {"entry_step_id": "a", "assembly_now": "2026-11-01T00:00:00Z"}
    p = Pipeline.from_dict(
        {
            "settings": settings,
            "steps": [
                step,
                {"id": "end", "action": "finalize", "source": "assembled_context_markdown"},
            ],
        }
    )
    services = Services(
        settings=settings,
        node_store=open_store(str(tmp / "index.db")),
        memory_store=SqliteMemoryStore(str(tmp / "memories.db")),
    )
    return Engine(p, services=services)


def timed_runs(engine: Any, repeat: int) -> dict[str, float]:
    """Median and p90 of whole runs (the assemble step and a finalize), in ms."""
    times = []
    for i in range(repeat + 2):
        q = QUESTIONS[i % len(QUESTIONS)]
        start = time.perf_counter()
        r = engine.run(
            {"question": q, "repository": "eshop", "allowed_labels": ["internal"]},
            run_id=f"bench{i}",
        )
        took = (time.perf_counter() - start) * 1000
        assert r.status == "completed", r.error
        if i >= 2:  # the first runs open connections and load the tokenizer
            times.append(took)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
    }


def peak_mb(engine: Any) -> float:
    """tracemalloc's peak during one run after warm-up, in MB."""
    tracemalloc.start()
    engine.run(
        {"question": QUESTIONS[0], "repository": "eshop", "allowed_labels": ["internal"]},
        run_id="peak",
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return round(peak / 2**20, 1)


def dedup_500(repeat: int) -> dict[str, float]:
    """dedupe() over 500 real text chunks of this repository (code, docs, SQL), in ms."""
    from runtime.context.assembly import Candidate, dedupe

    files = sorted(
        p
        for p in ROOT.glob("**/*")
        if p.suffix in (".py", ".md", ".cs", ".sql") and ".venv" not in p.parts and p.is_file()
    )
    chunks = []
    for f in files:
        text = f.read_text(errors="replace")
        chunks += [text[i : i + 800] for i in range(0, len(text), 800)]
    rng = random.Random(5)
    picked = rng.sample(chunks, 500)
    cands = [Candidate(f"c{i}", "s", "memory", t, 1.0, f"c{i}") for i, t in enumerate(picked)]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        dedupe(cands)
        times.append((time.perf_counter() - start) * 1000)
    return {
        "p50_ms": round(statistics.median(times), 1),
        "p90_ms": round(statistics.quantiles(times, n=10)[-1], 1),
        "chars_per_item": 800,
    }


def main() -> None:
    """Build, measure, print JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dedup-only", action="store_true", help="only the dedup of 500 items")
    args = parser.parse_args()
    if args.dedup_only:
        print(json.dumps({"dedup_500": dedup_500(args.repeat)}, indent=2))
        return
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        out: dict[str, Any] = {"build_s": {k: round(v, 1) for k, v in build(tmp).items()}}
        assemble = {
            "id": "a",
            "action": "assemble_context",
            "max_tokens": 2000,
            "sources": FIVE,
            "next": "end",
        }
        premortem = {
            "id": "a",
            "action": "assemble_context",
            "mode": "premortem",
            "domain": "orders",
            "max_tokens": 2000,
            "next": "end",
        }
        engine = _engine(tmp, assemble)
        out["assembly"] = timed_runs(engine, args.repeat)
        out["assembly_peak_mb"] = peak_mb(engine)
        pm = _engine(tmp, premortem)
        out["premortem"] = timed_runs(pm, args.repeat)
        out["premortem_peak_mb"] = peak_mb(pm)
    out["dedup_500"] = dedup_500(args.repeat)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
