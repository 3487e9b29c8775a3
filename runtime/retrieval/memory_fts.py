"""FTS5's full text, outside SQLite: its terms, its match rules and its BM25 (memories on Postgres).

The SQLite memory store ranks with FTS5 (porter unicode61 remove_diacritics 2, `bm25()`
with every column weighted 1). A store without FTS5 reproduces it here so both rank alike:

- `Tokenizer` splits and stems text with SQLite's own FTS5 tokenizer in an in-memory
  table, so a word is the same term on both backends.
- `parse` reads the match expressions `fts_query` writes (phrases, AND, OR, NOT,
  parentheses, `{column} : (...)`); `evaluate` applies FTS5's rules to one item's term
  counts: a phrase's hits count towards the score only when every group
  around it matched (`"x" OR ("a" AND "b")` counts no `a` in an item without `b`).
- `score` is FTS5's BM25 (k1 1.2, b 0.75; an item's length is all its tokens; a phrase's
  IDF floored at 1e-6) over the statistics the caller passes: the items it may see.

A phrase of several terms is matched as all of its terms in the column (FTS5 also wants
them adjacent); the expressions `fts_query` writes quote one term per phrase.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.retrieval import fts_expr

K1 = 1.2
B = 0.75
TOKENIZER = "porter unicode61 remove_diacritics 2"
# Columns of the in-memory table: a memory or value uses the first, an experience all four.
WIDTH = 4
# A term longer than this (a base64 blob) is kept as a digest of itself: a B-tree key
# holds at most about 2,700 bytes; queries map their terms the same way.
LONG_TERM = 256

# An item's full text: (term, column) -> hits; and its length in tokens (all columns).
Counts = Mapping[tuple[str, int], int]


def stored_term(term: str) -> str:
    """The term as a terms table holds it."""
    if len(term.encode()) <= LONG_TERM:
        return term
    return "zzh" + hashlib.sha256(term.encode()).hexdigest()


class Tokenizer:
    """FTS5's tokenizer in memory: the terms SQLite stores for the same text."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.lock = threading.Lock()
        self._queries: dict[str, list[str]] = {}
        self._fresh()

    def _fresh(self) -> None:
        # Deleted FTS5 rows stay in its segments until merged: new tables each time.
        self.db.execute("DROP TABLE IF EXISTS v")
        self.db.execute("DROP TABLE IF EXISTS t")
        cols = ", ".join(f"c{i}" for i in range(WIDTH))
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5({cols}, tokenize = '{TOKENIZER}')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")

    def counts(self, docs: Sequence[Sequence[str]]) -> list[tuple[dict[tuple[str, int], int], int]]:
        """Per document (its columns' texts): (term, column) -> hits, and its length."""
        out: list[tuple[dict[tuple[str, int], int], int]] = [({}, 0) for _ in docs]
        if not docs:
            return out
        with self.lock:
            try:
                rows = []
                for i, cols in enumerate(docs):
                    padded = [*cols, *([""] * (WIDTH - len(cols)))]
                    rows.append((i + 1, *padded))
                names = ", ".join(f"c{i}" for i in range(WIDTH))
                marks = ", ".join("?" * (WIDTH + 1))
                self.db.executemany(f"INSERT INTO t (rowid, {names}) VALUES ({marks})", rows)
                found = self.db.execute(
                    "SELECT term, doc, col, count(*) FROM v GROUP BY term, doc, col"
                ).fetchall()
            finally:
                self._fresh()
        for raw, doc, col, n in found:
            terms, length = out[doc - 1]
            key = (stored_term(raw), int(col[1:]))
            terms[key] = terms.get(key, 0) + n
            out[doc - 1] = (terms, length + n)
        return out

    def query(self, text: str, *, raw: bool = False) -> list[str]:
        """A phrase's terms in order (as FTS5 splits and stems it; raw: long terms not
        digested)."""
        with self.lock:
            found = self._queries.get(text)
            if found is None:
                try:
                    self.db.execute("INSERT INTO t (c0) VALUES (?)", (text,))
                    found = [r[0] for r in self.db.execute("SELECT term FROM v ORDER BY offset")]
                finally:
                    self._fresh()
                if len(self._queries) > 4096:  # bounded: searches repeat the same words
                    self._queries.clear()
                self._queries[text] = found
        return list(found) if raw else [stored_term(t) for t in found]


_TOKENIZER: Tokenizer | None = None
_TOKENIZER_LOCK = threading.Lock()


