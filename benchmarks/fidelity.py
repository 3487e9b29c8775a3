"""Context fidelity speed: preambles of a long run, and a `full` thread of 500 messages.

Run: python benchmarks/fidelity.py [--repeat 21]

A run with 1,000 completed steps (each with a note of 20-60 words) and 200 variables
(short strings, 2 KB texts, nested JSON): build the preamble of every mode with the real
cl100k_base counter, within its budget. Then a `full` step on a thread of 500 messages
(250 user/assistant turns of ~80 words): resolve the mode and the thread and assemble the
messages sent (the thread copied out of the run state, then the step's own), and, for a
resume, read the 500 messages back from the SQLite run store. Times are CPU time of this
process (`time.process_time`): the work is on one thread, and on a shared machine wall
time measures the load as much as the code. Scenarios interleaved, medians reported.

Target (issue 16): median under 5 ms for each preamble and for resolving the thread.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.context import fidelity as fid
from runtime.context.tokens import TokenCounter, get_counter
from runtime.engine.state import RunState
from runtime.engine.step_context import Context
from runtime.engine.store import SqliteRunStore

WORDS = [
    "the",
    "parser",
    "rejects",
    "ports",
    "outside",
    "range",
    "review",
    "found",
    "two",
    "issues",
    "fixed",
    "tests",
    "pass",
]


def run_view(rng: random.Random) -> fid.RunView:
    """1,000 completed steps and 200 variables."""
    log = fid.HistoryLog()
    for i in range(1000):
        sid = f"step_{i % 40}"
        reply = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
        log.feed({"type": "MODEL_CALL", "step_id": sid, "reply": reply})
        wrote = {f"var_{(i * 7) % 200}": {}}
        log.feed(
            {
                "type": "STEP",
                "step_id": sid,
                "action": rng.choice(["call_model", "search_nodes", "set_variables"]),
                "outcome": rng.choice(["next", "yes", "no"]),
                "next": f"step_{(i + 1) % 40}",
                "attempt": rng.choice([1, 1, 1, 2]),
                "duration_ms": rng.uniform(0, 4000),
                "wrote": wrote,
            }
        )
    variables: dict[str, Any] = {}
    for j in range(200):
        kind = j % 3
        if kind == 0:
            variables[f"var_{j}"] = " ".join(rng.choice(WORDS) for _ in range(5))
        elif kind == 1:
            variables[f"var_{j}"] = " ".join(rng.choice(WORDS) for _ in range(350))  # ~2 KB
        else:
            variables[f"var_{j}"] = {"items": list(range(30)), "meta": {"ok": True, "n": j}}
    return fid.RunView(
        pipeline="bench",
        goal="Fix the port parser and review it until it is ready.",
        run_id="r1",
        step_id="now",
        total_steps=40,
        history=log.records,
        variables=variables,
        written=list(log.written),
    )


def thread_context(rng: random.Random, n: int) -> tuple[Context, list[dict[str, str]]]:
    """A Context whose run state holds thread `coding` with n messages."""
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": " ".join(rng.choice(WORDS) for _ in range(80)),
        }
        for i in range(n)
    ]
    state = RunState(threads={"coding": messages})
    pipeline = SimpleNamespace(settings={"default_thread": "coding"})
    ctx = Context(
        run_id="r1",
        pipeline=pipeline,  # type: ignore[arg-type]
        state=state,
        inbox=None,  # type: ignore[arg-type]
        services=None,  # type: ignore[arg-type]
        tracer=None,  # type: ignore[arg-type]
        inputs={},
    )
    ctx.begin("review", {"fidelity": "full"}, [], 1)
    return ctx, messages


def resolve_full(ctx: Context, own: list[dict[str, str]]) -> list[dict[str, Any]]:
    """What call_model does for a `full` step before the budget stage."""
    mode, _ = fid.resolve_mode(ctx.arrival, ctx.step, ctx.settings)
    assert mode == "full"
    thread, _ = fid.resolve_thread(ctx.step_id, ctx.step, ctx.arrival, ctx.settings, "draft")
    return ctx.thread(thread) + own


def timed(fn: Any) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def main() -> None:
    """Print medians (ms) per scenario."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    rng = random.Random(16)
    view = run_view(rng)
    base = get_counter("cl100k_base")
    encoding = base.encoding
    ctx, messages = thread_context(rng, 500)
    own = [{"role": "system", "content": "Review."}, {"role": "user", "content": "The draft."}]
    tmp = tempfile.mkdtemp()
    store = SqliteRunStore(str(Path(tmp) / "runs.db"))
    pipe = SimpleNamespace(name="bench", content_hash="x", file=None, raw={}, settings={})
    store.create_run("r1", pipe, {})
    store.checkpoint(
        "r1",
        position="review",
        variables={},
        engine={"step_count": 1, "threads": {"coding": messages}},
        events=[],
        status="running",
    )
    results: dict[str, list[float]] = {}
    sizes: dict[str, tuple[int, int, int]] = {}
    reference = " ".join(rng.choice(WORDS) for _ in range(2000))[:10_000]
    for _ in range(args.repeat):
        # The same machine's tokenizer speed, interleaved: on a loaded machine the ratios
        # to it are steadier than the absolute times.
        results.setdefault("reference: count 10,000 characters", []).append(
            timed(lambda: base.count(reference))
        )
        for mode in fid.BUDGETS:
            # A fresh counter per build: no count remembered from an earlier one.
            fresh = TokenCounter(encoding)
            out: list[fid.Preamble] = []
            results.setdefault(f"preamble {mode}", []).append(
                timed(lambda m=mode, o=out, c=fresh: o.append(fid.build_preamble(m, view, c)))
            )
            p = out[0]
            sizes[mode] = (p.tokens, p.steps_shown, p.variables_shown)
            assert p.tokens <= fid.BUDGETS[mode]
        got: list[Any] = []
        results.setdefault("full: resolve 500-message thread", []).append(
            timed(lambda g=got: g.append(resolve_full(ctx, own)))
        )
        assert len(got[0]) == 502
        results.setdefault("full: read 500 messages from the store", []).append(
            timed(lambda g=got: g.append(store.threads("r1")))
        )
    ref = statistics.median(results["reference: count 10,000 characters"])
    print(f"{'scenario':<42} {'median ms':>10} {'max ms':>8} {'x ref':>6}  tokens/steps/vars")
    for name, times in results.items():
        mode = name.removeprefix("preamble ")
        extra = "  {} / {} / {}".format(*sizes[mode]) if mode in sizes else ""
        med = statistics.median(times)
        print(f"{name:<42} {med:>10.3f} {max(times):>8.3f} {med / ref:>6.2f}{extra}")


if __name__ == "__main__":
    main()
