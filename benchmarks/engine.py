"""Engine speed: steps/s for a loop of trivial steps, with and without a checkpoint per step,
and the checkpoint cost per step as the state grows.

Run: python benchmarks/engine.py
Targets (issue 3): >= 20,000 steps/s without the store; >= 2,000 steps/s with a
checkpoint per step at 1 KB of state.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Any

from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.engine.store import SqliteRunStore
from runtime.format.pipeline import Pipeline


class Tick(Action):
    """n += 1 and loop until the limit; carries a context blob that does not change."""

    name = "tick"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx: Any) -> Outcome | None:
        n = ctx.get("n") + 1
        ctx.set("n", n)
        return Outcome.to_branch("again" if n < ctx.step["limit"] else "done")


class Stop(Action):
    name = "stop"
    runnable = True
    terminal = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


REG = Registry.from_classes(Tick, Stop)


def pipeline(steps: int) -> Pipeline:
    return Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "t", "max_steps": steps + 10},
            "steps": [
                {"id": "t", "action": "tick", "limit": steps, "on_again": "t", "on_done": "s"},
                {"id": "s", "action": "stop"},
            ],
        }
    )


def rate(steps: int, store: Any, context_bytes: int, repeat: int = 5) -> float:
    """Median steps per second."""
    p = pipeline(steps)
    rates = []
    for i in range(repeat):
        engine = Engine(p, registry=REG, store=store)
        inputs = {"n": 0, "context": "x" * context_bytes}
        t0 = time.perf_counter()
        result = engine.run(inputs, run_id=f"r{context_bytes}-{i}-{time.time_ns()}")
        elapsed = time.perf_counter() - t0
        assert result.status == "completed", result.error
        rates.append((steps + 1) / elapsed)
    return statistics.median(rates)


def main() -> None:
    """Print the table recorded in docs/performance.md."""
    print(f"{'configuration':<44} {'steps/s':>10} {'per step':>10}")
    no_store = rate(20_000, None, 1024)
    print(f"{'no store, 1 KB state':<44} {no_store:>10,.0f} {1e6 / no_store:>8.1f}µs")
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteRunStore(f"{tmp}/runs.db")
        for size, label in ((1024, "1 KB"), (100 * 1024, "100 KB"), (1024 * 1024, "1 MB")):
            r = rate(2000, store, size)
            print(f"{'checkpoint per step, ' + label + ' state':<44} {r:>10,.0f} {1e6 / r:>8.1f}µs")


if __name__ == "__main__":
    main()
