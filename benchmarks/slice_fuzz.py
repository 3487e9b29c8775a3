"""Time every call of the slice and tool-argument fuzzer (issue 25: each under 100 ms).

The 10,000 slice expressions and 1,000 tool-argument payloads of
tests/adversarial/test_slice_fuzz.py, against a SQLite run store holding the fuzzer's
originals; each call timed alone (CPU, `time.process_time`, and wall). Prints the
median, p99 and maximum per kind and the slowest inputs.

    python benchmarks/slice_fuzz.py
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "adversarial"))

import slice_fuzz as fz  # noqa: E402

from actions import _tools  # noqa: E402
from runtime.context import pointers as ptr  # noqa: E402
from runtime.context.tokens import get_counter  # noqa: E402
from runtime.engine.store import SqliteRunStore  # noqa: E402
from runtime.errors import RunError  # noqa: E402
from runtime.models.base import ToolCall  # noqa: E402


class _Ctx(SimpleNamespace):
    def trace(self, kind: str, **data: Any) -> None:
        pass


def _report(name: str, timings: list[tuple[float, float, str]]) -> None:
    cpu = sorted(t[0] for t in timings)
    wall = sorted(t[1] for t in timings)
    p99 = int(len(cpu) * 0.99)
    print(
        f"{name}: {len(cpu):,} calls; CPU median {statistics.median(cpu) * 1000:.3f} ms, "
        f"p99 {cpu[p99] * 1000:.2f} ms, max {cpu[-1] * 1000:.2f} ms; wall max "
        f"{wall[-1] * 1000:.2f} ms"
    )
    for c, w, what in sorted(timings, reverse=True)[:3]:
        print(f"  slowest: {c * 1000:.2f} ms CPU ({w * 1000:.2f} wall) {what}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteRunStore(str(Path(tmp) / "runs.db"))
        pids = {}
        for name, text in fz.ORIGINALS.items():
            pid, sha = ptr.pointer_id_of(text)
            store.put_original("r", pid, sha, fz.KINDS[name], text)
            pids[name] = pid
        ctx = _Ctx(services=SimpleNamespace(pointers=store), run_id="r", step_id="s")
        timings = []
        parts = [p for seed in range(6) for p in fz.expressions(seed, 300 if seed == 0 else 1940)]
        for i, part in enumerate(parts):
            name = list(pids)[i % len(pids)]
            c0, w0 = time.process_time(), time.perf_counter()
            with contextlib.suppress(RunError):
                ptr.rehydrate(ctx, pids[name], part)
            what = repr(part)[:60] + (
                f"... ({len(part):,} chars)" if part and len(part) > 60 else ""
            )
            timings.append((time.process_time() - c0, time.perf_counter() - w0, f"{name} {what}"))
        _report("slice expressions", timings)
        count = get_counter("cl100k_base").count
        calls = [
            p for seed, n in ((100, 50), (101, 475), (102, 475)) for p in fz.payloads(seed, n, pids)
        ]
        timings = []
        for i, (arguments, _name) in enumerate(calls):
            call = ToolCall(f"c{i}", "rehydrate", arguments)
            c0, w0 = time.process_time(), time.perf_counter()
            _tools._run(ctx, call, 1, 1_000_000, count)
            what = f"{arguments[:50]!r} ({len(arguments):,} chars)"
            timings.append((time.process_time() - c0, time.perf_counter() - w0, what))
        _report("tool argument payloads", timings)


if __name__ == "__main__":
    main()
