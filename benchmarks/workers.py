"""Runs/s through 1, 2 and 4 worker processes on a Postgres store (issue 34).

40 runs of a 9-step pipeline (set_variables x 8, finalize: a checkpoint per step) are
submitted, then N `runtime worker` processes (concurrency 1 each) are started and the
clock runs until every run has completed (workers' start-up included: it is what a
scale-out pays). PostgreSQL is started here (tests/postgres.py, fsync off).

Run: python benchmarks/workers.py [--runs 40]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.engine import workers  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

RUNTIME = str(Path(sys.executable).parent / "runtime")


def pipeline(folder: Path) -> str:
    """The 9-step chain the worker tests run."""
    lines = ["name: chain", "settings: {entry_step_id: s1}", "steps:"]
    for i in range(1, 9):
        nxt = f"s{i + 1}" if i < 8 else "done"
        lines += [f"  - id: s{i}", "    action: set_variables", "    rules:"]
        lines += [f"      - {{set: v{i}, value: {i}}}", f"    next: {nxt}"]
    lines += ["  - id: done", "    action: finalize"]
    (folder / "chain.yaml").write_text("\n".join(lines) + "\n")
    return str(folder / "chain.yaml")


def main() -> None:
    """Print runs/s for 1, 2 and 4 workers."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    with PostgresServer.start() as server, tempfile.TemporaryDirectory() as tmp:
        pipe = pipeline(Path(tmp))
        print(f"{'workers':>7} {'runs':>5} {'seconds':>8} {'runs/s':>7}")
        for n in (1, 2, 4):
            url = server.create_database(f"w{n}")
            ids = [workers.submit(url, pipe, {}) for _ in range(args.runs)]
            t0 = time.perf_counter()
            procs = [
                subprocess.Popen([RUNTIME, "worker", "--store", url], stderr=subprocess.DEVNULL)
                for _ in range(n)
            ]
            for run_id in ids:
                workers.wait(url, run_id, timeout=600, poll=0.05)
            elapsed = time.perf_counter() - t0
            for p in procs:
                p.terminate()
                p.wait()
            print(f"{n:>7} {args.runs:>5} {elapsed:>8.2f} {args.runs / elapsed:>7.1f}")


if __name__ == "__main__":
    main()
