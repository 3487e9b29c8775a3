"""BM25 over the nodes a subject may see (issue 28): FTS5's formula, admitted statistics.

FTS5's bm25() scores with whole-table statistics: the row count, the mean row length and
each phrase's document count. On an index holding label sets a subject may not see, those
figures would carry the denied nodes into the scores and order of the visible ones. Here
the same formula (SQLite's fts5_aux.c, operation for operation, so a score is the one
FTS5 computes on an index holding the admitted nodes alone) takes the admitted figures:

    score = sum over the query's phrases of idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl))
    idf = ln((N - n + 0.5) / (n + 0.5)), clamped to 1e-6 when not positive

N and avgdl over the admitted rows, n the admitted rows holding the phrase, D a row's
tokens in every column (the meta column too), f the phrase's hits weighted 4 in the name
column and 1 in the body. A row's f is read back from FTS5 itself: a one-phrase bm25() is
f's function alone once the whole-table figures are known, and f is an integer.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from runtime.retrieval import fts_expr
from runtime.retrieval.node import label_set_token

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6  # FTS5's value for a phrase in half the rows or more

# (phrase, row) weighted counts one thread keeps per set of admitted labels before that
# cache starts over, and the sets of admitted labels it keeps figures for (the oldest
# dropped): at most about 20 MB a set, 80 MB a thread.
CACHE_ROWS = 200_000
CACHE_SUBJECTS = 4


Tree = tuple[Any, ...]  # ("phrase", index) | ("and"|"or", [children]) | ("not", left, right)


def parse(expr: str) -> tuple[Tree, list[tuple[str, str | None]]]:
    """An FTS5 expression as the search passes write it (runtime/retrieval/fts_expr.py): its
    tree with each phrase numbered, and its phrases in FTS5's order, each (text, column
    filter or None)."""
    found: list[tuple[str, str | None]] = []

    def numbered(tree: Tree, column: str | None) -> Tree:
        kind = tree[0]
        if kind == "phrase":
            found.append((tree[1], column))
            return ("phrase", len(found) - 1)
        if kind == "col":
            return numbered(tree[2], tree[1])
        if kind == "not":
            return ("not", numbered(tree[1], column), numbered(tree[2], column))
        return (kind, [numbered(child, column) for child in tree[1]])

    return numbered(fts_expr.parse(expr), None), found


def counted(tree: Tree, present: Callable[[int], bool]) -> list[int] | None:
    """The phrases whose hits FTS5's bm25() counts at a row (None: the tree does not match
    there). A phrase counts only inside subexpressions that match at the row: `(a AND d)
    OR c` on a row holding a and c counts c alone, and the right of a NOT never counts."""
    kind = tree[0]
    if kind == "phrase":
        return [tree[1]] if present(tree[1]) else None
    if kind == "not":
        left = counted(tree[1], present)
        return None if left is None or counted(tree[2], present) is not None else left
    parts = [counted(child, present) for child in tree[1]]
    if kind == "and":
        return None if any(p is None for p in parts) else [i for p in parts if p for i in p]
    hits = [i for p in parts if p is not None for i in p]
    return hits if any(p is not None for p in parts) else None


def phrase_query(text: str, column: str | None) -> str:
    """One phrase as an FTS5 expression of its own (under its column filter)."""
    quoted = '"' + text.replace('"', '""') + '"'
    return f"{column} : {quoted}" if column else quoted


def sizes(blob: bytes) -> int:
    """A row's tokens in every column: the sum of the varints of its nodes_fts_docsize row."""
    total = value = 0
    for byte in blob:
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            total += value
            value = 0
    return total


def idf(rows: int, hits: int) -> float:
    """FTS5's IDF of a phrase in `hits` of `rows` rows."""
    value = math.log((rows - hits + 0.5) / (hits + 0.5))
    return value if value > 0.0 else IDF_FLOOR


def term(weight: float, f: float, length: float, avgdl: float) -> float:
    """One phrase's part of a row's score, as fts5Bm25Function computes it."""
    return weight * ((f * (K1 + 1.0)) / (f + K1 * (1 - B + B * length / avgdl)))


def frequency(score: float, weight: float, length: float, avgdl: float) -> float:
    """f back from a one-phrase bm25() (positive) made with weight and avgdl: an integer
    (hits weighted 4 and 1), so the float error of the inversion rounds away."""
    if score <= 0.0:
        return 0.0
    share = score / weight
    return float(round(share * K1 * (1 - B + B * length / avgdl) / ((K1 + 1.0) - share)))


