"""step-runtime side by side with LangGraph and the older engine, interleaved, as paired ratios.

Run: python benchmarks/compare.py [--older-engine PATH] [--pairs N] [--quick] [--only SECTIONS]

Each engine runs in a worker process of its own (one process tree; no engine's imports
or garbage weigh on another's), kept warm for the whole session. The main process
asks the workers in turn, alternating who goes first, so each step-runtime
measurement has a partner taken at nearly the same moment on the same machine. A
table row is the median of the paired ratios (> 1: step-runtime is better), so
drifting machine load cancels out as far as it can; the medians of the rates are
printed beside it for scale. The load average is printed at the start and the end.

Sections (`--only engine,checkpoint,size,budget,validation`):
- engine: a trivial loop of 10,003 steps (n += 1 until a limit, then stop), no
  store, every step traced (step-runtime's STEP events; the older engine's action
  appends one event per step in the older engine's own event format, with its
  `ts_utc`/`t_ms` timestamps, as its actions do). Rates by wall clock, with the
  ratio of thread CPU time beside it (less sensitive to other processes).
  LangGraph runs the same graph without a checkpointer.
- checkpoint: the same loop with a checkpoint after every step into a new SQLite
  file, runs of 1,003 / 10,003 / 100,003 steps, at equal durability: `normal`
  (step-runtime's default; LangGraph's SqliteSaver with PRAGMA synchronous=NORMAL)
  and `full` (fsync every checkpoint; SqliteSaver's default). LangGraph runs with
  durability="sync" (the checkpoint is written before the next step, as ours is).
- size: checkpointed steps/s with 1 KB / 100 KB / 1 MB of input in the state
  (2,003 steps, normal), step-runtime paired with LangGraph, and step-runtime's
  1 MB rate as a ratio of its 1 KB rate (flat is 1.0).
- budget: manage_context_budget, 100 incoming nodes of ~500 tokens onto ~50,000
  tokens of context, each sample in a new process (cold caches): "pipeline" = the
  context was counted when earlier steps built it and fetch_node_texts counted the
  incoming blocks, in this process; "carried" = nothing counted in this process, but
  the run carries counts made before it: each node's text counts as the indexer stores
  them (handed on by fetch_node_texts) and the previous budget step's counts of the
  context (`context_block_tokens`), as after a resume; "nothing counted" = no counts at
  all (an index made before counts were stored, a context from elsewhere).
- validation: benchmarks/validate.py's generated pipelines: in-process CPU time per step at
  500, 5,000 and 20,000 steps (linear: the per-step time stays flat; the row's ratio is
  20,000's per-step time over 500's), the first validation in a fresh process against
  jsonschema + PyYAML's C loader on the same file, and `runtime validate` of 500 steps
  against check-jsonschema (`--check-jsonschema PATH`, or on PATH; skipped without it),
  as paired ratios (here < 1 means step-runtime is faster).

The older engine is never vendored: pass a checkout of its source (for example
`git -C <its repository> worktree add /tmp/older`). `pip install -e .[bench]` installs
LangGraph.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# --- workers ------------------------------------------------------------------------------


def _ours() -> dict[str, Any]:
    """step-runtime's measurements."""
    sys.path.insert(0, str(HERE))
    from engine import REG, pipeline  # benchmarks/engine.py: the same Tick/Stop loop

    from runtime.engine import Engine
    from runtime.engine.store import SqliteRunStore

    def loop(steps: int) -> dict[str, float]:
        engine = Engine(pipeline(steps - 1), registry=REG)
        inputs = {"n": 0, "context": "x" * 1024}
        c0, t0 = time.thread_time(), time.perf_counter()
        result = engine.run(inputs, run_id="loop")
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        assert result.status == "completed" and len(result.events) == steps + 2, result.error
        return {"rate": steps / wall, "cpu_rate": steps / cpu}

    def checkpoint(steps: int, durability: str, input_bytes: int) -> dict[str, float]:
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteRunStore(f"{tmp}/runs.db")
            engine = Engine(pipeline(steps - 1), registry=REG, store=store, durability=durability)
            inputs = {"n": 0, "context": "x" * input_bytes}
            t0 = time.perf_counter()
            result = engine.run(inputs, run_id="cp")
            wall = time.perf_counter() - t0
            assert result.status == "completed", result.error
            assert store.load("cp")["engine"]["step_count"] == steps
            store.close()
        return {"rate": steps / wall}

    return {"loop": loop, "checkpoint": checkpoint}


