"""OpenTelemetry's cost (the `otel` extra): engine steps/s with spans off and on, and a code_qa
run's wall time off and on.

"On" is the SDK provider as the environment builds it (a BatchSpanProcessor) with an
exporter that drops what it is given, so what is measured is the listener turning events
into spans and the SDK recording them, not a network. Off is no provider at all (the
engine adds no listener).

Run: python benchmarks/otel.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import REG, pipeline  # the same trivial tick/stop pipeline as the engine benchmark

import runtime
from runtime.engine import Engine
from runtime.engine.services import Services

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Which stored procedure writes the OrderLines table and who calls it?"


class Drop(SpanExporter):
    """Counts the spans it is given, sends nothing."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def provider() -> tuple[TracerProvider, Drop]:
    exporter = Drop()
    p = TracerProvider(shutdown_on_exit=False)
    p.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
    return p, exporter


def steps_per_second(steps: int, tracer_provider: Any, repeat: int = 5) -> float:
    engine = Engine(pipeline(steps), registry=REG, tracer_provider=tracer_provider)
    rates = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = engine.run({"n": 0})
        rates.append((steps + 1) / (time.perf_counter() - t0))
        assert result.status == "completed", result.error
    return statistics.median(rates)


def code_qa_ms(index: str, tracer_provider: Any, repeat: int = 21) -> tuple[float, float]:
    """Median ms of a code_qa run without and with spans, the two runs taken in turn."""
    code_qa = runtime.load(str(ROOT / "pipelines" / "code_qa.yaml"))
    runners = [
        runtime.Runner(
            code_qa,
            services=Services(settings=code_qa.settings, index_path=index, base_dir=str(ROOT)),
            tracer_provider=given,
        )
        for given in (None, tracer_provider)
    ]
    times: list[list[float]] = [[], []]
    for n in range(repeat + 1):
        for i, runner in enumerate(runners):
            t0 = time.perf_counter()
            assert runner.run({"question": QUESTION}).status == "completed"
            if n:  # the first round warms up: index opened, tokenizer loaded
                times[i].append((time.perf_counter() - t0) * 1000)
    off, on = (statistics.median(t) for t in times)
    return off, on


def main() -> None:
    """Print the table recorded in docs/performance.md."""
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    on, exporter = provider()
    off_rate = steps_per_second(5000, None)
    on_rate = steps_per_second(5000, on)
    print(f"{'engine, trivial steps':<28} {'off':>12} {'on':>12}")
    print(f"{'steps/s':<28} {off_rate:>12,.0f} {on_rate:>12,.0f}")
    print(f"{'per step':<28} {1e6 / off_rate:>10.1f}µs {1e6 / on_rate:>10.1f}µs")
    with tempfile.TemporaryDirectory() as tmp:
        index = f"{tmp}/index.db"
        store = open_store(index, create=True)
        index_paths(store, [str(ROOT / "pipelines" / "sample" / "eshop")], repository="eshop")
        off_ms, on_ms = code_qa_ms(index, on)
    print(f"{'code_qa run (median)':<28} {off_ms:>10.1f}ms {on_ms:>10.1f}ms")
    on.force_flush()
    print(f"spans exported: {exporter.spans:,}")
    on.shutdown()


if __name__ == "__main__":
    main()