def tokenizer() -> Tokenizer:
    """The process's tokenizer."""
    global _TOKENIZER
    with _TOKENIZER_LOCK:
        if _TOKENIZER is None:
            _TOKENIZER = Tokenizer()
        return _TOKENIZER


@dataclass(frozen=True)
class Phrase:
    """One phrase of an expression: its terms and the column it is limited to (None: any)."""

    terms: tuple[str, ...]
    column: int | None
    raw: tuple[str, ...] = ()  # the terms as FTS5 spells them (a long one not digested)


# A parsed expression: ("or"|"and", [nodes]), ("not", a, b) or ("phrase", Phrase).
Node = tuple[Any, ...]


def parse(expr: str, columns: Sequence[str]) -> tuple[Node, list[Phrase]]:
    """The tree of an FTS5 expression (runtime/retrieval/fts_expr.py) and its phrases in
    order (one per occurrence, as BM25 sums them); `columns` names the columns a
    `{name} :` filter may name (another is -1: no column, nothing matches)."""
    phrases: list[Phrase] = []
    words = tokenizer()

    def made(tree: Node, col: int | None) -> Node:
        kind = tree[0]
        if kind == "phrase":
            found = words.query(tree[1], raw=True)
            phrase = Phrase(tuple(stored_term(t) for t in found), col, tuple(found))
            phrases.append(phrase)
            return ("phrase", phrase)
        if kind == "col":
            return made(tree[2], list(columns).index(tree[1]) if tree[1] in columns else -1)
        if kind == "not":
            return ("not", made(tree[1], col), made(tree[2], col))
        return (kind, [made(child, col) for child in tree[1]])

    return made(fts_expr.parse(expr), None), phrases


def hits(phrase: Phrase, counts: Counts) -> int:
    """How often an item holds a phrase (in its column), 0: not at all."""
    if not phrase.terms:
        return 0
    found = []
    for term in phrase.terms:
        if phrase.column is None:
            n = sum(v for (t, _), v in counts.items() if t == term)
        else:
            n = counts.get((term, phrase.column), 0)
        found.append(n)
    return min(found)


def evaluate(tree: Node, counts: Counts) -> dict[int, int] | None:
    """None when an item does not match an expression; else the hits of each phrase that
    counts towards its score (by id()): every group around it matched, as FTS5 keeps the
    positions of matched groups only. One pass, each phrase's hits computed once."""
    totals: dict[str, int] = {}
    for (term, _), n in counts.items():
        totals[term] = totals.get(term, 0) + n

    def phrase_hits(phrase: Phrase) -> int:
        if not phrase.terms:
            return 0
        if phrase.column is None:
            return min(totals.get(t, 0) for t in phrase.terms)
        return min(counts.get((t, phrase.column), 0) for t in phrase.terms)

    def walk(node: Node) -> dict[int, int] | None:
        kind = node[0]
        if kind == "phrase":
            n = phrase_hits(node[1])
            return {id(node[1]): n} if n else None
        if kind == "not":
            left = walk(node[1])
            return left if left is not None and walk(node[2]) is None else None
        found = [walk(c) for c in node[1]]
        if kind == "and" and (not found or any(f is None for f in found)):
            return None
        live = [f for f in found if f is not None]
        if not live:
            return None
        out: dict[int, int] = {}
        for f in live:
            out.update(f)
        return out

    return walk(tree)


def matches(tree: Node, counts: Counts) -> bool:
    """Whether an item matches an expression."""
    return evaluate(tree, counts) is not None


@dataclass(frozen=True)
class Stats:
    """What BM25 weighs by: items, their mean length, and each phrase's item count."""

    items: int
    mean_length: float
    item_counts: Sequence[int]  # one per phrase, in the expression's order


def score(
    tree: Node,
    phrases: Sequence[Phrase],
    counts: Counts,
    length: int,
    stats: Stats,
    live: Mapping[int, int] | None = None,
) -> float:
    """FTS5's BM25 of one item (positive: higher is better); live: evaluate()'s answer
    when the caller has it."""
    if live is None:
        live = evaluate(tree, counts) or {}
    total = max(stats.items, 1)
    norm = K1 * (1 - B + B * length / stats.mean_length) if stats.mean_length else K1
    out = 0.0
    for phrase, n in zip(phrases, stats.item_counts, strict=True):
        f = live.get(id(phrase), 0)
        if f:
            idf = math.log((total - n + 0.5) / (n + 0.5))
            out += (idf if idf > 0 else 1e-6) * f * (K1 + 1) / (f + norm)
    return out