def _langgraph() -> dict[str, Any]:
    """LangGraph's measurements: the same loop as a StateGraph."""
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, StateGraph

    class S(TypedDict):
        n: int
        context: str

    def build(limit: int, saver: Any) -> Any:
        g = StateGraph(S)
        g.add_node("tick", lambda s: {"n": s["n"] + 1})
        g.add_node("stop", lambda s: {})
        g.set_entry_point("tick")
        g.add_conditional_edges(
            "tick", lambda s: "tick" if s["n"] < limit else "stop", {"tick": "tick", "stop": "stop"}
        )
        g.add_edge("stop", END)
        return g.compile(checkpointer=saver)

    def loop(steps: int) -> dict[str, float]:
        app = build(steps - 1, None)
        c0, t0 = time.thread_time(), time.perf_counter()
        out = app.invoke({"n": 0, "context": "x" * 1024}, {"recursion_limit": steps + 10})
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        assert out["n"] == steps - 1
        return {"rate": steps / wall, "cpu_rate": steps / cpu}

    def checkpoint(steps: int, durability: str, input_bytes: int) -> dict[str, float]:
        with tempfile.TemporaryDirectory() as tmp:
            conn = sqlite3.connect(f"{tmp}/lg.db", check_same_thread=False)
            saver = SqliteSaver(conn)
            saver.setup()  # WAL; SQLite's default synchronous=FULL: an fsync per commit
            if durability == "normal":
                conn.execute("PRAGMA synchronous=NORMAL")
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            app = build(steps - 1, saver)
            config = {"recursion_limit": steps + 10, "configurable": {"thread_id": "cp"}}
            t0 = time.perf_counter()
            out = app.invoke({"n": 0, "context": "x" * input_bytes}, config, durability="sync")
            wall = time.perf_counter() - t0
            assert out["n"] == steps - 1
            conn.close()
        return {"rate": steps / wall}

    return {"loop": loop, "checkpoint": checkpoint}


def _older(path: str) -> dict[str, Any]:
    """The older engine (PipelineEngine) running the same loop, from a checkout of its source."""
    sys.path.insert(0, path)
    from code_query_engine.pipeline.action_registry import ActionRegistry
    from code_query_engine.pipeline.definitions import PipelineDef, StepDef
    from code_query_engine.pipeline.engine import PipelineEngine, PipelineRuntime
    from code_query_engine.pipeline.state import PipelineState

    class Tick:
        """n += 1; one trace event per step in the older engine's event format."""

        def execute(self, step: Any, state: Any, runtime: Any) -> str | None:
            n = state.n + 1
            state.n = n
            state.pipeline_trace_events.append(
                {
                    "event_type": "STEP",
                    "ts_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "t_ms": int(time.time() * 1000),
                    "step": {"id": step.id, "action": step.action},
                }
            )
            raw = step.raw
            return raw["on_again"] if n < raw["limit"] else raw["on_done"]

    class Stop:
        def execute(self, step: Any, state: Any, runtime: Any) -> str | None:
            return None

    def loop(steps: int) -> dict[str, float]:
        registry = ActionRegistry()
        registry.register("tick", Tick())
        registry.register("stop", Stop())
        raw_t = {"id": "t", "action": "tick", "limit": steps - 1, "on_again": "t", "on_done": "s"}
        p = PipelineDef(
            name="loop",
            settings={"entry_step_id": "t"},
            steps=[
                StepDef("t", "tick", raw_t),
                StepDef("s", "stop", {"id": "s", "action": "stop", "end": True}),
            ],
        )
        state = PipelineState(user_query="q", session_id="s", consultant="c")
        state.n = 0  # type: ignore[attr-defined]
        state.context = "x" * 1024  # type: ignore[attr-defined]
        state.pipeline_trace_events = []  # type: ignore[attr-defined]
        runtime = PipelineRuntime(
            pipeline_settings={},
            model=None,
            searcher=None,
            markdown_translator=None,
            translator_pl_en=None,
            history_manager=None,
        )
        engine = PipelineEngine(registry)
        c0, t0 = time.thread_time(), time.perf_counter()
        result = engine.run(p, state, runtime)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        assert result.steps_used == steps and len(state.pipeline_trace_events) == steps - 1
        return {"rate": steps / wall, "cpu_rate": steps / cpu}

    return {"loop": loop}


