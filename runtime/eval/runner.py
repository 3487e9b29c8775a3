"""Running cases: one pipeline run per case, variant and repeat, measured from what it left.

Each run is an ordinary run of the pipeline, stored in the run store like any other; the
only difference is the evidence hook on its services (runtime/context/evidence_hook.py),
which adds the case's distractors and places its evidence as the variant says. What the
model saw is read from the run's context packs; the answer from its output; tools and
tokens from its trace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from runtime.context.evidence_hook import EvidencePlan
from runtime.eval import metrics
from runtime.eval.cases import Case, CaseFile, Variant
from runtime.eval.evidence import resolve_evidence, select_distractors


@dataclass(frozen=True)
class Job:
    """One run to make."""

    case: Case
    variant: Variant
    repeat: int


@dataclass
class EvalSetup:
    """What every run shares: the pipeline, the services' parts, the store."""

    pipeline: Any
    node_store: Any
    run_store: Any
    model_spec: str | None
    scope: Any  # the cases' repository/snapshot, for resolving evidence and distractors
    inputs: Mapping[str, Any]  # added to every case's inputs (repository from corpus:)


def jobs_of(cases: CaseFile, repeat: int) -> list[Job]:
    """Every (case, variant, repeat), in file order."""
    return [
        Job(case, variant, r)
        for case in cases.cases
        for variant in case.variants
        for r in range(repeat)
    ]


def answer_text(output: Mapping[str, Any]) -> str:
    """The run's answer: final_answer, else answer, else its only string output."""
    for key in ("final_answer", "answer"):
        if isinstance(output.get(key), str):
            return str(output[key])
    strings = [v for v in output.values() if isinstance(v, str)]
    return strings[0] if len(strings) == 1 else ""


class Evaluator:
    """Runs jobs (in parallel up to `jobs`) and measures each run."""

    def __init__(self, setup: EvalSetup) -> None:
        self.setup = setup
        self._resolved: dict[str, tuple[list[set[str]], list[str], list[str]]] = {}
        self._lock = threading.Lock()

    def inputs(self, case: Case) -> dict[str, Any]:
        """The run inputs of a case: the file's, the case's, its question."""
        inputs = {**self.setup.inputs, **case.inputs, "question": case.question}
        declared = self.setup.pipeline.inputs
        if declared:  # the file's repository only where the pipeline takes one
            inputs = {k: v for k, v in inputs.items() if k in declared or k in case.inputs}
        return inputs

    def prepare(self, cases: CaseFile) -> None:
        """Check every case's inputs, resolve its evidence and distractors (before any run)."""
        from runtime.engine.state import apply_inputs
        from runtime.errors import InputError, UsageError

        for case in cases.cases:
            try:
                apply_inputs(self.setup.pipeline, self.inputs(case))
            except InputError as exc:
                raise UsageError(f"case {case.id!r}: {exc.message}", code=exc.code) from exc
            evidence = resolve_evidence(self.setup.node_store, self.setup.scope, case)
            pad = max((v.k or 0) for v in case.variants)
            distractors, extra = select_distractors(
                self.setup.node_store, self.setup.scope, case, evidence, pad=pad
            )
            self._resolved[case.id] = (evidence, distractors, extra)

    def run_all(
        self, jobs: list[Job], workers: int, progress: Callable[[Job, dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        """Every job's run record, in job order."""
        if workers <= 1:
            out = []
            for job in jobs:
                rec = self.run_one(job)
                progress(job, rec)
                out.append(rec)
            return out
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self.run_one, job) for job in jobs]
            out = []
            for job, fut in zip(jobs, futures, strict=True):
                rec = fut.result()
                progress(job, rec)
                out.append(rec)
            return out

    def run_one(self, job: Job) -> dict[str, Any]:
        """Run the pipeline once for a job and measure it."""
        from runtime.engine import Engine
        from runtime.engine.services import Services

        s = self.setup
        evidence, distractors, extra = self._resolved[job.case.id]
        every = frozenset().union(*evidence) if evidence else frozenset()
        v = job.variant
        plan = EvidencePlan(
            evidence=every,
            distractors=tuple(distractors),
            extra=tuple(extra),
            position=v.position,
            seed=v.seed,
            k=v.k,
            tokens=v.tokens,
        )
        services = Services(
            settings=s.pipeline.settings,
            node_store=s.node_store,
            model_spec=s.model_spec,
            base_dir=str(s.pipeline.base_dir),
            evidence_hook=plan,
        )
        engine = Engine(s.pipeline, services=services, store=s.run_store)
        inputs = {**s.inputs, **job.case.inputs, "question": job.case.question}
        declared = s.pipeline.inputs
        if declared:
            inputs = {k: val for k, val in inputs.items() if k in declared or k in job.case.inputs}
        events: list[dict[str, Any]] = []  # the stored run drains its events to the store
        t0 = time.perf_counter()
        result = engine.run(inputs, on_event=events.append)
        latency = time.perf_counter() - t0
        return measure(job, result, evidence, distractors, latency, events)


def measure(
    job: Job,
    result: Any,
    evidence: list[set[str]],
    distractors: list[str],
    latency: float,
    events: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The run record: what the model saw, the measures, the cost."""
    case, v = job.case, job.variant
    packs = list(result.packs)
    seen = metrics.seen_ids(packs)
    # The position of the evidence in the last call that was shown any (the answer's).
    shown = [metrics.knowledge_ids(p) for p in packs]
    last = next((ids for ids in reversed(shown) if ids), [])
    every = set().union(*evidence) if evidence else set()
    answer = answer_text(result.output) if result.error is None else ""
    tools = [
        str(e.get("tool"))
        for e in (events if events is not None else result.events)
        if e.get("type") == "MODEL_TOOL_CALL" and e.get("error") is None
    ]
    calls = [
        e
        for e in (events if events is not None else result.events)
        if e.get("type") == "MODEL_CALL"
    ]
    tokens_in = sum(int(e.get("tokens_in") or 0) for e in calls)
    tokens_out = sum(int(e.get("tokens_out") or 0) for e in calls)
    within = None
    if case.max_tokens is not None:
        within = 1.0 if tokens_in + tokens_out <= case.max_tokens else 0.0
    return {
        "case": case.id,
        "variant": v.id,
        "size": v.size,
        "size_unit": "k" if v.k is not None else ("tokens" if v.tokens is not None else None),
        "position": v.position,
        "seed": v.seed,
        "repeat": job.repeat,
        "run_id": result.run_id,
        "status": result.status,
        "error": result.error.code if result.error is not None else None,
        "evidence_recall": metrics.evidence_recall(evidence, seen),
        "fact_coverage": metrics.fact_coverage(case.facts, answer),
        "answer_contains": metrics.contains_all(case.answer_contains, answer),
        "tools_used": metrics.tools_used(case.tools, tools),
        "within_max_tokens": within,
        "evidence_positions": metrics.positions(last, every),
        "evidence_shown": sorted(every & seen),
        "distractors_seen": sum(1 for d in distractors if d in seen),
        "blocks": len(last),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "model_calls": len(calls),
        "latency_s": round(latency, 4),
        "steps": len(result.steps),
        "answer": answer,
        "context": [
            {"call": i + 1, "step": p.get("step_id"), "evidence": ids, "pack_id": p.get("pack_id")}
            for i, (p, ids) in enumerate(zip(packs, shown, strict=True))
        ],
    }
