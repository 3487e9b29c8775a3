"""Peak memory and bytes written for one run over a 10, 100 or 200 MB input (issue 25 item 9).

Each size runs `runtime exec` in a new process on a one-step pipeline whose `call_model`
step (the offline extractive responder, an 8k window, the context policy on) must
summarise the input behind a pointer; the input comes from an `--inputs` file, with
`--max-input-bytes` raised. Reported: the child's peak RSS (its own `VmHWM`), its bytes
written (`/proc/PID/io` write_bytes, read at exit through a wrapper), the store file's
size and what each table holds (sqlite's dbstat), in MB.

    python benchmarks/big_inputs.py 10 100 200
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MB = 1_000_000
PIPELINE = {
    "name": "big_input",
    "settings": {
        "entry_step_id": "answer",
        "models": {"small": {"provider": "extractive", "context_window": 8192}},
        "context_policy": {"enabled": True, "summary_tokens": 160},
    },
    "inputs": {"question": {"type": "string"}, "doc": {"type": "string"}},
    "steps": [
        {
            "id": "answer",
            "action": "call_model",
            "model": "small",
            "prompt_key": "answer",
            "max_output_tokens": 200,
            "user_parts": {
                "question": {"source": "question", "summarizable": False},
                "doc": {"source": "doc", "summary_kind": "text"},
            },
            "end": True,
        }
    ],
}
# Run the CLI, then report this process's write_bytes (the store and nothing else is written)
# and its peak RSS (VmHWM, in KiB). Not the parent's ru_maxrss of its children: a forked
# child inherits the parent's high-water mark, and this process built a text of 3x the input.
WRAPPER = """
import sys
from runtime.cli import cli
try:
    cli.main(sys.argv[1:], standalone_mode=False)
finally:
    for line in open("/proc/self/io"):
        if line.startswith("write_bytes"):
            sys.stderr.write("WRITE_BYTES " + line.split()[1] + "\\n")
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            sys.stderr.write("PEAK_KIB " + line.split()[1] + "\\n")
"""


def document(size: int) -> str:
    line = "It is a truth universally acknowledged, that a single man in possession of a fortune.\n"
    return (line * (size // len(line) + 1))[:size]


def run(size_mb: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "prompts").mkdir()
        (folder / "prompts" / "answer.md").write_text("Answer from the document.\n")
        (folder / "p.yaml").write_text(json.dumps(PIPELINE))
        inputs = folder / "inputs.json"
        inputs.write_text(
            json.dumps({"question": "What is acknowledged?", "doc": document(size_mb * MB)})
        )
        store = folder / "runs.db"
        started = time.perf_counter()
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                WRAPPER,
                "exec",
                str(folder / "p.yaml"),
                "--inputs",
                str(inputs),
                "--max-input-bytes",
                str(2 * size_mb * MB + MB),
                "--store",
                str(store),
            ],
            capture_output=True,
            text=True,
            cwd=folder,
        )
        seconds = time.perf_counter() - started
        if child.returncode != 0:
            raise SystemExit(f"{size_mb} MB: exit {child.returncode}: {child.stderr[-2000:]}")
        written = int(child.stderr.rsplit("WRITE_BYTES ", 1)[1].split()[0])
        peak = int(child.stderr.rsplit("PEAK_KIB ", 1)[1].split()[0]) * 1024
        conn = sqlite3.connect(store)
        tables = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
        conn.close()
        files = sum(p.stat().st_size for p in folder.glob("runs.db*"))
    return {
        "input": size_mb * MB,
        "peak": peak,
        "written": written,
        "store": files,
        "seconds": seconds,
        **{f"table {k}": v for k, v in sorted(tables.items()) if v > MB / 10},
    }


def main() -> None:
    for arg in sys.argv[1:] or ["10"]:
        # One process per size.
        out = subprocess.run(
            [sys.executable, __file__, "--one", arg], capture_output=True, text=True, check=False
        )
        print(out.stdout.strip() or out.stderr[-2000:])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        result = run(int(sys.argv[2]))
        size = result["input"]
        print(
            f"{size / MB:.0f} MB input: peak RSS {result['peak'] / MB:,.0f} MB "
            f"({result['peak'] / size:.2f}x), written {result['written'] / MB:,.0f} MB "
            f"({result['written'] / size:.2f}x), store {result['store'] / MB:,.0f} MB, "
            f"{result['seconds']:.1f} s"
        )
        for key, value in result.items():
            if key.startswith("table "):
                print(f"  {key[6:]}: {value / MB:,.1f} MB")
    else:
        os.chdir(ROOT)
        main()
