"""`runtime lock --check` against `runtime validate` on the shipped pipelines (issue 32).

Both as a user runs them, each in a new process (`python -m runtime ...`), on a copy of
pipelines/ in which every pipeline is locked: the median of N alternating runs of each,
and their ratio (target: lock --check within validate + 20%).

    python benchmarks/lock.py [--runs 11]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "runtime", *args], cwd=cwd, capture_output=True)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr.decode()[-2000:])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=11)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "pipelines"
        shutil.copytree(ROOT / "pipelines", copy)
        files = sorted(str(p.relative_to(tmp)) for p in copy.glob("*.yaml"))
        for file in files:
            subprocess.run(
                [sys.executable, "-m", "runtime", "lock", file], cwd=tmp, capture_output=True
            )
        validate, check = [], []
        for _ in range(runs):
            validate.append(timed(["validate", *files], Path(tmp)))
            check.append(timed(["lock", "--check", *files], Path(tmp)))
    v, c = statistics.median(validate), statistics.median(check)
    print(f"{len(files)} pipelines, {runs} runs each, new process per run")
    print(f"validate:     median {v * 1000:.0f} ms")
    print(f"lock --check: median {c * 1000:.0f} ms")
    print(f"ratio: {c / v:.2f} (target <= 1.20)")


if __name__ == "__main__":
    main()