def ceiling(phrases: list[tuple[float, float]], rho: float, score: float) -> float:
    """The most a row whose FTS5 score is at most `score` can score over the admitted
    statistics. phrases: (admitted IDF / whole-table IDF, admitted IDF), sorted.

    A phrase's part is w * g(f, D) with g = f * (k1 + 1) / (f + k1 * (1 - b + b * D /
    avgdl)); the admitted g is at most rho = max(1, admitted avgdl / whole avgdl) times the
    whole-table one, and always under k1 + 1. So the phrases with the lowest ratios are
    bounded together by rho * their largest ratio * score, each other one by (k1 + 1) *
    its admitted IDF; the least of these splits is the bound (a ratio is huge where a
    word is in half of all nodes, FTS5's floor, but not of the admitted ones).
    """
    best = (K1 + 1.0) * sum(mine for _, mine in phrases)  # no phrase bounded by the ratio
    rest = best
    for ratio, mine in phrases:
        rest -= (K1 + 1.0) * mine
        best = min(best, rho * ratio * score + rest)
    return best


@dataclass
class Lengths:
    """Every row's length and label-set token, and each set's rows and tokens (one index
    version: read once from nodes_fts_docsize)."""

    rows: dict[int, int]
    tokens: dict[int, str]  # rowid -> the label-set token of its node's stored labels
    sets: dict[str, tuple[int, int]]
    total_rows: int
    total_tokens: int

    @classmethod
    def read(cls, pairs: Iterable[tuple[int, bytes, str | None]]) -> Lengths:
        """From (rowid, docsize blob, labels JSON or None) of every full-text row."""
        rows: dict[int, int] = {}
        tokens: dict[int, str] = {}
        sets: dict[str, list[int]] = {}
        tokens_of: dict[str, str] = {}
        for rowid, blob, labels in pairs:
            length = sizes(blob)
            rows[rowid] = length
            if labels is None:
                continue  # a full-text row without its node: in the whole table only
            token = tokens_of.get(labels) or tokens_of.setdefault(labels, label_set_token(labels))
            tokens[rowid] = token
            seen = sets.setdefault(token, [0, 0])
            seen[0] += 1
            seen[1] += length
        return cls(
            rows,
            tokens,
            {t: (n, s) for t, (n, s) in sets.items()},
            len(rows),
            sum(rows.values()),
        )


@dataclass
class Admitted:
    """The statistics of the rows one set of labels admits (one index version)."""

    restrict: str  # what an expression is AND-ed with (`(x) AND ...`) or NOT-ed with
    negate: bool  # True: restrict is the hidden labels' tokens, excluded with NOT
    visible: frozenset[str]  # the label-set tokens admitted
    nodes: int
    tokens: int
    # (phrase, column) -> admitted rows holding it
    counts: dict[tuple[str, str | None], int] = field(default_factory=dict)
    # (phrase, column) -> rowid -> weighted hits (ABSENT: the row does not hold it), for
    # the rows scored so far
    hits: dict[tuple[str, str | None], dict[int, float]] = field(default_factory=dict)
    cached_rows: int = 0

    @property
    def avgdl(self) -> float:
        """Mean admitted row length (0 when nothing is admitted)."""
        return self.tokens / self.nodes if self.nodes else 0.0

    def within(self, expr: str) -> str:
        """expr matched on admitted rows only."""
        return f"({expr}) NOT {self.restrict}" if self.negate else f"({expr}) AND {self.restrict}"


ABSENT = -1.0
_TOKENIZER = "porter unicode61 remove_diacritics 2"  # the node index's (nodestore._SCHEMA)


class Scratch:
    """An in-memory FTS5 table with the index's columns and tokenizer: a few rows copied
    in, each phrase's weighted hits in each row read back (one per thread)."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.made = False

    def hits(
        self,
        rows: list[tuple[int, str, str, str]],
        found: list[tuple[str, str | None]],
    ) -> dict[tuple[str, str | None], dict[int, float]]:
        """(text, column) -> rowid -> weighted hits (ABSENT: not held) for rows given as
        (rowid, name, body, meta) as the index stores them."""
        db = self.db
        if not self.made:
            # Contentless: only the tokens are kept, and 'delete-all' empties it entirely
            # (rows deleted one by one would stay in its segments).
            db.execute(
                "CREATE VIRTUAL TABLE m USING fts5(name, body, meta, content = '', "
                f"tokenize = '{_TOKENIZER}')"
            )
            self.made = True
        db.execute("INSERT INTO m (m) VALUES ('delete-all')")
        db.executemany("INSERT INTO m (rowid, name, body, meta) VALUES (?, ?, ?, ?)", rows)
        lengths = {rowid: sizes(blob) for rowid, blob in db.execute("SELECT id, sz FROM m_docsize")}
        if not sum(lengths.values()):
            return {key: {} for key in found}  # nothing to count in (no text was found)
        avgdl = sum(lengths.values()) / len(lengths)
        out: dict[tuple[str, str | None], dict[int, float]] = {}
        for key in dict.fromkeys(found):
            held = db.execute(
                "SELECT rowid, bm25(m, 4.0, 1.0, 0.0) FROM m WHERE m MATCH ?",
                (phrase_query(*key),),
            ).fetchall()
            weight = idf(len(lengths), len(held))
            got = dict.fromkeys(lengths, ABSENT)
            for rowid, score in held:
                got[rowid] = frequency(-score, weight, lengths[rowid], avgdl)
            out[key] = got
        return out
