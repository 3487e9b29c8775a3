"""Map steps (issue 31): the overhead of a branch per item, and I/O-bound items in parallel.

1. A map of 1,000 items whose branch is two trivial steps (set_variables, finalize), in a
   run store (each branch is a run of its own: created, checkpointed, finished), against
   the same 2,000 steps in sequence in one run (a loop), in the same kind of store:
   per-item overhead = (map - sequence) / 1,000.
2. A map of 50 items that each wait 50 ms (a sleep: I/O, no CPU) at max_concurrency 5 and
   10: wall time against the ideal 50 / max_concurrency * 50 ms.

    python benchmarks/branches.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry, default_registry
from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline


class Wait(Action):
    """Sleeps (stands for a model or HTTP call)."""

    name = "wait"
    summary = "Wait."
    fields: ClassVar[dict[str, dict[str, Any]]] = {"seconds": {"type": "number"}}
    runnable = True

    def run(self, ctx: Any) -> None:
        time.sleep(float(ctx.step.get("seconds", 0.05)))
        ctx.set("answer", "ok")


class Count(Action):
    """n += 1; loops until n reaches the limit (the sequential baseline)."""

    name = "count"
    summary = "Count."
    runnable = True
    bounds_loops = True
    outcomes: ClassVar[tuple[str, ...]] = ("again", "done")
    fields: ClassVar[dict[str, dict[str, Any]]] = {
        "limit": {"type": "integer"},
        "on_again": {"type": "string"},
        "on_done": {"type": "string"},
    }

    def run(self, ctx: Any) -> Outcome:
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        return Outcome("again" if n < ctx.step["limit"] else "done")


def registry() -> Registry:
    base = default_registry()
    return Registry.from_classes(
        Wait, Count, *(base.get(n) for n in ("set_variables", "finalize", "map"))
    )


def map_pipeline(items: int, branch: list[dict[str, Any]], width: int) -> Pipeline:
    return Pipeline.from_dict(
        {
            "name": "bench_map",
            "settings": {"entry_step_id": "prep", "max_steps": 10_000_000},
            "steps": [
                {
                    "id": "prep",
                    "action": "set_variables",
                    "rules": [{"set": "items", "value": list(range(items))}],
                    "next": "each",
                },
                {
                    "id": "each",
                    "action": "map",
                    "type": "map",
                    "items_from": "items",
                    "max_concurrency": width,
                    "results_to": "out",
                    "steps": branch,
                    "next": "end",
                },
                {"id": "end", "action": "finalize", "end": True},
            ],
        }
    )


TRIVIAL = [
    {
        "id": "a",
        "action": "set_variables",
        "rules": [{"set": "answer", "from": "item"}],
        "next": "b",
    },
    {"id": "b", "action": "finalize", "end": True},
]


def sequence_pipeline(steps: int) -> Pipeline:
    return Pipeline.from_dict(
        {
            "name": "bench_seq",
            "settings": {"entry_step_id": "c", "max_steps": 10_000_000},
            "steps": [
                {"id": "c", "action": "count", "limit": steps, "on_again": "c", "on_done": "e"},
                {"id": "e", "action": "finalize", "end": True},
            ],
        }
    )


def timed(pipeline: Pipeline, folder: str, name: str) -> float:
    store = SqliteRunStore(str(Path(folder) / f"{name}.db"))
    engine = Engine(pipeline, registry=registry(), store=store)
    started = time.perf_counter()
    result = engine.run({})
    elapsed = time.perf_counter() - started
    assert result.status == "completed", result.error
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as folder:
        maps, seqs = [], []
        for i in range(repeat):
            maps.append(timed(map_pipeline(1000, TRIVIAL, 4), folder, f"map{i}"))
            seqs.append(timed(sequence_pipeline(2000), folder, f"seq{i}"))
        m, s = statistics.median(maps), statistics.median(seqs)
        print(f"map of 1,000 trivial items (max_concurrency 4): {m * 1000:.0f} ms")
        print(f"the same 2,000 steps in sequence in one run:   {s * 1000:.0f} ms")
        print(f"overhead per item: {(m - s) / 1000 * 1000:.2f} ms ({m / s:.1f}x)")
        wait = [
            {"id": "w", "action": "wait", "seconds": 0.05, "next": "f"},
            {"id": "f", "action": "finalize", "end": True},
        ]
        for width in (5, 10):
            runs = [
                timed(map_pipeline(50, wait, width), folder, f"w{width}_{i}") for i in range(repeat)
            ]
            ideal = 50 / width * 0.05
            w = statistics.median(runs)
            print(
                f"50 items x 50 ms, max_concurrency {width}: {w * 1000:.0f} ms "
                f"(ideal {ideal * 1000:.0f} ms, {w / ideal:.2f}x)"
            )


if __name__ == "__main__":
    main()
