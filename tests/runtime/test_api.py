"""The embedding API: exported names, a threaded runner, cancellation, asyncio."""

from __future__ import annotations

import asyncio
import threading

import runtime
from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.format.pipeline import Pipeline


def test_exported_members_match_all():
    public = {n for n in runtime.__all__}
    assert all(getattr(runtime, n) is not None for n in public)
    assert sorted(runtime.__all__) == runtime.__all__


class Count(Action):
    name = "count"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx):
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        return Outcome.to_branch("again" if n < ctx.step["upto"] else "done")


def make(upto: int) -> Pipeline:
    return Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "c", "max_steps": 10**7},
            "steps": [
                {
                    "id": "c",
                    "action": "count",
                    "upto": upto,
                    "on_again": "c",
                    "on_done": "c",
                    "end": False,
                }
            ],
        }
    )


def test_concurrent_runs_share_one_runner():
    p = Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "c"},
            "steps": [
                {"id": "c", "action": "count", "upto": 50, "on_again": "c", "on_done": "e"},
                {"id": "e", "action": "count", "upto": 0, "end": True},
            ],
        }
    )
    runner = runtime.Runner(p, registry=Registry.from_classes(Count))
    results = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(runner.run({"n": i}))) for i in range(10)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.state["n"] for r in results) == sorted(max(50, i + 1) + 1 for i in range(10))


def test_start_cancel_and_arun():
    runner = runtime.Runner(make(10**9), registry=Registry.from_classes(Count))
    handle = runner.start({})
    handle.cancel()
    result = handle.result(timeout=10)
    assert result.status == "failed" and result.error.code == "RUN_CANCELLED"
    small = runtime.Runner(make(3), registry=Registry.from_classes(Count))
    out = asyncio.run(small.arun({}, max_steps=5))
    assert out.error.code == "MAX_STEPS_EXCEEDED"
