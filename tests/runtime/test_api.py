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


class Put(Action):
    """Writes `value` into `name`; ends the run when `end: true`."""

    name = "put"
    runnable = True

    def run(self, ctx):
        ctx.set(ctx.step["name"], ctx.step["value"])
        return None


def put_pipeline(writes: dict, outputs: list[str] | None = None) -> Pipeline:
    names = list(writes)
    steps = [
        {"id": f"s{i}", "action": "put", "name": n, "value": writes[n], "next": f"s{i + 1}"}
        for i, n in enumerate(names)
    ]
    steps[-1].pop("next")
    steps[-1]["end"] = True
    data: dict = {"settings": {"entry_step_id": "s0"}, "steps": steps}
    if outputs is not None:
        data["outputs"] = outputs
    return Pipeline.from_dict(data)


def test_output_is_one_mapping_with_or_without_declared_outputs():
    reg = Registry.from_classes(Put)

    def output(writes: dict, outputs: list[str] | None = None):
        return runtime.Runner(put_pipeline(writes, outputs), registry=reg).run({}).output

    assert output({"final_answer": "F", "answer": "A"}) == {"final_answer": "F"}
    assert output({"answer": "A"}) == {"answer": "A"}
    assert output({"other": 1}) == {}
    assert output({"x": [1], "final_answer": "F"}, ["x", "y"]) == {"x": [1], "y": None}


def test_every_event_names_its_run_as_delivered_and_as_stored(tmp_path):
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    p = Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "c"},
            "steps": [
                {"id": "c", "action": "count", "upto": 3, "on_again": "c", "on_done": "e"},
                {"id": "e", "action": "count", "upto": 0, "end": True},
            ],
        }
    )
    runner = runtime.Runner(p, store=store, registry=Registry.from_classes(Count))
    seen: list[dict] = []
    lock = threading.Lock()

    def listen(event: dict) -> None:
        with lock:
            seen.append(event)

    threads = [
        threading.Thread(target=runner.run, args=({},), kwargs={"run_id": rid, "on_event": listen})
        for rid in ("r1", "r2")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rid in ("r1", "r2"):
        mine = [e for e in seen if e["run_id"] == rid]
        assert [e["seq"] for e in mine] == [1, 2, 3, 4, 5, 6]
        assert store.events(rid) == mine
    # Events stored before they carried the run id are read back with it.
    store._conn().execute("UPDATE events SET data = json_remove(data, '$.run_id')")
    assert {e["run_id"] for e in store.events("r1")} == {"r1"}


class Hold(Action):
    """Counts like Count, but its first visit waits until the test opens the gate."""

    name = "hold"
    runnable = True
    outcomes = ("again", "done")
    entered = threading.Event()
    gate = threading.Event()

    def run(self, ctx):
        n = ctx.get("n", 0) + 1
        ctx.set("n", n)
        if n == 1:
            Hold.entered.set()
            assert Hold.gate.wait(10)
        return Outcome.to_branch("again" if n < 20 else "done")


def test_cancelling_the_arun_task_cancels_the_run(tmp_path):
    Hold.entered.clear()
    Hold.gate.clear()
    p = Pipeline.from_dict(
        {
            "settings": {"entry_step_id": "h", "max_steps": 100},
            "steps": [
                {"id": "h", "action": "hold", "on_again": "h", "on_done": "e"},
                {"id": "e", "action": "hold", "end": True},
            ],
        }
    )
    store = runtime.SqliteRunStore(str(tmp_path / "runs.db"))
    runner = runtime.Runner(p, store=store, registry=Registry.from_classes(Hold))

    async def main() -> None:
        task = asyncio.create_task(runner.arun({}, run_id="a1"))
        assert await asyncio.to_thread(Hold.entered.wait, 10)  # the first step is running
        task.cancel()
        for _ in range(3):  # the task handles its cancellation before the gate opens
            await asyncio.sleep(0)
        Hold.gate.set()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("the task was not cancelled")

    asyncio.run(main())
    [row] = store.runs()
    assert (row["status"], row["steps"], row["error"]) == (
        "failed",
        1,
        {"code": "RUN_CANCELLED", "message": "the run was cancelled", "step_id": "h"},
    )
    assert store.events("a1")[-1]["type"] == "RUN_FAILED"


def test_the_embedding_doc_example_runs_as_documented(capsys):
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "embedding.md").read_text()
    section = doc.split("## Cancelling a run, listing runs, reading events", 1)[1]
    code, printed = re.findall(r"```(?:python|text)\n(.*?)```", section, re.S)[:2]
    exec(compile(code, "docs/embedding.md", "exec"), {"__name__": "embedding_example"})
    assert capsys.readouterr().out == printed
