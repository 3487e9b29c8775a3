"""Data for the assembly benchmarks (issue 27) and the memory stores' search medians.

Generators (deterministic, seeded; realistic words of the eShop sample's domain):
- `build_memory_store(path, memories=10_000, experiences=5_000)`: a SQLite memory store
  with that many memories (every type, labels, scopes, decay and TTL mixed) and
  experiences (six domains, every tier and outcome), plus the values rebuilt from them.
- `add_commits(index_path, commits=20_000, repository, snapshot)`: that many commit
  nodes (kind `commit`, as `runtime index --git` writes them, without running git) in a
  node index, linked to the index's file nodes by Touches edges.

Run: python benchmarks/assembly_data.py [--memories 10000 --experiences 5000 --commits 20000]
prints the build times and the search medians (p50, and p90) of each store at those sizes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOW = datetime(2026, 6, 1, tzinfo=UTC)
OBJECTS = [
    "usp_PlaceOrder",
    "usp_CancelOrder",
    "usp_CapturePayment",
    "usp_LogEvent",
    "fn_AvailableStock",
    "trg_Orders_Audit",
    "vw_CustomerLifetimeValue",
    "dbo.Orders",
    "dbo.OrderLines",
    "dbo.Inventory",
    "dbo.Payments",
    "dbo.Customers",
    "OrderService",
    "BasketService",
    "PaymentService",
    "InventoryService",
    "OrderRepository",
    "EshopDbContext",
    "OrdersController",
    "BasketController",
]
VERBS = ["writes", "reads", "locks", "retries", "logs", "validates", "caches", "deletes"]
TOPICS = [
    "stock reservation",
    "payment capture",
    "order cancellation",
    "audit rows",
    "idempotency keys",
    "deadlock retries",
    "basket expiry",
    "transaction scope",
    "customer personal data",
    "status codes",
    "migration scripts",
    "report totals",
]
DOMAINS = ["orders", "payments", "inventory", "basket", "reporting", "database"]
STRATEGIES = ["retry", "single-transaction", "caching", "check-then-act", "orm-write", "code_qa"]
TIERS = ["gold", "silver", "bronze", "abandoned"]
OUTCOMES = ["success", "partial", "failure", "unknown"]
QUERIES = [
    "why does usp_PlaceOrder let stock go negative",
    "payment capture retries charge twice",
    "which tables does placing an order write",
    "cancel an order and restore inventory",
    "audit trigger writes two rows",
    "BasketService clear after order",
    "idempotency key for retried writes",
    "deadlock retry duplicate orders",
]


def _sentence(rng: random.Random) -> str:
    a, b = rng.sample(OBJECTS, 2)
    return (
        f"{a} {rng.choice(VERBS)} {b} during {rng.choice(TOPICS)}; "
        f"{rng.choice(TOPICS)} depends on {rng.choice(OBJECTS)} ({rng.randrange(10_000)})."
    )


def memories(n: int, seed: int = 27) -> list[dict[str, Any]]:
    """n memory objects."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        created = NOW - timedelta(days=rng.randrange(400), minutes=rng.randrange(1440))
        item: dict[str, Any] = {
            "id": f"bm-mem-{i:06d}",
            "type": rng.choice(["episodic", "procedural", "semantic"]),
            "text": " ".join(_sentence(rng) for _ in range(rng.randint(1, 4))),
            "importance": round(rng.random(), 2),
            "confidence": round(rng.random(), 2),
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": rng.choice([[], [], [], ["internal"], ["pci"]]),
            "scope": rng.choice([{}, {"repository": "eshop"}, {"repository": "crm"}]),
        }
        if rng.random() < 0.3:
            item["half_life_days"] = rng.choice([30, 90, 365])
        if rng.random() < 0.05:
            item["ttl_seconds"] = rng.choice([3600, 86_400 * 30])
        out.append(item)
    return out


