"""Validation speed: a generated 500-step pipeline, validated in-process after imports.

Run: python benchmarks/validate.py [--steps 500] [--repeat 15]
Target (issue 2): < 150 ms per validation of 500 steps, in-process after imports.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def generate(n: int) -> str:
    """A realistic pipeline: set_variables, routers and loop guards, every step reachable."""
    lines = ["name: bench", "settings:", "  entry_step_id: s0", "  max_turn_loops: 3", "steps:"]
    for i in range(n):
        nxt = f"s{i + 1}" if i + 1 < n else None
        kind = i % 3
        lines.append(f"  - id: s{i}")
        if nxt is None:
            lines += [
                "    action: set_variables",
                "    rules:",
                "      - {set: done, value: true}",
                "    end: true",
            ]
        elif kind == 0:
            lines += [
                "    action: set_variables",
                "    rules:",
                f"      - {{set: v{i}, value: {i}}}",
                f"      - {{set: w{i}, from: v{i}}}",
                f"    next: {nxt}",
            ]
        elif kind == 1:
            lines += [
                "    action: json_decision_router",
                "    routes:",
                f"      go: {nxt}",
                f"      skip: {nxt}",
                f"    on_other: {nxt}",
            ]
        else:
            # loops back to the set_variables step two before, through this guard
            lines += [
                "    action: loop_guard",
                f"    on_allow: s{max(i - 2, 0)}",
                f"    on_deny: {nxt}",
            ]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Print medians for cold and warm validation, and CLI wall time."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    from runtime.format.validation import validate_paths

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(generate(args.steps))
        t0 = time.perf_counter()
        report = validate_paths([str(path)])
        cold = (time.perf_counter() - t0) * 1000
        assert report.errors == 0, [d.message for d in report.diagnostics[:5]]
        warm = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            validate_paths([str(path)])
            warm.append((time.perf_counter() - t0) * 1000)
        cli = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "runtime", "validate", str(path)],
                check=True,
                capture_output=True,
            )
            cli.append((time.perf_counter() - t0) * 1000)
        helps = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "runtime", "--help"], check=True, capture_output=True
            )
            helps.append((time.perf_counter() - t0) * 1000)
    size = path.stat().st_size if path.exists() else len(generate(args.steps))
    print(f"steps: {args.steps} ({size / 1024:.0f} KiB of YAML)")
    print(f"first validation (compiles schemas): {cold:.1f} ms")
    print(
        f"warm validation median: {statistics.median(warm):.1f} ms "
        f"(min {min(warm):.1f}, max {max(warm):.1f}, n={len(warm)})"
    )
    print(f"`runtime validate FILE` wall median: {statistics.median(cli):.0f} ms")
    print(f"`runtime --help` wall median: {statistics.median(helps):.0f} ms")


if __name__ == "__main__":
    main()
