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
from runtime.errors import StateError
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
    # A number as itself, a string as its size; names in sorted order (written n, text).
    assert [e["wrote"] for e in steps] == [
        {"n": n, "text": {"type": "str", "chars": n}} for n in (1, 2, 3, 4)
    ] + [{}]
    assert [list(e["wrote"]) for e in steps[:4]] == [["n", "text"]] * 4
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


class Kinds(Action):
    """Writes one value of each kind, in reverse name order; with `send`, also sends and deletes."""

    name = "kinds"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        ctx.set("z_none", None)
        ctx.set("y_bool", True)
        ctx.set("x_float", 2.5)
        ctx.set("w_int", 7)
        ctx.set("v_str", "abc")
        ctx.set("u_list", [1, 2, 3, 4])
        ctx.set("t_dict", {"a": 1})
        ctx.set("s_tuple", (1, 2))
        if ctx.step.get("send"):
            ctx.delete("gone")
            ctx.enqueue("k2", "note", {"x": 1})
        return None


KINDS_WROTE = {
    "s_tuple": {"type": "tuple", "items": 2},
    "t_dict": {"type": "dict", "items": 1},
    "u_list": {"type": "list", "items": 4},
    "v_str": {"type": "str", "chars": 3},
    "w_int": 7,
    "x_float": 2.5,
    "y_bool": True,
    "z_none": None,
}


def test_wrote_records_scalars_as_themselves_and_the_rest_as_summaries_on_both_paths():
    # Step k1 stages only writes (the loop applies them); k2 also deletes and sends, so
    # its changes go through Context.commit. Both give the same `wrote`, names sorted.
    p = Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "k1"},
            "steps": [
                {"id": "k1", "action": "kinds", "next": "k2"},
                {"id": "k2", "action": "kinds", "send": True, "next": "k3"},
                {"id": "k3", "action": "quiet"},
            ],
        }
    )
    registry = Registry.from_classes(Kinds, Quiet)
    result = Engine(p, registry=registry).run({"gone": "x"}, run_id="k")
    assert result.status == "completed", result.error
    k1, k2, k3 = steps_of(result.events)
    assert k1["wrote"] == KINDS_WROTE
    assert k2["wrote"] == {**KINDS_WROTE, "gone": {"deleted": True}}
    assert list(k1["wrote"]) == sorted(KINDS_WROTE)
    assert list(k2["wrote"]) == sorted([*KINDS_WROTE, "gone"])
    assert k3["wrote"] == {}
    # The state holds the values, not the summaries; the deleted name is gone.
    assert result.state["u_list"] == [1, 2, 3, 4] and result.state["v_str"] == "abc"
    assert result.state["s_tuple"] == (1, 2) and "gone" not in result.state
    # Types survive JSON: a reader tells a value from a summary by its JSON type.
    assert json.loads(json.dumps(k2["wrote"])) == k2["wrote"]
    enqueued = [e for e in result.events if e["type"] == "INBOX_ENQUEUE"]
    assert [(e["step_id"], e["seq"] < k2["seq"]) for e in enqueued] == [("k2", True)]


def test_a_write_after_a_delete_of_the_same_name_keeps_the_value():
    class DelSet(Action):
        name = "delset"
        runnable = True

        def run(self, ctx: Any) -> Outcome | None:
            ctx.delete("a")
            ctx.set("a", 5)
            ctx.set("b", 1)
            ctx.delete("b")
            return Outcome.end()

    p = Pipeline.from_dict(
        {"settings": {"entry_step_id": "d"}, "steps": [{"id": "d", "action": "delset"}]}
    )
    result = Engine(p, registry=Registry.from_classes(DelSet)).run({"a": 1, "b": 2})
    assert result.status == "completed", result.error
    assert result.state["a"] == 5 and "b" not in result.state
    assert steps_of(result.events)[0]["wrote"] == {"a": 5, "b": {"deleted": True}}


class Flaky(Action):
    """Attempt 1 reads `a`, writes `a_only`, deletes `n`, counts and sends, then fails;
    attempt 2 reads `b` and writes `b_only`."""

    name = "flaky"
    runnable = True

    def run(self, ctx: Any) -> Outcome | None:
        if ctx.attempt == 1:
            ctx.get("a", None)
            ctx.set("a_only", 1)
            ctx.delete("n")
            ctx.increment("tries")
            ctx.enqueue("f", "note", {})
            raise StateError("first attempt fails", code="VARIABLE_MISSING")
        ctx.get("b", None)
        ctx.set("b_only", 2)
        return Outcome.end()


def test_a_retried_step_reports_only_what_its_successful_attempt_read_and_wrote():
    p = Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "f"},
            "steps": [
                {
                    "id": "f",
                    "action": "flaky",
                    "retry": {"max_attempts": 2, "on": ["VARIABLE_MISSING"]},
                }
            ],
        }
    )
    engine = Engine(p, registry=Registry.from_classes(Flaky), sleep=lambda s: None)
    result = engine.run({"n": 0}, run_id="f")
    assert result.status == "completed", result.error
    (step,) = steps_of(result.events)
    assert (step["attempt"], step["read"], step["wrote"]) == (2, ["b"], {"b_only": 2})
    assert result.state == {"n": 0, "b_only": 2}
    assert not any(e["type"] == "INBOX_ENQUEUE" for e in result.events)
    assert "counters" not in result.events[-1]  # the failed attempt's count was dropped
