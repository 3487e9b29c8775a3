"""`runtime eval`'s harness overhead per run against running the same pipeline as `runtime exec` does.

Both sides run pipelines/code_qa.yaml over the indexed sample with the offline extractive
model, on a SQLite run store, the same questions (pipelines/sample/eval.yaml's), in one
process, one run at a time:

- exec: what `runtime exec` does per run after start-up: Services and Engine built, the
  run (cli/run.py's exec_ body without the click layer and the printing);
- eval: Evaluator.run_one per run: the same, plus the evidence hook (an EvidencePlan
  that shapes nothing: the default variant), the event collector and the measuring
  (packs read, facts, tokens, the run record).

Also exec with the node store opened once and shared, as eval shares it: the difference
to eval is then the hook and the measuring alone.

Overhead = median eval time per run / median exec time per run - 1 (target < 10%),
over `--rounds` rounds of every question, interleaved so load drifts hit both alike.
Also printed: the resolve step per cases file (evidence and distractors, once per file).

Run: python benchmarks/eval_overhead.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    """Print the per-run medians and the overhead."""
    from runtime.engine import Engine
    from runtime.engine.services import Services
    from runtime.engine.store import SqliteRunStore
    from runtime.eval.cases import Variant, load_cases
    from runtime.eval.runner import EvalSetup, Evaluator, Job
    from runtime.format.validation import load_pipeline
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.node import Scope
    from runtime.retrieval.nodestore import open_store

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    index = tmp / "index.db"
    index_paths(open_store(str(index), create=True), [str(ROOT / "pipelines/sample/eshop")],
                repository="eshop")  # fmt: skip
    pipeline = load_pipeline(str(ROOT / "pipelines" / "code_qa.yaml"))
    cases = load_cases(str(ROOT / "pipelines" / "sample" / "eval.yaml"))
    for c in cases.cases:
        c.variants = [Variant()]
        c.distractors = []
    store = SqliteRunStore(str(tmp / "runs.db"))
    node_store = open_store(str(index))
    t0 = time.perf_counter()
    evaluator = Evaluator(
        EvalSetup(pipeline, node_store, store, None, Scope("eshop"), {"repository": "eshop"})
    )
    evaluator.prepare(cases)
    prepare = time.perf_counter() - t0

    def exec_once(question: str, shared: bool = False) -> float:
        t = time.perf_counter()
        services = Services(settings=pipeline.settings, index_path=str(index),
                            node_store=node_store if shared else None,
                            base_dir=str(pipeline.base_dir))  # fmt: skip
        engine = Engine(pipeline, services=services, store=store)
        result = engine.run({"question": question, "repository": "eshop"})
        assert result.status == "completed", result.error
        return time.perf_counter() - t

    def eval_once(case: Any) -> float:
        t = time.perf_counter()
        rec = evaluator.run_one(Job(case, Variant(), 0))
        assert rec["status"] == "completed", rec["error"]
        return time.perf_counter() - t

    for c in cases.cases[:2]:  # warm: tokenizer, prompts, the index's pages
        exec_once(c.question), eval_once(c)
    ex: list[float] = []
    sh: list[float] = []
    ev: list[float] = []
    for _ in range(args.rounds):
        for c in cases.cases:
            ex.append(exec_once(c.question))
            sh.append(exec_once(c.question, shared=True))
            ev.append(eval_once(c))
    m_ex, m_sh, m_ev = statistics.median(ex), statistics.median(sh), statistics.median(ev)
    print(f"{len(ex)} runs each ({len(cases.cases)} questions x {args.rounds} rounds)")
    print(f"exec per run (the index opened per run, as runtime exec): median {m_ex * 1000:.1f} ms")
    print(f"exec per run, one open node store (as eval shares it): median {m_sh * 1000:.1f} ms")
    print(f"eval per run: median {m_ev * 1000:.1f} ms")
    print(f"overhead against runtime exec: {m_ev / m_ex - 1:+.1%} (target < 10%)")
    print(f"overhead of the hook and the measuring alone: {m_ev / m_sh - 1:+.1%}")
    print(
        f"resolving {len(cases.cases)} cases' evidence and distractors once: {prepare * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
