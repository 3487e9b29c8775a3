"""Checkpointed steps/s: the run store on Postgres against SQLite, at equal durability (issue 34).

A loop of trivial steps with a checkpoint (and its ledger entry) after every step, 1 KB of
state, the engine's own store path: the same loop as benchmarks/engine.py. Durability
pairs: `normal` is SQLite WAL without an fsync per commit against Postgres
`synchronous_commit = off`; `full` is SQLite `synchronous = FULL` against Postgres
`synchronous_commit = on`. The Postgres server is started here (tests/postgres.py) with
fsync on, on 127.0.0.1 over TCP, on the same disk as the SQLite file.

Run: python benchmarks/pgstore.py [--steps 500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import REG, pipeline

from runtime.engine import Engine
from runtime.engine.stores import open_run_store
from tests.postgres import PostgresServer


def rate(steps: int, store: Any, repeat: int) -> float:
    """Median checkpointed steps per second over `repeat` runs."""
    p = pipeline(steps)
    rates = []
    for i in range(repeat):
        engine = Engine(p, registry=REG, store=store)
        t0 = time.perf_counter()
        done = engine.run({"n": 0, "context": "x" * 1024}, run_id=f"r{i}-{time.time_ns()}")
        elapsed = time.perf_counter() - t0
        assert done.status == "completed", done.error
        rates.append((steps + 1) / elapsed)
    return statistics.median(rates)


def main() -> None:
    """Print the table recorded in docs/performance.md."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    durable = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    with PostgresServer.start(**durable) as server, tempfile.TemporaryDirectory() as tmp:
        print(f"{'durability':<10} {'SQLite steps/s':>15} {'Postgres steps/s':>17} {'ratio':>7}")
        for durability in ("normal", "full"):
            sqlite = open_run_store(f"{tmp}/runs-{durability}.db", durability=durability)
            pg = open_run_store(server.create_database(f"b_{durability}"), durability=durability)
            s = rate(args.steps, sqlite, args.repeat)
            p = rate(args.steps, pg, args.repeat)
            print(f"{durability:<10} {s:>15,.0f} {p:>17,.0f} {p / s:>6.2f}x")
            pg.close()


if __name__ == "__main__":
    main()