def worker(kind: str, older: str | None) -> None:
    """Answer JSON requests on stdin, one per line, until stdin closes."""
    ops = (
        _ours() if kind == "ours" else _langgraph() if kind == "langgraph" else _older(older or "")
    )
    for line in sys.stdin:
        req = json.loads(line)
        result = ops[req.pop("op")](**req)
        print(json.dumps(result), flush=True)


def _budget_inputs() -> tuple[Any, list[str], list[dict[str, Any]]]:
    """(the token counter, ~50,000 tokens of context blocks, 100 incoming ~500-token nodes)."""
    sys.path.insert(0, str(HERE))
    from corpus import corpus

    from runtime.context.blocks import format_block
    from runtime.context.tokens import get_counter

    counter = get_counter()  # loading the tokenizer is not the step's cost
    texts = [t for _, _, t in corpus(600, seed=9)]
    # Nodes of ~500 tokens: corpus files joined until they reach it (real nodes are whole
    # members and types, of every size; 500 is the case the target names).
    nodes: list[str] = []
    buf: list[str] = []
    for text in texts:
        buf.append(text)
        if counter.count("\n".join(buf)) >= 480:
            nodes.append("\n".join(buf))
            buf = []
    existing: list[str] = []
    total = 0
    for i, text in enumerate(nodes[100:] * 3):
        block = format_block(
            {"id": f"old{i}", "path": f"p{i}.cs", "language": "dotnet", "text": text},
            compact=False,
        )
        existing.append(block)
        total += counter.count(block)
        if total >= 50_000:
            break
    incoming = [
        {
            "id": f"new{i}",
            "path": f"n{i}.cs",
            "language": "dotnet" if i % 2 else "sql",
            "text": nodes[i],
            "metadata": {},
        }
        for i in range(100)
    ]
    return counter, existing, incoming


def older_budget_once(path: str) -> float:
    """The older engine's manage_context_budget on the same inputs in this (new) process, in ms.

    Its token counter is ours (tiktoken cl100k_base), so both count with the same BPE.
    """
    counter, existing, incoming = _budget_inputs()
    sys.path.insert(0, path)
    from code_query_engine.pipeline.actions.manage_context_budget import (
        ManageContextBudgetAction,
    )
    from code_query_engine.pipeline.definitions import StepDef
    from code_query_engine.pipeline.engine import PipelineRuntime
    from code_query_engine.pipeline.state import PipelineState

    class Count:
        def count_tokens(self, text: str) -> int:
            return counter.count(text)

    raw = {
        "id": "b",
        "action": "manage_context_budget",
        "on_ok": "a",
        "on_over": "b",
        "compact_code": {"rules": [{"language": "sql", "policy": "threshold", "threshold": 0.8}]},
    }
    state = PipelineState(user_query="q", session_id="s", consultant="c")
    state.context_blocks = list(existing)
    state.node_texts = [{**item, "node_id": item["id"]} for item in incoming]
    runtime = PipelineRuntime(
        pipeline_settings={"max_context_tokens": 200_000},
        model=None,
        searcher=None,
        markdown_translator=None,
        translator_pl_en=None,
        history_manager=None,
        token_counter=Count(),
    )
    step = StepDef("b", "manage_context_budget", raw)
    t0 = time.perf_counter()
    nxt = ManageContextBudgetAction().execute(step, state, runtime)
    ms = (time.perf_counter() - t0) * 1000
    assert nxt == "a" and len(state.context_blocks) == len(existing) + 100, nxt
    return ms


