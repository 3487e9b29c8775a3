"""Validation speed: generated pipelines, in-process scaling, fresh processes, the CLI.

Run: python benchmarks/validate.py [--repeat 7] [--check-jsonschema PATH]

Prints, as medians over interleaved repeats:
- in-process validation (schemas compiled) of 500, 5,000 and 20,000 steps, and the
  time per step (linear: the per-step figure stays flat);
- the first validation in a fresh process (imports included, interpreter start-up
  not), against jsonschema + PyYAML's C loader validating the same file with
  schemas/pipeline.schema.json, as the median of paired ratios;
- `runtime validate FILE` (500 steps) against `check-jsonschema --schemafile
  schemas/pipeline.schema.json FILE`, whole processes, median of paired ratios.
check-jsonschema is not a dependency: install it in a throwaway venv
(`python -m venv /tmp/cj && /tmp/cj/bin/pip install check-jsonschema`) and pass
its path; without it that comparison is skipped.

Targets (issue 14): 20,000 steps in < 3 s; first validation faster than jsonschema
+ the C loader (ratio < 1); `runtime validate` <= 0.4x check-jsonschema's time.
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

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "pipeline.schema.json"


def generate(n: int, *, compact: bool = False) -> str:
    """A realistic pipeline: set_variables, routers and loop guards, every step reachable.

    Each router reads the variable the step before it writes (no dataflow warning).

    compact writes each step on one line (flow style): 20,000 steps in 1.5 MB, under
    the 2 MiB file limit; the block style takes 110 bytes a step.
    """
    lines = ["name: bench", "settings:", "  entry_step_id: s0", "  max_turn_loops: 3", "steps:"]
    for i in range(n):
        nxt = f"s{i + 1}" if i + 1 < n else None
        kind = i % 3
        if compact:
            if nxt is None:
                step = "action: set_variables, rules: [{set: done, value: true}], end: true"
            elif kind == 0:
                step = f"action: set_variables, rules: [{{set: v{i}, value: {i}}}], next: {nxt}"
            elif kind == 1:
                step = (
                    f"action: json_decision_router, source: v{i - 1}, "
                    f"routes: {{go: {nxt}, skip: {nxt}}}, on_other: {nxt}"
                )
            else:
                step = f"action: loop_guard, on_allow: s{max(i - 2, 0)}, on_deny: {nxt}"
            lines.append(f"  - {{id: s{i}, {step}}}")
            continue
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
                f"    source: v{i - 1}",  # the set_variables step before writes it
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


# Each snippet prints the seconds from before its imports to the end of the validation.
OURS = """
import time, sys
t0 = time.perf_counter()
from runtime.format.validation import validate_paths
report = validate_paths([sys.argv[1]])
assert report.errors == 0, report.diagnostics[:3]
print(time.perf_counter() - t0)
"""
REFERENCE = """
import time, sys
t0 = time.perf_counter()
import json, yaml, jsonschema
schema = json.load(open(sys.argv[2]))
data = yaml.load(open(sys.argv[1]).read(), Loader=yaml.CSafeLoader)
jsonschema.Draft202012Validator(schema).validate(data)
print(time.perf_counter() - t0)
"""


def machine_reference() -> float:
    """Median ms of a fixed pure-Python loop (as benchmarks/retrieval.py): the machine's speed now."""
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        sum(i * i for i in range(3_000_000))
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs)


def _snippet(code: str, *args: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def _wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    """Print the medians."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--check-jsonschema", default=shutil.which("check-jsonschema"), help="its executable"
    )
    args = parser.parse_args()

    import gc

    from runtime.format.validation import validate_paths

    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for n in (500, 5000, 20_000):
            path = Path(tmp) / f"bench{n}.yaml"
            path.write_text(generate(n, compact=n > 5000))
            files[n] = path
        print(f"machine reference: {machine_reference():.0f} ms (lower is faster)")
        for n, path in files.items():
            report = validate_paths([str(path)])  # compiles the schemas of the actions used
            assert report.errors == 0, [d.message for d in report.diagnostics[:5]]
            times = []
            for _ in range(max(3, args.repeat if n < 20_000 else 3)):
                t0 = time.perf_counter()
                validate_paths([str(path)])
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            size = path.stat().st_size / 1e6
            print(
                f"in-process, {n:>6} steps ({size:.2f} MB): median {med * 1000:8.1f} ms "
                f"= {med / n * 1e6:5.1f} us/step (min {min(times) * 1000:.1f})"
            )
            assert gc.isenabled()  # the pause during loading is given back

        ours, ref, ratios = [], [], []
        for _ in range(args.repeat):  # interleaved, so drift hits both alike
            a = _snippet(OURS, str(files[500]))
            b = _snippet(REFERENCE, str(files[500]), str(SCHEMA))
            ours.append(a)
            ref.append(b)
            ratios.append(a / b)
        print(
            f"first validation in a fresh process, 500 steps: {statistics.median(ours) * 1000:.0f} ms"
            f" vs jsonschema + C loader {statistics.median(ref) * 1000:.0f} ms; "
            f"median paired ratio {statistics.median(ratios):.2f} (< 1: faster)"
        )

        cli = [sys.executable, "-m", "runtime", "validate", str(files[500])]
        if args.check_jsonschema:
            other = [args.check_jsonschema, "--schemafile", str(SCHEMA), str(files[500])]
            ours, ref, ratios = [], [], []
            for _ in range(args.repeat):
                a, b = _wall(cli), _wall(other)
                ours.append(a)
                ref.append(b)
                ratios.append(a / b)
            print(
                f"`runtime validate` 500 steps, whole process: {statistics.median(ours) * 1000:.0f} ms"
                f" vs check-jsonschema {statistics.median(ref) * 1000:.0f} ms; "
                f"median paired ratio {statistics.median(ratios):.2f} (target <= 0.4)"
            )
        else:
            walls = [_wall(cli) for _ in range(args.repeat)]
            print(
                f"`runtime validate` 500 steps, whole process: {statistics.median(walls) * 1000:.0f} ms"
            )
            print("(check-jsonschema not found: pass --check-jsonschema PATH to compare)")
        helps = [_wall([sys.executable, "-m", "runtime", "--help"]) for _ in range(args.repeat)]
        print(f"`runtime --help` wall median: {statistics.median(helps) * 1000:.0f} ms")
        print(f"machine reference: {machine_reference():.0f} ms (lower is faster)")


if __name__ == "__main__":
    main()
