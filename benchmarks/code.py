"""Code understanding speed: classifier and parsers MB/s, compaction ratio and MB/s, token
counting against raw tiktoken, and repeated counting with the cache.

Run: python benchmarks/code.py
Target (issue 4): token counting >= 0.9x raw tiktoken on the same text.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus

import classifiers
from classifiers import csharp, tsql
from runtime.context.tokens import get_counter


def timed(fn, repeat: int = 5) -> float:
    """Median seconds of fn()."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    """Print the table recorded in docs/performance.md."""
    items = corpus(600, seed=5)
    cs = [t for lang, _, t in items if lang == "dotnet"]
    sql = [t for lang, _, t in items if lang == "sql"]
    mixed = [t for _, _, t in items]
    mb = lambda texts: sum(len(t.encode()) for t in texts) / 1e6  # noqa: E731

    rows = []
    rows.append(
        (
            "classify (mixed corpus)",
            mb(mixed) / timed(lambda: [classifiers.classify(t) for t in mixed], 3),
        )
    )
    rows.append(
        (
            "C# parse + extract (tree-sitter)",
            mb(cs) / timed(lambda: [csharp.extract(t) for t in cs], 3),
        )
    )
    rows.append(
        ("T-SQL scan + extract", mb(sql) / timed(lambda: [tsql.extract(t) for t in sql], 3))
    )
    for name, texts, lang in (("C#", cs, "dotnet"), ("T-SQL", sql, "sql")):
        counter = get_counter()
        secs = timed(
            lambda texts=texts, lang=lang, counter=counter: [
                classifiers.compact(t, lang, counter=counter) for t in texts
            ],
            3,
        )
        before = sum(counter.count(t) for t in texts)
        after = sum(counter.count(classifiers.compact(t, lang, counter=counter)) for t in texts)
        rows.append((f"compact {name} ({after / before:.0%} of the tokens)", mb(texts) / secs))

    text = "\n".join(mixed) * 3
    size = len(text.encode()) / 1e6
    for enc in ("cl100k_base", "o200k_base"):
        counter = get_counter(enc)
        raw = counter.encoding  # the tiktoken Encoding itself
        t_raw = timed(lambda raw=raw: len(raw.encode_ordinary(text)))
        t_ours = timed(lambda counter=counter: counter.count(text))
        rows.append((f"count {enc}: raw tiktoken", size / t_raw))
        rows.append((f"count {enc}: TokenCounter ({t_raw / t_ours:.2f}x raw)", size / t_ours))
    counter = get_counter()
    blocks = [f"--- NODE ---\nid: n{i}\ntext:\n{t}" for i, t in enumerate(mixed)]
    counter.count_joined(blocks)
    cold = timed(lambda: counter.count("\n\n".join(blocks)), 3)
    warm = timed(lambda: counter.count_joined(blocks), 3)
    rows.append(
        (
            f"count_joined {len(blocks)} cached blocks ({cold / warm:.0f}x faster than recount)",
            mb(blocks) / warm,
        )
    )
    print(f"{'measure':<60} {'MB/s':>10}")
    for name, value in rows:
        print(f"{name:<60} {value:>10.2f}")


if __name__ == "__main__":
    main()