def experiences(n: int, seed: int = 28) -> list[dict[str, Any]]:
    """n experience objects."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        created = NOW - timedelta(days=rng.randrange(400))
        out.append(
            {
                "id": f"bm-exp-{i:06d}",
                "domain": rng.choice(DOMAINS),
                "strategy": rng.choice(STRATEGIES),
                "goal": _sentence(rng),
                "hypothesis": _sentence(rng),
                "action": _sentence(rng),
                "prediction": _sentence(rng),
                "outcome_status": rng.choice(OUTCOMES),
                "outcome_result": _sentence(rng),
                "surprise": _sentence(rng) if rng.random() < 0.6 else "",
                "lesson": f"{rng.choice(TOPICS)} needs {rng.choice(TOPICS)} in {rng.choice(OBJECTS)}",
                "confidence_tier": rng.choice(TIERS),
                "iteration_count": rng.randint(1, 5),
                "pipeline": rng.choice(["code_qa", "premortem", "review_loop"]),
                "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "labels": rng.choice([[], [], ["internal"]]),
            }
        )
    return out


def build_memory_store(
    path: str, *, memories_n: int = 10_000, experiences_n: int = 5_000, values: bool = True
) -> dict[str, float]:
    """A memory store of that size at path; seconds per phase."""
    from runtime.retrieval.memories import SqliteMemoryStore
    from runtime.retrieval.values import rebuild_values

    store = SqliteMemoryStore(path, create=True, embedder=None)
    took: dict[str, float] = {}
    start = time.perf_counter()
    with store.transaction():
        store.remember(memories(memories_n), now=NOW)
    took["memories"] = time.perf_counter() - start
    start = time.perf_counter()
    with store.transaction():
        store.record_experiences(experiences(experiences_n), now=NOW)
    took["experiences"] = time.perf_counter() - start
    if values:
        start = time.perf_counter()
        rebuild_values(store)
        took["values"] = time.perf_counter() - start
    return took


def add_commits(
    index_path: str, commits: int = 20_000, *, repository: str = "eshop", snapshot: str = "main"
) -> float:
    """Write commit nodes into an index (its file nodes get Touches edges); seconds."""
    from runtime.retrieval.git_history import COMMIT_KIND, TOUCHES, commit_node
    from runtime.retrieval.node import node_id
    from runtime.retrieval.nodestore import node_row, open_store
    from runtime.retrieval.search import CHILD_KINDS, MEMBER_KINDS

    rng = random.Random(29)
    store = open_store(index_path, create=True)
    start = time.perf_counter()
    targets = store.path_nodes(repository, snapshot, {COMMIT_KIND, *CHILD_KINDS, *MEMBER_KINDS})
    paths = sorted(targets) or [f"src/File{i}.cs" for i in range(200)]
    rows, edges = [], []
    for i in range(commits):
        sha = f"{rng.getrandbits(160):040x}"
        files = [
            {"path": p, "added": rng.randrange(80), "deleted": rng.randrange(40)}
            for p in rng.sample(paths, min(len(paths), rng.randint(1, 6)))
        ]
        when = NOW - timedelta(minutes=37 * i)
        commit = {
            "sha": sha,
            "author": rng.choice(["Ana Lima", "Bo Chen", "Chidi Okafor", "Dana Levi"]),
            "date": when.strftime("%Y-%m-%dT%H:%M:%S+00:00"),
            "message": _sentence(rng).capitalize(),
            "files": files,
        }
        rows.append(node_row(commit_node(repository, snapshot, commit, [])))
        source = node_id(repository, snapshot, COMMIT_KIND, sha)
        edges += [(source, t) for f in files for t in targets.get(f["path"], ())]
    with store.batch():
        store.put_loose_rows(rows)
        store.replace_typed_edges(repository, snapshot, TOUCHES, edges)
    return time.perf_counter() - start


def _timed(fn: Any, repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 2),
    }


def measure(memories_n: int, experiences_n: int, commits: int, repeat: int = 40) -> dict[str, Any]:
    """Build the stores in a temporary folder and time their searches."""
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.memories import SqliteMemoryStore
    from runtime.retrieval.node import Scope
    from runtime.retrieval.nodestore import open_store

    out: dict[str, Any] = {"sizes": [memories_n, experiences_n, commits]}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "memories.db")
        out["build_s"] = {
            k: round(v, 2)
            for k, v in build_memory_store(
                db, memories_n=memories_n, experiences_n=experiences_n
            ).items()
        }
        store = SqliteMemoryStore(db, embedder=None)
        labels = frozenset({"internal"})
        queries = iter(QUERIES * repeat)
        out["search_memories"] = _timed(
            lambda: store.search_memories(
                next(queries), limit=10, scope={"repository": "eshop"}, labels=labels, now=NOW
            ),
            repeat,
        )
        for axis in ("full", "root_cause"):
            queries = iter(QUERIES * repeat)
            out[f"search_experiences_{axis}"] = _timed(
                lambda a=axis, q=queries: store.search_experiences(
                    next(q), axis=a, limit=10, labels=labels
                ),
                repeat,
            )
        queries = iter(QUERIES * repeat)
        out["search_experiences_domain_failure"] = _timed(
            lambda: store.search_experiences(
                next(queries),
                limit=10,
                labels=labels,
                filters={"domain": "orders", "outcome": "failure"},
            ),
            repeat,
        )
        queries = iter(QUERIES * repeat)
        out["search_values"] = _timed(
            lambda: store.search_values(next(queries), limit=5, labels=labels), repeat
        )
        index = str(Path(tmp) / "index.db")
        index_paths(
            open_store(index, create=True),
            [str(ROOT / "pipelines" / "sample" / "eshop")],
            repository="eshop",
            jobs=1,
        )
        out["build_s"]["commits"] = round(add_commits(index, commits), 2)
        nodes = open_store(index)
        queries = iter(QUERIES * repeat)
        out["search_commits"] = _timed(
            lambda: nodes.search(
                next(queries),
                scope=Scope("eshop", "main"),
                top_k=10,
                filters={"kind": "commit"},
                per_file=0,
            ),
            repeat,
        )
        out["file_mb"] = round(
            sum(p.stat().st_size for p in Path(tmp).glob("memories.db*")) / 1e6, 1
        )
    return out


def main() -> None:
    """Print the medians as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--experiences", type=int, default=5_000)
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    print(json.dumps(measure(args.memories, args.experiences, args.commits, args.repeat), indent=2))


if __name__ == "__main__":
    main()
