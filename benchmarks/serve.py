"""`runtime serve`: added latency per request over the same pipeline run in process, and
requests per second at 1, 8 and 32 concurrent clients (issue 33; docs/performance.md).

The pipeline is trivial (one finalize step: the question is the answer), so what is
measured is the server: HTTP, JSON, the pool, the run's store writes are in both sides.
Both sides write to a SQLite run store in a temporary directory (normal durability).

    python benchmarks/serve.py [--requests 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the runtime package, before tests/runtime
sys.path.append(str(ROOT / "tests"))  # serve_support

PIPELINE = """name: trivial
inputs:
  question: {type: string}
  history: {type: array, default: []}
outputs: [final_answer]
settings: {entry_step_id: done}
steps:
  - {id: done, action: finalize, source: question}
"""


def main() -> None:
    """Measure and print the medians and rates."""
    import httpx
    from serve_support import serving

    import runtime
    from runtime.engine.store import SqliteRunStore
    from runtime.serve.app import build_server, create_app
    from runtime.serve.limits import Limits
    from runtime.serve.served import load_served

    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    n = parser.parse_args().requests
    tmp = Path(tempfile.mkdtemp())
    path = tmp / "trivial.yaml"
    path.write_text(PIPELINE)

    # in process: the embedding API, the same pipeline, its own store
    runner = runtime.Runner(runtime.load(str(path)), store=SqliteRunStore(str(tmp / "a.db")))
    for _ in range(20):
        runner.run({"question": "warm"})
    inproc = []
    for i in range(n):
        t0 = time.perf_counter()
        result = runner.run({"question": f"q{i}"})
        inproc.append(time.perf_counter() - t0)
        assert result.status == "completed"

    store = SqliteRunStore(str(tmp / "b.db"))
    served = load_served([str(path)], store=store, index=None, model=None)
    app = create_app(build_server(served, store, limits=Limits(max_runs=64)))
    body = {"model": "trivial", "messages": [{"role": "user", "content": "q"}]}
    with serving(app) as url:
        with httpx.Client(timeout=60) as client:
            for _ in range(20):
                client.post(f"{url}/v1/chat/completions", json=body)
            http = []
            for _ in range(n):
                t0 = time.perf_counter()
                got = client.post(f"{url}/v1/chat/completions", json=body)
                http.append(time.perf_counter() - t0)
                assert got.status_code == 200, got.text
        p50_in, p50_http = statistics.median(inproc), statistics.median(http)
        print(f"in process p50 {p50_in * 1000:.2f} ms, over HTTP p50 {p50_http * 1000:.2f} ms")
        print(f"added per request p50 {(p50_http - p50_in) * 1000:.2f} ms (n={n})")

        for clients in (1, 8, 32):
            per = max(n // clients, 10)
            errors: list[str] = []

            def work(per: int = per, errors: list[str] = errors) -> None:
                with httpx.Client(timeout=60) as c:
                    for _ in range(per):
                        got = c.post(f"{url}/v1/chat/completions", json=body)
                        if got.status_code != 200:
                            errors.append(got.text)

            threads = [threading.Thread(target=work) for _ in range(clients)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - t0
            total = per * clients
            print(
                f"{clients:>2} clients: {total / seconds:.0f} requests/s "
                f"({total} requests, {len(errors)} refused)"
            )


if __name__ == "__main__":
    main()
