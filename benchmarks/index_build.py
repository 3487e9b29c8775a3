"""`runtime index` build rate on SQLite and on Postgres (issue 34): nodes written per second.

Run: python benchmarks/index_build.py [--repeats 3] [--modules 60] [--jobs 1]

Two corpora, each indexed from scratch `--repeats` times into a fresh SQLite file and a
fresh Postgres database by the same indexer (runtime/retrieval/indexer.py through
runtime/retrieval/indexwrite.open_writer), medians printed:

- real: the repository's real code and prose, one repository each: the eshop sample,
  tests/data/realworld (eshop, aw, cleanarch), tests/data/code and docs/;
- generated: benchmarks/corpus.codebase(--modules), a solution of full-size C# and T-SQL
  files (sized like real code), written to a temporary folder.

Then, per backend, a run where nothing changed and one after 5% of the generated files
changed (incremental). A PostgreSQL 15 is started for the run (tests/postgres.py) with
fsync, synchronous_commit and full_page_writes on (the test server's defaults are off):
the index commits once per run, at the durability SQLite's WAL gives it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import codebase  # noqa: E402
from runtime.retrieval.indexer import index_paths  # noqa: E402
from runtime.retrieval.indexwrite import open_writer  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

REAL = {
    "eshop-sample": ROOT / "pipelines" / "sample" / "eshop",
    "eshop": ROOT / "tests" / "data" / "realworld" / "eshop",
    "aw": ROOT / "tests" / "data" / "realworld" / "aw",
    "cleanarch": ROOT / "tests" / "data" / "realworld" / "cleanarch",
    "ledger": ROOT / "tests" / "data" / "code",
    "docs": ROOT / "docs",
}


def build(location: str, trees: dict[str, Path], jobs: int) -> tuple[int, float]:
    """Index every tree into location: (nodes written, seconds)."""
    writer: Any = open_writer(location)
    try:
        started = time.perf_counter()
        nodes = sum(
            index_paths(writer, [str(tree)], repository=name, jobs=jobs).nodes
            for name, tree in trees.items()
        )
        return nodes, time.perf_counter() - started
    finally:
        getattr(writer, "close", lambda: None)()


def main() -> int:
    """Print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modules", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="index-build-"))
    generated = work / "generated"
    files = codebase(args.modules)
    for rel, text in files:
        (generated / rel).parent.mkdir(parents=True, exist_ok=True)
        (generated / rel).write_text(text)
    corpora = {"real": REAL, "generated": {"generated": generated}}
    server = PostgresServer.start(fsync="on", synchronous_commit="on", full_page_writes="on")
    try:
        counter = iter(range(10_000))

        def fresh(backend: str) -> str:
            n = next(counter)
            return server.create_database() if backend == "postgres" else str(work / f"{n}.db")

        print(f"jobs={args.jobs}, {args.repeats} repeats, medians")
        print("| corpus | backend | nodes | seconds | nodes/s |")
        print("|---|---|---:|---:|---:|")
        kept: dict[str, str] = {}
        for corpus, trees in corpora.items():
            for backend in ("sqlite", "postgres"):
                runs = []
                for _ in range(args.repeats):
                    location = fresh(backend)
                    runs.append(build(location, trees, args.jobs))
                    if corpus == "generated":
                        kept[backend] = location
                nodes = runs[0][0]
                seconds = statistics.median(s for _, s in runs)
                print(
                    f"| {corpus} | {backend} | {nodes:,} | {seconds:.2f} | {nodes / seconds:,.0f} |"
                )
        print()
        print("| re-index of generated | backend | nodes written | seconds |")
        print("|---|---|---:|---:|")
        paths = sorted(generated.rglob("*.*"))
        for label, edit in (("nothing changed", 0), ("5% of files changed", 20)):
            if edit:
                for path in paths[::edit]:
                    path.write_text(path.read_text() + "\n-- edited\n")
            for backend in ("sqlite", "postgres"):
                nodes, seconds = build(kept[backend], corpora["generated"], args.jobs)
                print(f"| {label} | {backend} | {nodes:,} | {seconds:.2f} |")
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
