"""Context packs' cost (docs/packs.md): recording one per model call, and `runtime context`.

1. Recording: a call_model step whose prompt holds 100 evidence blocks, run by the engine
   on a SQLite run store with the offline extractive model; the time is the step's whole
   pack path (CallModel.record_pack: sections, items, hashes, the drop report, the
   canonical JSON, the INSERT and its commit, the CONTEXT_PACK event), wrapped and timed
   per call. Also the builder alone (no store).
2. `runtime context`: a run of 1,000 model calls (each pack a copy of a code_qa answer
   pack, 17 items, 2 drops), read back as JSON and as the rich table, in a fresh process
   (start-up included), stdout to a pipe.

Also the recording with orjson turned off (runtime/context/canonical.py: the same bytes
from json alone), and the ledger entries the call adds (benchmarks/ledger.py measures them).

Run: python benchmarks/packs.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def blocks(n: int) -> list[str]:
    body = "public void Handle(Order order) { repository.Save(order); log.Info(order.Id); }\n" * 6
    return [f"--- NODE ---\nid: eshop::main::method::M{i}\ntext:\n{body}" for i in range(n)]


def recording(calls: int = 40, items: int = 100) -> dict[str, float]:
    from actions.call_model import CallModel
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.engine.store import SqliteRunStore
    from runtime.format.pipeline import Pipeline

    times: list[float] = []
    cpu: list[float] = []  # this thread's CPU time: what a busy shared machine disturbs less
    real = CallModel.record_pack

    def timed(self: Any, *args: Any, **kwargs: Any) -> None:
        start, c0 = time.perf_counter(), time.thread_time()
        real(self, *args, **kwargs)
        times.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - c0)

    CallModel.record_pack = timed  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "prompts").mkdir()
            (Path(tmp) / "prompts" / "sys.md").write_text("Answer from the evidence.\n")
            data = {
                "settings": {
                    "entry_step_id": "ask",
                    "max_steps": calls * 2 + 10,
                    "models": {"m": {"provider": "extractive", "context_window": 200_000}},
                },
                "steps": [
                    {
                        "id": "ask",
                        "action": "call_model",
                        "prompt_key": "sys",
                        "model": "m",
                        "max_output_tokens": 64,
                        "user_parts": {"q": {"source": "question"}, "e": {"source": "ev"}},
                        "next": "f",
                    },
                    {"id": "f", "action": "finalize", "source": "last_model_response"},
                ],
            }
            pipeline = Pipeline.from_dict(data, file=str(Path(tmp) / "p.yaml"))
            store = SqliteRunStore(str(Path(tmp) / "runs.db"))
            services = Services(settings=pipeline.settings, base_dir=tmp)
            engine = Engine(pipeline, services=services, store=store)
            ev = blocks(items)
            for n in range(calls):
                r = engine.run({"question": "Where are orders saved?", "ev": ev}, run_id=f"r{n}")
                assert r.status == "completed", r.error
                assert len(r.packs[0]["sections"][4]["items"]) == items
    finally:
        CallModel.record_pack = real  # type: ignore[method-assign]
    warm = times[2:]  # the first calls count tokens the later ones find cached
    warm_cpu = cpu[2:]
    return {
        "record_median_ms": statistics.median(warm) * 1000,
        "record_p90_ms": sorted(warm)[int(len(warm) * 0.9)] * 1000,
        "record_cpu_median_ms": statistics.median(warm_cpu) * 1000,
        "record_cpu_p90_ms": sorted(warm_cpu)[int(len(warm_cpu) * 0.9)] * 1000,
        "builder_median_ms": builder(items) * 1000,
    }


def builder(items: int, rounds: int = 200) -> float:
    """The PackBuilder alone: 100 items added, finished (ids, hashes), canonical bytes."""
    from runtime.context import packs

    texts = blocks(items)
    messages = [{"role": "user", "content": "\n\n".join(texts)}]
    runs = []
    for _ in range(rounds):
        start = time.perf_counter()
        b = packs.PackBuilder(run_id="r", step_id="s", model="m", prompt_budget=100_000)
        for i, text in enumerate(texts):
            b.add(
                "knowledge",
                120,
                item={
                    "id": f"n{i}",
                    "source": "search",
                    "score": 0.5,
                    "reason": f"search hit, rank {i}",
                    "content_hash": packs.content_hash(text),
                    "labels": [],
                    "decision": "scope:eshop/*/unlabelled",
                },
            )
        packs.canonical_bytes(b.finish(messages, 12_000))
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def context_command(calls: int = 1000) -> dict[str, float]:
    """`runtime context` over a run of `calls` packs: JSON and the table, in a new process."""
    from runtime.context import packs
    from runtime.engine.store import SqliteRunStore

    b = packs.PackBuilder(run_id="big", step_id="answer", model="m", prompt_budget=6000)
    b.add("policy", 104, item={"id": "prompt:code_qa/answer", "source": "prompt file"})
    b.add("user", 15, item={"id": "user_parts.question", "source": "variable question"})
    for i in range(14):
        b.add(
            "knowledge",
            150,
            item={
                "id": f"eshop::main::method::Eshop.Infrastructure.Repositories.R{i}.Save",
                "source": "search",
                "score": 0.3,
                "rank": i + 1,
                "reason": f"search hit, rank {i + 1}",
                "labels": [],
                "decision": "scope:eshop/*/unlabelled",
                "content_hash": packs.content_hash(str(i)),
                "evidence": {"retriever": "keyword", "query": "orders saved", "score": 0.3},
            },
        )
    b.add("fidelity", 189, item={"id": "preamble", "source": "fidelity preamble"})
    b.drop("eshop::main::table::dbo.Audit", "budget_skip", 300, by="fetch_node_texts")
    b.drop("graph:max_nodes", "per_item_cap", None, by="expand_dependency_tree")
    pack = b.finish([{"role": "user", "content": "x"}], 2500)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "runs.db")
        store = SqliteRunStore(db)
        _ensure_run(store, "big")
        for n in range(calls):
            store.save_pack("big", {**pack, "step_id": f"s{n % 7}"})
        for label, args in (("json", ["--json"]), ("table", [])):
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "runtime", "context", "big", "--store", db, *args],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append(time.perf_counter() - start)
            out[f"context_{label}_s"] = min(runs)
            out[f"context_{label}_bytes"] = len(done.stdout)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import runtime.cli"], check=True)
        out["python_startup_s"] = time.perf_counter() - start
    return out


def _ensure_run(store: Any, run_id: str) -> None:
    """A run in the store (a two-step run with no model call), for the packs to belong to."""
    from runtime.engine import Engine
    from runtime.format.pipeline import Pipeline

    steps = [
        {"id": "a", "action": "set_variables", "rules": [{"set": "x", "value": 1}], "next": "f"},
        {"id": "f", "action": "finalize", "source": "x"},
    ]
    pipeline = Pipeline.from_dict({"settings": {"entry_step_id": "a"}, "steps": steps})
    assert Engine(pipeline, store=store).run({}, run_id=run_id).status == "completed"


def without_orjson() -> dict[str, float]:
    """The recording with canonical JSON by the standard library alone."""
    from runtime.context import canonical

    canonical.use_fast(False)
    try:
        got = recording()
    finally:
        canonical.use_fast(True)
    return {
        "record_cpu_median_ms_json_only": got["record_cpu_median_ms"],
        "record_cpu_p90_ms_json_only": got["record_cpu_p90_ms"],
    }


def main() -> None:
    results = {
        **recording(),
        **without_orjson(),
        **context_command(),
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps({k: round(v, 4) for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
