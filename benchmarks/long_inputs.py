"""The long inputs of the budget benchmark and the long_inputs pipeline.

- `novel()`: *Pride and Prejudice*, public domain, decompressed from
  tests/data/long_inputs/pride_and_prejudice.txt.xz (provenance in the README beside it);
  165,677 tokens in cl100k_base.
- `json_document(size)`: a tool output of at least `size` bytes, generated
  deterministically: a paged search API reply whose records nest an author, tags,
  metrics and a body of sentences drawn from the novel.

Run `python benchmarks/long_inputs.py DIR` to write novel.txt, tool_output_1mb.json,
tool_output_5mb.json and inputs.json (question, novel, the 5 MB tool output) into DIR, for
`runtime exec pipelines/long_inputs.yaml --inputs DIR/inputs.json --max-input-bytes 8000000`.
"""

from __future__ import annotations

import functools
import json
import lzma
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOVEL_XZ = ROOT / "tests" / "data" / "long_inputs" / "pride_and_prejudice.txt.xz"
MB = 1_000_000
QUESTION = "What truth is universally acknowledged about a single man in possession of a fortune?"
TAGS = ("estate", "ball", "letter", "visit", "marriage", "regiment", "parsonage", "journey")


@functools.cache
def novel() -> str:
    """The novel's text exactly as checked in (BOM and CRLF line ends kept)."""
    return lzma.decompress(NOVEL_XZ.read_bytes()).decode("utf-8")


@functools.cache
def _sentences() -> tuple[str, ...]:
    text = " ".join(novel().split())
    return tuple(s for s in re.split(r"(?<=[.!?])\s+", text) if 20 <= len(s) <= 400)


def json_document(size: int, seed: int = 17) -> str:
    """A JSON tool output of at least `size` bytes (UTF-8), the same for the same arguments."""
    rng = random.Random(seed)
    sentences = _sentences()
    records: list[dict[str, object]] = []
    out = ""
    used = 200  # the envelope around the records
    n = 0
    while used < size:
        n += 1
        record = {
            "id": f"doc-{n:06d}",
            "title": rng.choice(sentences)[:80],
            "url": f"https://archive.example.org/letters/{n:06d}",
            "score": round(rng.random(), 4),
            "published": f"18{rng.randint(10, 20)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "author": {"name": rng.choice(("Bennet", "Darcy", "Bingley", "Collins", "Lucas"))},
            "tags": rng.sample(TAGS, rng.randint(1, 4)),
            "metrics": {"views": rng.randint(0, 50_000), "replies": rng.randint(0, 300)},
            "body": " ".join(rng.choice(sentences) for _ in range(rng.randint(2, 6))),
        }
        records.append(record)
        used += len(json.dumps(record, ensure_ascii=False).encode("utf-8")) + 2
    out = json.dumps(
        {
            "query": "letters mentioning Pemberley",
            "page": 1,
            "total": len(records),
            "next_cursor": None,
            "results": records,
        },
        ensure_ascii=False,
        indent=1,
    )
    return out


def thread(turns: int = 500, seed: int = 5) -> list[dict[str, str]]:
    """A conversation of `turns` messages: a system message, then user questions and long
    assistant answers quoting the novel, alternating."""
    rng = random.Random(seed)
    sentences = _sentences()
    out = [{"role": "system", "content": "You discuss Pride and Prejudice, quoting the text."}]
    for n in range(1, turns):
        if n % 2:
            who = rng.choice(("Elizabeth", "Darcy", "Jane", "Mr. Collins", "Lydia"))
            out.append({"role": "user", "content": f"Turn {n}: what does {who} say next?"})
        else:
            quote = " ".join(rng.choice(sentences) for _ in range(rng.randint(4, 14)))
            out.append({"role": "assistant", "content": f"Turn {n}: the text reads: {quote}"})
    return out


def main(argv: list[str]) -> int:
    """Write the inputs into a folder."""
    if len(argv) != 1:
        print("usage: python benchmarks/long_inputs.py DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "novel.txt").write_text(novel(), encoding="utf-8", newline="")
    for mb in (1, 5):
        path = folder / f"tool_output_{mb}mb.json"
        path.write_text(json_document(mb * MB), encoding="utf-8")
    inputs = {"question": QUESTION, "novel": novel(), "tool_output": json_document(5 * MB)}
    (folder / "inputs.json").write_text(json.dumps(inputs, ensure_ascii=False), encoding="utf-8")
    for path in sorted(folder.iterdir()):
        print(f"{path}: {path.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
