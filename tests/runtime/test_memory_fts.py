"""FTS5 outside SQLite (runtime/retrieval/memory_fts.py) against FTS5 itself: the same
items match, with the same BM25, for the expressions `fts_query` writes and a few by hand."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from runtime.retrieval import memory_fts
from runtime.retrieval.query import fts_query

COLUMNS = ("full", "strategy", "surprise", "root_cause")
DOCS = Path(__file__).resolve().parents[2] / "docs"


def _rows() -> list[tuple[str, str, str, str]]:
    """Real text (docs/retrieval.md), four sentences to a row, and rows written to tell
    the rules apart (a word of an AND group alone, a word in one column only)."""
    text = (DOCS / "retrieval.md").read_text()
    parts = [" ".join(p.split()) for p in re.split(r"(?<=[.!?])\s+|\n\n", text)]
    parts = [p for p in parts if 20 <= len(p) <= 300][:160]
    rows = [(parts[i], parts[i + 1], parts[i + 2], parts[i + 3]) for i in range(0, 156, 4)]
    rows += [
        ("the basket is here x", "", "", ""),
        ("basket service", "", "", ""),
        ("other x", "basket", "", ""),
        ("", "", "service", "basket service"),
    ]
    return rows


EXPRESSIONS = [
    '"x" OR ("basket" AND "service")',
    '"x" OR "basket"',
    '{strategy} : ("x" OR "basket")',
    '{root_cause} : ("basket" AND "service")',
    '"index" NOT "label"',
    '("label" OR "scope") AND "node"',
    *(
        fts_query(q)
        for q in (
            "BasketService",
            "basket service",
            "place_order",
            "label allowed scope",
            "search the index with labels",
            "token budget for the nodes",
        )
    ),
]


@pytest.mark.parametrize(
    ("expr", "column"),
    [
        (expr, column)
        for expr in EXPRESSIONS
        for column in (None, "strategy", "full")
        # one column filter at a time (what the stores write)
        if not (column and expr.startswith("{"))
    ],
)
def test_matches_and_bm25_are_fts5s(expr: str, column: str | None) -> None:
    rows = _rows()
    db = sqlite3.connect(":memory:")
    db.execute(
        f"CREATE VIRTUAL TABLE f USING fts5({', '.join(COLUMNS)}, "
        f"tokenize = '{memory_fts.TOKENIZER}')"
    )
    db.executemany("INSERT INTO f VALUES (?, ?, ?, ?)", rows)
    full = f"{{{column}}} : ({expr})" if column else expr
    want = dict(db.execute("SELECT rowid, -bm25(f) FROM f WHERE f MATCH ?", (full,)).fetchall())
    counted = memory_fts.tokenizer().counts(rows)
    tree, phrases = memory_fts.parse(full, COLUMNS)

    def holds(phrase: memory_fts.Phrase, counts: memory_fts.Counts) -> bool:
        return memory_fts.hits(phrase, counts) > 0

    stats = memory_fts.Stats(
        len(rows),
        sum(n for _, n in counted) / len(rows),
        [sum(holds(p, c) for c, _ in counted) for p in phrases],
    )
    got = {
        i + 1: memory_fts.score(tree, phrases, counts, length, stats)
        for i, (counts, length) in enumerate(counted)
        if memory_fts.matches(tree, counts)
    }
    assert sorted(got) == sorted(want)
    assert want or column, "the expression should match something"
    for rowid, score in want.items():
        assert got[rowid] == pytest.approx(score, rel=1e-9, abs=1e-12), rowid


def test_a_long_term_is_kept_as_its_digest_alike_on_write_and_query() -> None:
    word = "a" * 300
    [(counts, length)] = memory_fts.tokenizer().counts([(f"see {word}",)])
    [term] = memory_fts.tokenizer().query(word)
    assert term.startswith("zzh") and (term, 0) in counts and length == 2