def budget_once(mode: str) -> tuple[float, float]:
    """One manage_context_budget call in this (new) process: (wall ms, CPU ms of the thread)."""
    from actions.manage_context_budget import ManageContextBudget
    from runtime.context.blocks import format_block
    from runtime.context.tokens import TokenCounter
    from runtime.engine.services import Services

    counter, existing, incoming = _budget_inputs()
    state: dict[str, Any] = {}
    if mode == "pipeline":
        # What the earlier steps of a run did in this process: the budget step that built
        # the context counted it, and fetch_node_texts counted each incoming block.
        counter.count_joined(existing)
        for item in incoming:
            counter.count_block(format_block(item, compact=False), "\n\n")
    else:  # nothing counted in this process; counts of whole texts made above are forgotten
        counter._cache.clear()
        counter._split.clear()
        counter._joins.clear()
    if mode == "carried":
        # A new process with what a run carries: the counts the indexer stored with each
        # node's text (handed on by fetch_node_texts) and the previous budget step's counts
        # of the context (run state). Made by another counter, so this one stays cold.
        other = TokenCounter(counter.encoding)
        state["context_block_tokens"] = other.carry_blocks(existing)
        incoming = [{**item, "tokens": other.carry(item["text"])} for item in incoming]

    class Ctx:
        step = {
            "on_ok": "a",
            "on_over": "b",
            "compact_code": {
                "rules": [{"language": "sql", "policy": "threshold", "threshold": 0.8}]
            },
        }
        settings = {"max_context_tokens": 200_000}
        messages: list[Any] = []
        step_id = "b"

        def __init__(self) -> None:
            self.services = Services(settings=self.settings)
            self.vars = {"context_blocks": list(existing), "node_texts": incoming, **state}

        def get(self, name: str, default: Any = None) -> Any:
            return self.vars.get(name, default)

        def set(self, name: str, value: Any) -> None:
            self.vars[name] = value

        def trace(self, event: str, **data: Any) -> None:
            self.event = data

        def requeue(self, m: Any) -> None:
            pass

    ctx = Ctx()
    t0, c0 = time.perf_counter(), time.thread_time()
    outcome = ManageContextBudget().run(ctx)  # type: ignore[arg-type]
    ms, cpu = (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000
    assert outcome is not None and outcome.branch == "ok"
    assert len(ctx.vars["context_blocks"]) == len(existing) + 100
    # The step's total is what tiktoken gives the joined context in one piece.
    assert ctx.event["total_tokens"] == counter.count("\n\n".join(ctx.vars["context_blocks"]))
    if mode == "carried":
        assert ctx.event["carried_counts"] == {"context": len(existing), "incoming": 100}
    return ms, cpu


# --- the orchestrator ---------------------------------------------------------------------


class Worker:
    """A warm worker process for one engine."""

    def __init__(self, kind: str, older: str | None = None) -> None:
        args = [sys.executable, __file__, "--worker", kind]
        if older:
            args += ["--older-engine", older]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, op: str, **kw: Any) -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker for {op} died")
        return dict(json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def paired(
    ours: Worker, other: Worker, pairs: int, op: str, key: str = "rate", **kw: Any
) -> tuple[float, float, float, list[float]]:
    """(median of ours/other, median ours, median other, the ratios), alternating who starts."""
    a: list[float] = []
    b: list[float] = []
    for i in range(pairs):
        first, second = (ours, other) if i % 2 == 0 else (other, ours)
        r1 = first.ask(op, **kw)[key]
        r2 = second.ask(op, **kw)[key]
        x, y = (r1, r2) if first is ours else (r2, r1)
        a.append(x)
        b.append(y)
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return statistics.median(ratios), statistics.median(a), statistics.median(b), ratios


def row(label: str, ours: float, other: float | None, ratio: float | str, note: str = "") -> None:
    other_s = f"{other:>12,.0f}" if other is not None else f"{'-':>12}"
    ratio_s = f"{ratio:>7.2f}" if isinstance(ratio, float) else f"{ratio:>7}"
    print(f"| {label:<58} | {ours:>12,.0f} | {other_s} | {ratio_s} | {note}", flush=True)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    """Print the comparison table recorded in docs/performance.md."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--older-engine", help="a checkout of the older engine's source")
    ap.add_argument("--pairs", type=int, default=7, help="pairs per row (fewer for long runs)")
    ap.add_argument("--quick", action="store_true", help="skip the 100,003-step rows")
    ap.add_argument("--only", default="engine,checkpoint,size,budget,validation")
    ap.add_argument(
        "--check-jsonschema",
        default=shutil.which("check-jsonschema"),
        help="check-jsonschema's executable (a throwaway venv), for the validation rows",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--budget-once", help=argparse.SUPPRESS)
    ap.add_argument("--older-budget-once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.older_engine)
        return
    if args.budget_once:
        print(json.dumps(budget_once(args.budget_once)))
        return
    if args.older_budget_once:
        print(json.dumps(older_budget_once(args.older_engine or "")))
        return
    only = set(args.only.split(","))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {load()}")
    print(f"| {'measure':<58} | {'step-runtime':>12} | {'reference':>12} | {'ratio':>7} | pairs")
    print(f"|{'-' * 60}|{'-' * 14}|{'-' * 14}|{'-' * 9}|------")
    ours = Worker("ours")
    lg = Worker("langgraph")
    older = Worker("older", args.older_engine) if args.older_engine else None
    n = args.pairs
    try:
        if "engine" in only:
            steps = 10_003
            for w in filter(None, (ours, lg, older)):  # warm up: imports, first-run costs
                w.ask("loop", steps=steps)
            if older is not None:
                ratio, a, b, rs = paired(ours, older, n * 3, "loop", steps=steps)
                row("engine loop, 10,003 steps, tracing, vs older engine", a, b, ratio, _spread(rs))
                ratio, a, b, rs = paired(ours, older, n * 3, "loop", "cpu_rate", steps=steps)
                row("  same, thread CPU time", a, b, ratio, _spread(rs))
            ratio, a, b, rs = paired(ours, lg, n, "loop", steps=steps)
            row(
                "engine loop, 10,003 steps, vs LangGraph (no checkpointer)",
                a,
                b,
                ratio,
                _spread(rs),
            )
        if "checkpoint" in only:
            lengths = [(1_003, n), (10_003, max(3, n // 2))]
            if not args.quick:
                lengths.append((100_003, 3))
            for durability in ("normal", "full"):
                for steps, k in lengths:
                    kw = {"steps": steps, "durability": durability, "input_bytes": 1024}
                    ratio, a, b, rs = paired(ours, lg, k, "checkpoint", **kw)
                    label = f"checkpoint per step, {steps:,} steps, {durability}, vs SqliteSaver"
                    row(label, a, b, ratio, _spread(rs))
        if "size" in only:
            for size, label in ((1024, "1 KB"), (100 * 1024, "100 KB"), (1024 * 1024, "1 MB")):
                kw = {"steps": 2_003, "durability": "normal", "input_bytes": size}
                ratio, a, b, rs = paired(ours, lg, n, "checkpoint", **kw)
                row(
                    f"checkpointed steps/s, {label} input, vs SqliteSaver", a, b, ratio, _spread(rs)
                )
            # flatness: 1 KB and 1 MB runs of step-runtime, interleaved
            small: list[float] = []
            large: list[float] = []
            kw = {"steps": 2_003, "durability": "normal"}
            for _ in range(n):
                small.append(ours.ask("checkpoint", input_bytes=1024, **kw)["rate"])
                large.append(ours.ask("checkpoint", input_bytes=1 << 20, **kw)["rate"])
            flat = [x / y for x, y in zip(large, small, strict=True)]
            row(
                "  step-runtime 1 MB rate / 1 KB rate",
                statistics.median(large),
                statistics.median(small),
                statistics.median(flat),
                _spread(flat),
            )
        if "budget" in only:
            modes = ("pipeline", "carried", "nothing counted")
            wall: dict[str, list[float]] = {m: [] for m in modes}
            cpu: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(n):  # the modes interleaved: load on the machine hits each alike
                for mode in modes:
                    out = subprocess.run(
                        [sys.executable, __file__, "--budget-once", mode],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                    w, c = json.loads(out)
                    wall[mode].append(w)
                    cpu[mode].append(c)
            for mode in modes:
                w, c = wall[mode], cpu[mode]
                print(
                    f"| manage_context_budget, 100 x ~500 tokens onto 50k, new process, {mode}: "
                    f"{statistics.median(w):.1f} ms median ({min(w):.1f}-{max(w):.1f}, "
                    f"{n} processes), CPU {statistics.median(c):.1f} ms ({min(c):.1f}-{max(c):.1f})",
                    flush=True,
                )
            if args.older_engine:  # its step re-counts the whole context per node: 3 samples
                cmd = [sys.executable, __file__, "--older-budget-once"]
                cmd += ["--older-engine", args.older_engine]
                older_ms = [
                    float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                    for _ in range(3)
                ]
                med = statistics.median(older_ms)
                print(
                    f"| the older engine's manage_context_budget, same inputs, new process: "
                    f"{med:.0f} ms median ({min(older_ms):.0f}-{max(older_ms):.0f}, 3 processes)",
                    flush=True,
                )
        if "validation" in only:
            validation_rows(n, args.check_jsonschema)
    finally:
        for w in filter(None, (ours, lg, older)):
            w.close()
    print(f"load average at the end {load()}")


def validation_rows(pairs: int, check_jsonschema: str | None) -> None:
    """The validation rows, from benchmarks/validate.py's generated pipelines and snippets."""
    sys.path.insert(0, str(HERE))
    import validate as v

    from runtime.format.validation import validate_paths

    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        per_step = {}
        for steps in (500, 5_000, 20_000):
            path = Path(tmp) / f"bench{steps}.yaml"
            path.write_text(v.generate(steps, compact=steps > 5_000))
            files[steps] = path
            report = validate_paths([str(path)])  # compiles the schemas of the actions used
            assert report.errors == 0, [d.message for d in report.diagnostics[:5]]
            times = []
            for _ in range(pairs if steps < 20_000 else 3):
                t0 = time.process_time()  # CPU time: robust to other processes' load
                validate_paths([str(path)])
                times.append(time.process_time() - t0)
            per_step[steps] = statistics.median(times) / steps
            print(
                f"| validation in-process, {steps:,} steps: {statistics.median(times) * 1000:.0f} ms"
                f" CPU median, {per_step[steps] * 1e6:.0f} us/step",
                flush=True,
            )
        row(
            "  per-step time 20,000 / 500 steps (1.0: linear)",
            per_step[20_000] * 1e6,
            per_step[500] * 1e6,
            per_step[20_000] / per_step[500],
            "us/step",
        )
        a_s, b_s, ratios = [], [], []
        for i in range(pairs):
            ours = lambda: v._snippet(v.OURS, str(files[500]))  # noqa: E731
            ref = lambda: v._snippet(v.REFERENCE, str(files[500]), str(v.SCHEMA))  # noqa: E731
            if i % 2 == 0:
                a, b = ours(), ref()
            else:
                b, a = ref(), ours()
            a_s.append(a * 1000)
            b_s.append(b * 1000)
            ratios.append(a / b)
        row(
            "first validation, fresh process, 500 steps, vs jsonschema+CLoader (ms)",
            statistics.median(a_s),
            statistics.median(b_s),
            statistics.median(ratios),
            f"{_spread(ratios)}; < 1: faster",
        )
        if not check_jsonschema:
            print(
                "| `runtime validate` vs check-jsonschema: skipped (pass --check-jsonschema PATH)"
            )
            return
        cli = [sys.executable, "-m", "runtime", "validate", str(files[500])]
        other = [check_jsonschema, "--schemafile", str(v.SCHEMA), str(files[500])]
        a_s, b_s, ratios = [], [], []
        for i in range(pairs):
            if i % 2 == 0:
                a, b = v._wall(cli), v._wall(other)
            else:
                b, a = v._wall(other), v._wall(cli)
            a_s.append(a * 1000)
            b_s.append(b * 1000)
            ratios.append(a / b)
        row(
            "`runtime validate` 500 steps vs check-jsonschema, whole process (ms)",
            statistics.median(a_s),
            statistics.median(b_s),
            statistics.median(ratios),
            f"{_spread(ratios)}; target <= 0.4",
        )


def _spread(ratios: list[float]) -> str:
    return f"{len(ratios)} ({min(ratios):.2f}-{max(ratios):.2f})"


if __name__ == "__main__":
    main()
