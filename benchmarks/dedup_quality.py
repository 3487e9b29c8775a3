"""Dedup quality on real code: labelled near-duplicates and look-alikes, recall and false merges.

The pairs are built from the real public code in tests/data/realworld (eShopOnWeb,
Clean Architecture, Wide World Importers, tSQLt, AdventureWorks; licences beside each)
and from this repository's own commit subjects. Each pair's label is fixed by how it is
built, before any scoring (the labels are the kinds below, not the scorer's output):

duplicates (must merge)
- comment:   a method or procedure copied with a comment added or changed;
- quoted:    a doc paragraph that quotes a method in a code block, and the method;
- commit:    two commits (different shas and files) with the same message;
- reflowed:  a README paragraph and the same paragraph re-wrapped (a memory restating it);
look-alikes (must not merge)
- sibling:   two different methods or procedures of one file;
- number:    a method and its copy with one number changed (another fact);
- subject:   two different commit subjects that share their first words;
- paragraph: two different paragraphs of one README.

    python benchmarks/dedup_quality.py      # the figures and every miss, default and 0.9
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "tests" / "data" / "realworld"
DUPLICATE = ("comment", "quoted", "commit", "reflowed")


def _nodes() -> list[Any]:
    from runtime.retrieval.indexer import index_paths
    from runtime.retrieval.nodestore import open_store

    with tempfile.TemporaryDirectory() as d:
        store = open_store(str(Path(d) / "i.db"), create=True)
        index_paths(store, [str(CORPUS)], repository="rw", snapshot="main")
        rows = store.conn().execute("SELECT id FROM nodes ORDER BY id").fetchall()
        from runtime.retrieval.node import Scope

        found = store.get_nodes([r[0] for r in rows], scope=Scope())
    return [found[k] for k in sorted(found)]


def _cand(node: Any, text: str | None = None, *, path: str | None = None, suffix: str = "") -> Any:
    from runtime.context.assembly import Candidate

    return Candidate(
        id=node.id + suffix,
        source="s",
        kind="doc" if node.kind == "doc" else "code",
        text=node.text if text is None else text,
        score=1.0,
        location=node.id,
        path=path or node.path,
        origin="rw::main",
        start_line=node.start_line,
        end_line=node.end_line,
        language=node.language,
        name=node.name,
    )


def _memory(i: str, text: str) -> Any:
    from runtime.context.assembly import Candidate

    return Candidate(f"memory:{i}", "m", "memory", text, 1.0, f"memory:{i}")


def _commit(sha: str, message: str, files: list[str]) -> Any:
    from runtime.context.assembly import Candidate

    return Candidate(
        f"rw::main::commit::{sha}",
        "c",
        "commit",
        message,
        1.0,
        f"commit {sha}",
        fields={"message": message, "files": [{"path": f} for f in files]},
        commit=sha,
    )


def _paragraphs(text: str) -> list[str]:
    return [
        p for p in re.split(r"\n\s*\n", text) if len(p) >= 160 and "```" not in p and "|" not in p
    ]


def pairs() -> list[tuple[str, Any, Any]]:
    """(kind, a, b) for every labelled pair."""
    out: list[tuple[str, Any, Any]] = []
    nodes = _nodes()
    code = [
        n
        for n in nodes
        if n.kind in ("method", "procedure", "function", "trigger")
        and n.text.count("\n") >= 4
        and len(n.text) >= 200
    ]
    for n in code:
        lines = n.text.splitlines()
        mark = "--" if n.language == "sql" else "//"
        copy = "\n".join(
            [lines[0], f"    {mark} copied here from {n.path}; keep both in step", *lines[1:]]
        )
        out.append(("comment", _cand(n), _cand(n, copy, path="copy/" + n.path, suffix="@copy")))
        numbers = re.findall(r"(?<![\w.])\d+(?![\w.])", n.text)
        if numbers:
            changed = re.sub(
                rf"(?<![\w.]){numbers[0]}(?![\w.])", str(int(numbers[0]) + 7), n.text, count=1
            )
            out.append(
                ("number", _cand(n), _cand(n, changed, path="copy/" + n.path, suffix="@num"))
            )
        if n.language == "dotnet":
            doc = (
                f"## How {n.name} works\n\nThe {n.name} member of {Path(n.path).stem} is the one "
                f"to read first:\n\n```csharp\n{n.text}\n```\n\nChange it with care: callers "
                "depend on its behaviour."
            )
            out.append(("quoted", _memory(f"doc-{n.id}", doc), _cand(n)))
    by_file: dict[str, list[Any]] = {}
    for n in code:
        by_file.setdefault(n.path, []).append(n)
    for group in by_file.values():
        for a, b in itertools.pairwise(group):
            if a.name != b.name:
                out.append(("sibling", _cand(a), _cand(b)))
    docs = [p for f in sorted(CORPUS.glob("**/README.md")) for p in _paragraphs(f.read_text())]
    for i, p in enumerate(docs):
        words = p.split()
        reflowed = "\n".join(" ".join(words[j : j + 9]) for j in range(0, len(words), 9))
        out.append(("reflowed", _memory(f"p{i}", p), _memory(f"p{i}-r", reflowed)))
        if i + 1 < len(docs):
            out.append(("paragraph", _memory(f"p{i}", p), _memory(f"p{i + 1}", docs[i + 1])))
    subjects = _subjects()
    for i, s in enumerate(subjects[:150]):
        out.append(
            ("commit", _commit(f"{i:040x}", s, ["a.cs"]), _commit(f"{i + 1:040x}f", s, ["b.sql"]))
        )
    by_prefix: dict[str, list[str]] = {}
    for s in subjects:
        by_prefix.setdefault(" ".join(s.split()[:2]), []).append(s)
    n = 0
    for group in by_prefix.values():
        for a, b in itertools.pairwise(group):
            if a != b and n < 150:
                out.append(
                    (
                        "subject",
                        _commit(f"a{n:039x}", a, ["a.cs"]),
                        _commit(f"b{n:039x}", b, ["a.cs"]),
                    )
                )
                n += 1
    return out


def _subjects() -> list[str]:
    """This repository's commit subjects (real messages), first lines, deduplicated."""
    try:
        log = subprocess.run(
            ["git", "-C", str(ROOT), "log", "--format=%s", "-n", "2000"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    seen: dict[str, None] = {}
    for line in log.splitlines():
        if len(line) >= 40:
            seen.setdefault(line[:300], None)
    return list(seen)


def score(threshold: float | None = None) -> dict[str, Any]:
    """Recall on the duplicates, false merges on the look-alikes, and every miss."""
    from runtime.context.dedup import DEFAULT_THRESHOLD, dedupe

    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    by_kind: dict[str, list[int]] = {}
    misses: list[str] = []
    for kind, a, b in pairs():
        _, dropped = dedupe([a, b], threshold)
        merged = bool(dropped)
        want = kind in DUPLICATE
        hit = by_kind.setdefault(kind, [0, 0])
        hit[0] += merged == want
        hit[1] += 1
        if merged != want:
            misses.append(f"{kind}: {a.id} / {b.id}" + (f" ({dropped[0][2]})" if dropped else ""))
    dup = [by_kind[k] for k in DUPLICATE if k in by_kind]
    alike = [v for k, v in by_kind.items() if k not in DUPLICATE]
    caught = sum(v[0] for v in dup)
    total_dup = sum(v[1] for v in dup)
    false = sum(v[1] - v[0] for v in alike)
    return {
        "threshold": threshold,
        "recall": round(caught / total_dup, 4) if total_dup else None,
        "duplicates": total_dup,
        "look_alikes": sum(v[1] for v in alike),
        "false_merges": false,
        "by_kind": {k: f"{v[0]}/{v[1]}" for k, v in sorted(by_kind.items())},
        "misses": misses,
    }


if __name__ == "__main__":
    print(json.dumps([score(), score(0.9)], indent=2))
