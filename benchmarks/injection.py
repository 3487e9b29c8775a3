"""The retrieval-injection detector on real files with planted injections (issue 29).

    python benchmarks/injection.py [--json]

Real text: every C#, T-SQL, Markdown and log file of tests/data/realworld (the real
public corpora), pipelines/sample, docs/ and tests/data/summaries. False positives are
lines of that text the detector flags, per 10,000 lines. Recall: each planted injection
of tests/data/injection/planted.json (labels written before the first run) is inserted
into a real file chosen by a fixed seed (in that file's comment syntax when the plant
says so) and must be flagged with its kind on its line.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runtime.context.injection import scan  # noqa: E402

SUFFIXES = {".cs": "// ", ".sql": "-- ", ".md": "", ".log": ""}
FOLDERS = ("tests/data/realworld", "pipelines/sample", "docs", "tests/data/summaries")


def corpus() -> list[tuple[Path, str]]:
    """The real files measured, in a stable order."""
    files = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES:
                files.append((path, path.read_text(encoding="utf-8", errors="replace")))
    return files


def main() -> dict[str, object]:
    """Measure and print."""
    files = corpus()
    plants = json.loads((ROOT / "tests/data/injection/planted.json").read_text())["plants"]
    lines = sum(len(t.splitlines()) for _, t in files)
    started = time.perf_counter()
    flagged = [(p, f) for p, t in files for f in scan(t)]
    seconds = time.perf_counter() - started
    by_kind: dict[str, int] = {}
    for _, f in flagged:
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    rng = random.Random(29)
    caught, missed = 0, []
    for plant in plants:
        path, text = rng.choice(files)
        rows = text.splitlines()
        at = rng.randrange(len(rows) + 1)
        prefix = SUFFIXES[path.suffix] if plant["comment"] else ""
        rows.insert(at, prefix + plant["text"])
        hits = [f for f in scan("\n".join(rows)) if f.line == at + 1 and f.kind == plant["kind"]]
        if hits:
            caught += 1
        else:
            missed.append(plant["text"])
    result = {
        "files": len(files),
        "lines": lines,
        "false_positive_lines": len({(str(p), f.line) for p, f in flagged}),
        "false_positives_per_10k_lines": round(
            len({(str(p), f.line) for p, f in flagged}) * 10_000 / max(lines, 1), 2
        ),
        "false_positives_by_kind": by_kind,
        "false_positive_examples": [
            f"{p.relative_to(ROOT)}:{f.line} {f.kind}" for p, f in flagged[:20]
        ],
        "planted": len(plants),
        "caught": caught,
        "recall": round(caught / len(plants), 4),
        "missed": missed,
        "scan_seconds": round(seconds, 3),
    }
    print(json.dumps(result, indent=1, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
