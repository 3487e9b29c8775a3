"""What the dataflow checks cost validation: paired, interleaved runs with and without them.

Run: python benchmarks/dataflow.py [--repeat 7] [--sizes 500,5000,20000]

For each size, the generated pipeline of benchmarks/validate.py (set_variables, routers
reading what the step before wrote, loop guards looping back) is validated in process
with the checks on and with `check_dataflow` replaced by a no-op, alternately, `repeat`
times. Prints the median of each, the median of the paired ratios (on / off) and the
median time of the check alone over a step graph already built (validation builds one
graph for the graph checks and this check). Times are CPU time of this process
(`time.process_time`), robust to the load of a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate import generate

import runtime.format.dataflow as dataflow
from runtime.contract.registry import default_registry
from runtime.format.checks import Graph
from runtime.format.loader import gc_paused
from runtime.format.validation import validate_paths


def _off(*args: Any, **kwargs: Any) -> Iterator[Any]:
    return iter(())


def _validate(path: str) -> float:
    start = time.process_time()
    report = validate_paths([path])
    elapsed = time.process_time() - start
    assert report.errors == 0 and report.warnings == 0, report.diagnostics[:3]
    return elapsed


def measure(size: int, repeat: int) -> dict[str, float]:
    """Medians (seconds) with and without the checks, the paired ratio, the check alone."""
    import yaml

    text = generate(size, compact=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "bench.yaml")
        Path(path).write_text(text)
        real = dataflow.check_dataflow
        _validate(path)  # schemas compiled, imports done
        on: list[float] = []
        off: list[float] = []
        for _ in range(repeat):
            on.append(_validate(path))
            dataflow.check_dataflow = _off  # type: ignore[assignment]
            try:
                off.append(_validate(path))
            finally:
                dataflow.check_dataflow = real
        data = yaml.safe_load(text)
        registry = default_registry()
        graph = Graph.build(data["steps"], registry)
        alone = []
        for _ in range(repeat):
            with gc_paused():  # as validation runs it
                start = time.process_time()
                found = list(dataflow.check_graph(graph, data["settings"], None))
                alone.append(time.process_time() - start)
            assert found == []
    return {
        "on": statistics.median(on),
        "off": statistics.median(off),
        "ratio": statistics.median(a / b for a, b in zip(on, off, strict=True)),
        "alone": statistics.median(alone),
    }


def main() -> int:
    """Print one line per size."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", default="500,5000,20000")
    args = parser.parse_args()
    print("steps   with checks   without   paired ratio   the check alone")
    for size in (int(s) for s in args.sizes.split(",")):
        m = measure(size, args.repeat)
        print(
            f"{size:>6}   {m['on'] * 1000:>8.0f} ms   {m['off'] * 1000:>5.0f} ms"
            f"   {m['ratio']:>10.3f}   {m['alone'] * 1000:>8.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
