"""The STEP event the engine's loop builds: names read, values written, the transition.

The loop builds STEP events inline and shares the list of names read between visits of
a step that read the same names, so these tests pin what each event says visit by visit.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from runtime.contract.action import Action, Outcome
from runtime.contract.registry import Registry
from runtime.engine import Engine
from runtime.format.pipeline import Pipeline


class Walk(Action):
    """Reads `n` (and, on visits 2 and 3, more names), writes n + 1 and a text."""

    name = "walk"
    runnable = True
    outcomes = ("again", "done")

    def run(self, ctx: Any) -> Outcome | None:
        n = ctx.get("n") + 1
        if n in (2, 3):  # visits 2 and 3 read more, in an unsorted order
            ctx.get("zeta", None)
            ctx.get("alpha", None)
        ctx.set("n", n)
        ctx.set("text", "x" * n)
        return Outcome.to_branch("again" if n < ctx.step["limit"] else "done")


class Quiet(Action):
    """Reads and writes nothing."""

    name = "quiet"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        return Outcome.end()


REG = Registry.from_classes(Walk, Quiet)


def pipeline(limit: int) -> Pipeline:
    return Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "w"},
            "steps": [
                {"id": "w", "action": "walk", "limit": limit, "on_again": "w", "on_done": "q"},
                {"id": "q", "action": "quiet"},
            ],
        }
    )


def steps_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "STEP"]


def test_each_visit_reports_the_names_it_read_sorted_and_what_it_wrote():
    result = Engine(pipeline(4), registry=REG).run({"n": 0}, run_id="r")
    assert result.status == "completed"
    steps = steps_of(result.events)
    assert [e["read"] for e in steps] == [
        ["n"],
        ["alpha", "n", "zeta"],
        ["alpha", "n", "zeta"],
        ["n"],
        [],
    ]
    assert [e["wrote"] for e in steps] == [
        {"n": {"type": "int", "value": n}, "text": {"type": "str", "chars": n}}
        for n in (1, 2, 3, 4)
    ] + [{}]
    assert [(e["step_id"], e["outcome"], e["next"], e["attempt"]) for e in steps] == [
        ("w", "again", "w", 1),
        ("w", "again", "w", 1),
        ("w", "again", "w", 1),
        ("w", "done", "q", 1),
        ("q", "end", None, 1),
    ]
    seqs = [e["seq"] for e in result.events]
    assert seqs == list(range(1, len(result.events) + 1))
    assert all(e["run_id"] == "r" and e["action"] in ("walk", "quiet") for e in steps)
    assert all(e["duration_ms"] >= 0 for e in steps)
    # The events are JSON data, as a store or a listener receives them.
    assert json.loads(json.dumps(result.events)) == result.events


def test_listeners_see_each_step_event_as_it_happens():
    seen: list[tuple[str, list[str]]] = []
    Engine(pipeline(2), registry=REG).run(
        {"n": 0}, on_event=lambda e: seen.append((e["type"], list(e.get("read", []))))
    )
    assert [s for s in seen if s[0] == "STEP"] == [
        ("STEP", ["n"]),
        ("STEP", ["alpha", "n", "zeta"]),
        ("STEP", []),
    ]


def test_concurrent_runs_of_one_engine_report_their_own_reads():
    engine = Engine(pipeline(60), registry=REG)
    results: list[Any] = []

    def go(i: int) -> None:
        results.append(engine.run({"n": 0}, run_id=f"r{i}"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = [["n"], ["alpha", "n", "zeta"], ["alpha", "n", "zeta"]] + [["n"]] * 57 + [[]]
    for result in results:
        assert [e["read"] for e in steps_of(result.events)] == expected
