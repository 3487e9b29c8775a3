"""How long the inspector takes to build its pages (issue 33).

    python benchmarks/inspector_pages.py

Times `GET /inspect/runs/ID` and `GET /` over HTTP from a uvicorn server on 127.0.0.1 (the
reader is the server's RunsService over a SQLite run store), for a real code_qa run of the
sample (12 steps, 3 model calls, 3 context packs) and for the page builder alone on a
synthetic run of 2,000 steps and 500 model calls of 8 kB prompts. Medians of 20.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from inspector_support import StoreRuns, make_runs, serve  # noqa: E402


def median_ms(fn, n: int = 20) -> float:
    """Median wall time of fn() in milliseconds."""
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def big_run() -> tuple[dict, list[dict]]:
    """A run of 2,000 steps, every fourth a model call with an 8 kB prompt."""
    events: list[dict] = []
    ts = 1000.0
    for i in range(2000):
        ts += 0.01
        if i % 4 == 0:
            msgs = [
                {"role": "system", "content": "s" * 2000},
                {"role": "user", "content": "u" * 6000},
            ]
            events.append({"type": "MODEL_CALL", "step_id": f"s{i}", "seq": len(events) + 1,
                           "model": "m", "messages": msgs, "reply": "r" * 500, "ts": ts})  # fmt: skip
        events.append({"type": "STEP", "step_id": f"s{i}", "action": "call_model", "attempt": 1,
                       "seq": len(events) + 1, "duration_ms": 5.0, "ts": ts, "outcome": "next",
                       "next": f"s{i + 1}"})  # fmt: skip
    run = {"run_id": "big", "pipeline": "p", "status": "completed", "created_at": 1000.0}
    return run, events


def main() -> None:
    """Print the medians."""
    import httpx

    from runtime.serve import _pages

    with tempfile.TemporaryDirectory() as tmp:
        runs = StoreRuns(make_runs(Path(tmp)))
        with serve(runs) as url, httpx.Client() as client:
            client.get(url + "/")
            page = median_ms(lambda: client.get(url + "/inspect/runs/good").raise_for_status())
            listing = median_ms(lambda: client.get(url + "/").raise_for_status())
            size = len(client.get(url + "/inspect/runs/good").content)
        parts = (runs.get_run("good"), runs.trace("good"), runs.packs("good"), runs.graph("good"))
        built = median_ms(lambda: _pages.run_page(*parts, []))
        graph = median_ms(lambda: runs.graph("good"))
    run, events = big_run()
    big = median_ms(lambda: _pages.run_page(run, events, [], None, []), n=5)
    big_size = len(_pages.run_page(run, events, [], None, []))
    print(f"code_qa run page over HTTP: {page:.1f} ms median ({size / 1024:.0f} kB)")
    print(
        f"  of which the page built from read data: {built:.1f} ms, the graph read: {graph:.1f} ms"
    )
    print(f"runs list over HTTP (3 runs): {listing:.1f} ms median")
    print(f"2,000-step run page built: {big:.0f} ms median ({big_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
