"""BM25 on the Postgres index is computed in SQL (issue 34): the same rankings and scores.

The six real-world samples (tests/data/realworld) and the eshop sample are indexed into
SQLite by the real indexer, with tests labelled `confidential` and SQL files `dba`, then
copied into Postgres. Every golden question is searched under several scopes; each ranked
pass the search runs (its FTS5 expression, scope and filters) is checked against the
Python scorer the SQL replaced (kept here as the oracle: every matching node's term rows
read out and scored as FTS5's formula says) for the same nodes, order and scores, to the
last bit. The whole search is also SQLite's, for a caller who sees every node (FTS5's own
bm25()) and for one who does not (SQLite's admitted BM25, runtime/retrieval/admitted.py).
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.engine import indexcopy
from runtime.retrieval import pgindex
from runtime.retrieval.indexer import index_paths
from runtime.retrieval.indexes import open_index
from runtime.retrieval.node import Scope
from runtime.retrieval.nodestore import open_store
from runtime.retrieval.pgindex import K1, WEIGHTS, B, PostgresNodeStore, _parse, terms

pytestmark = pytest.mark.postgres

DATA = Path(__file__).resolve().parent.parent / "data"
CORPORA = ("wwi", "tsqlt", "aw", "eshop", "eshoponweb", "cleanarch")
GOLDEN = json.loads((DATA / "golden" / "questions.json").read_text())
SAMPLE = json.loads((DATA / "retrieval" / "questions.json").read_text())
LABELS = [("*[Tt]est*", ["confidential"]), ("*.sql", ["dba"])]
EVERYTHING = ("confidential", "dba")


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, pg_server: Any) -> Iterator[tuple[Any, Any]]:
    """(SQLite index, the same index in Postgres)."""
    store = open_store(str(tmp_path_factory.mktemp("rank") / "i.db"), create=True)
    roots = {name: DATA / "realworld" / name for name in CORPORA}
    roots["sample"] = Path(__file__).resolve().parents[2] / "pipelines" / "sample" / "eshop"
    for name, root in roots.items():
        files = [str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()]
        rules = [(g, labels) for g, labels in LABELS if fnmatch.filter(files, g)]
        index_paths(store, [str(root)], repository=name, label_rules=rules)
    url = pg_server.create_database("ranking")
    indexcopy.copy_index(store.path, url)
    pg = open_index(url)
    yield store, pg
    pg.close()
    pg_server.drop_database("ranking")


# --- the oracle: the Python scorer the SQL replaced ---------------------------------------


def _having(tree: Any, phrases: list[Any], column: str | None) -> tuple[str, list[Any]]:
    kind = tree[0]
    if kind == "phrase":
        words = terms().query(tree[1])
        phrases.append((words, column))
        if not words:
            return "FALSE", []
        cond = {"name": " AND t.name_tf > 0", "body": " AND t.body_tf > 0"}.get(column or "", "")
        parts = [f"bool_or(t.term = ?{cond})" for _ in dict.fromkeys(words)]
        return "(" + " AND ".join(parts) + ")", list(dict.fromkeys(words))
    if kind == "col":
        return _having(tree[2], phrases, tree[1])
    if kind == "not":
        left, largs = _having(tree[1], phrases, column)
        right, rargs = _having(tree[2], [], column)
        return f"({left} AND NOT {right})", [*largs, *rargs]
    children = [_having(c, phrases, column) for c in tree[1]]
    if not children:
        return "FALSE", []
    joined = f" {kind.upper()} ".join(c[0] for c in children)
    return f"({joined})", [a for c in children for a in c[1]]


def kept(tree: Any, has: Any, column: str | None = None) -> tuple[bool, list[bool]]:
    """(whether the tree matches a row, per scored phrase whether FTS5 keeps its hits
    there: only under subexpressions that match the row, fts5ExprCheckPoslists)."""
    kind = tree[0]
    if kind == "phrase":
        words = terms().query(tree[1])
        ok = bool(words) and all(has(w, column) for w in words)
        return ok, [ok]
    if kind == "col":
        return kept(tree[2], has, tree[1])
    if kind == "not":
        left, flags = kept(tree[1], has, column)
        ok = left and not kept(tree[2], has, column)[0]
        return ok, [f and ok for f in flags]
    parts = [kept(c, has, column) for c in tree[1]]
    if not parts:
        return False, []
    ok = all(p[0] for p in parts) if kind == "and" else any(p[0] for p in parts)
    return ok, [f and ok for p in parts for f in p[1]]


def oracle(
    store: PostgresNodeStore,
    match: str,
    scope: Scope,
    top_k: int,
    filters: dict[str, Any] | None,
) -> list[tuple[str, float]]:
    """(id, score) of the best top_k: every match's term rows scored in Python (the scorer
    the SQL replaced, with FTS5's rule for phrases under subexpressions that do not match)."""
    phrases: list[Any] = []
    having, hargs = _having(_parse(match), phrases, None)
    words = sorted({t for p, _ in phrases for t in p})
    if not words:
        return []
    where, args = store._scope_sql(scope)
    fsql, fargs = store._filter_sql(filters)
    db = store.conn()
    rows = db.execute(
        "SELECT n.rowid, n.id, n.length, array_agg(t.term), array_agg(t.name_tf),"
        " array_agg(t.body_tf) FROM node_terms t JOIN nodes n ON n.rowid = t.node WHERE"
        f" t.term = ANY(?) AND {where}{fsql} GROUP BY n.rowid HAVING {having}",
        [words, *args, *fargs, *hargs],
    ).fetchall()
    stats_where, stats_args = store._scope_sql(Scope(allowed_labels=scope.allowed_labels))
    total, avgdl = db.execute(
        f"SELECT count(*), coalesce(avg(n.length), 0) FROM nodes n WHERE {stats_where}",
        stats_args,
    ).fetchone()
    total, avgdl = int(total), float(avgdl)
    idf = []
    for phrase, col in phrases:
        cond = {"name": " AND t.name_tf > 0", "body": " AND t.body_tf > 0"}.get(col or "", "")
        df = db.execute(
            "SELECT count(*) FROM (SELECT t.node FROM node_terms t JOIN nodes n ON"
            f" n.rowid = t.node WHERE t.term = ANY(?){cond} AND {stats_where} GROUP BY"
            " t.node HAVING count(*) = ?) m",
            [list(phrase), *stats_args, len(set(phrase))],
        ).fetchone()[0]
        idf.append(max(1e-6, math.log((total - df + 0.5) / (df + 0.5))))
    scored = []
    for _, nid, length, found, name_tfs, body_tfs in rows:
        counts = {
            (term, col): (WEIGHTS[0] * name_tf if col != "body" else 0.0)
            + (WEIGHTS[1] * body_tf if col != "name" else 0.0)
            for term, name_tf, body_tf in zip(found, name_tfs, body_tfs, strict=True)
            for col in (None, "name", "body")
        }
        tf = {t: (n, b) for t, n, b in zip(found, name_tfs, body_tfs, strict=True)}

        def has(term: str, col: str | None, tf: Any = tf) -> bool:
            n, b = tf.get(term, (0, 0))
            return term in tf and (n > 0 if col == "name" else b > 0 if col == "body" else True)

        flags = kept(_parse(match), has)[1]
        norm = K1 * (1 - B + B * length / avgdl) if avgdl else K1
        score = 0.0
        for weight, (phrase, col), keep in zip(idf, phrases, flags, strict=True):
            f = min(counts.get((t, col), 0.0) for t in phrase) if phrase and keep else 0.0
            if f:
                score += weight * f * (K1 + 1) / (f + norm)
        scored.append((nid, score))
    scored.sort(key=lambda r: (-r[1], r[0]))
    return scored[:top_k]


# --- the tests ------------------------------------------------------------------------------


def _scopes() -> list[tuple[str, Scope]]:
    out = []
    for q in GOLDEN:
        out.append((q["q"], Scope(q["repo"], None, EVERYTHING)))
        out.append((q["q"], Scope(q["repo"])))  # tests and SQL files hidden
        out.append((q["q"], Scope(None, None, ("confidential",))))  # every repository
    for q in SAMPLE:
        out.append((q["q"], Scope("sample", None, ("dba",))))
    return out


def test_every_pass_ranks_and_scores_as_the_python_scorer_sample(both, monkeypatch):
    """A tenth of the questions and scopes below (the fast chunk)."""
    _passes_match_the_oracle(both, monkeypatch, _scopes()[::10], 50)


@pytest.mark.slow
def test_every_pass_ranks_and_scores_as_the_python_scorer(both, monkeypatch):
    """Each ranked pass of every question under four kinds of scope: same ids, same order,
    the same float scores (==), over the visible nodes only."""
    _passes_match_the_oracle(both, monkeypatch, _scopes(), 500)


def _passes_match_the_oracle(both: Any, monkeypatch: Any, scopes: Any, least: int) -> None:
    _, pg = both
    real = PostgresNodeStore._bm25
    checked: list[tuple[str, Scope]] = []
    wrong: list[Any] = []

    def checking(self, match, scope, top_k, filters):
        got = real(self, match, scope, top_k, filters)
        raw = [(r[1], r[5]) for r in self._ranked(match, scope, top_k, filters)] if match else []
        want = oracle(self, match, scope, top_k, filters) if match else []
        if raw != want or [h["id"] for h in got] != [nid for nid, _ in want]:
            wrong.append((match, scope, filters, raw, want))
        checked.append((match, scope))
        return got

    monkeypatch.setattr(PostgresNodeStore, "_bm25", checking)
    for question, scope in scopes:
        pg.search(question, scope=scope, top_k=8)
    assert not wrong, wrong[:3]
    assert len(checked) > least


@pytest.mark.parametrize("listed", [0, pgindex.HIDDEN_LISTED])
def test_a_conjunction_and_a_disjunction_of_common_words(both, monkeypatch, listed):
    """The two plans (inner merge joins of posting lists, full joins with a condition)
    give the oracle's ranking, with NOT, column filters and phrases of several words, for a
    caller who sees every node and for one who does not; with the hidden nodes skipped by
    rowid in the statistics (listed) or each posting's node checked (listed = 0)."""
    monkeypatch.setattr(pgindex, "HIDDEN_LISTED", listed)
    pg = open_index(both[1].url)  # a fresh store: the choice is cached per version
    for scope in (Scope(None, None, EVERYTHING), Scope(None, None, ()), Scope("wwi")):
        for match in (
            '"order" AND "id"',
            '"order" OR "customer" OR "stock"',
            '("order" AND "line") OR ("stock" AND "item")',
            '"order" NOT "test"',
            'name : ("order" OR "basket")',
            'body : "order" AND name : "get"',
            '"order line" OR "stock item"',
            '"zzznotaword" OR "order"',
            '"zzznotaword" AND "order"',
            '"test" OR "sql" OR "tsqlt"',
        ):
            got = [(r[1], r[5]) for r in pg._ranked(match, scope, 40, None)]
            assert got == oracle(pg, match, scope, 40, None), (match, scope)
            assert got or "zzznotaword" in match or scope.repository
        stats = pg._stats()
        for term in ("order", "test", "tsqlt", "customer"):
            counted = pg._doc_count(stats, term, 10_000, scope)
            where, args = pg._scope_sql(Scope(allowed_labels=scope.allowed_labels))
            want = pg.conn().execute(
                "SELECT count(*) FROM node_terms t JOIN nodes n ON n.rowid = t.node"
                f" WHERE t.term = ? AND {where}",
                [terms().query(term)[0], *args],  # as stored: stemmed
            )
            assert counted == want.fetchone()[0], (term, scope)
    pg.close()


@pytest.mark.parametrize(
    "match",
    [
        '("created" AND "basket") OR ("order" AND "basket") OR ("order" AND "created")',
        '("order" AND "line") OR "stock"',
        '("order" OR "basket") AND "id"',
        '("order" AND "line") NOT "test"',
    ],
)
def test_a_phrase_under_a_subexpression_that_misses_the_row_weighs_nothing(both, match):
    """FTS5's own bm25() where the caller sees every node: a row matching one group of an
    OR counts the hits of that group's phrases only (the any-but-one pass writes these)."""
    sqlite, pg = both
    scope = Scope(None, None, EVERYTHING)
    want = sqlite._bm25(match, scope, 30, None)
    got = pg._bm25(match, scope, 30, None)
    assert [h["id"] for h in got] == [h["id"] for h in want]
    assert [h["score"] for h in got] == pytest.approx([h["score"] for h in want], abs=2e-6)
    assert len(want) > 5


def test_the_whole_search_is_sqlites_where_every_node_is_visible_sample(both):
    """A third of the golden questions below (the fast chunk)."""
    _same_as_sqlite(both, GOLDEN[::3])


@pytest.mark.slow
def test_the_whole_search_is_sqlites_where_every_node_is_visible(both):
    """Every golden question in its repository with every label, in it without labels, and
    over every repository: the same hits in the same order as SQLite's."""
    _same_as_sqlite(both, GOLDEN)


def _same_as_sqlite(both: Any, questions: list[dict[str, Any]]) -> None:
    sqlite, pg = both
    differ = []
    for q in questions:
        for scope in (Scope(q["repo"], None, EVERYTHING), Scope(q["repo"]), Scope(None)):
            want = sqlite.search(q["q"], scope=scope, top_k=8)
            got = pg.search(q["q"], scope=scope, top_k=8)
            if [h["id"] for h in got] != [h["id"] for h in want]:
                differ.append((q["q"], scope))
    assert not differ


def test_a_denied_node_is_never_a_candidate_nor_counted(both):
    """A question whose words are in hidden nodes: the public scope gets none of them, and
    the statistics differ from the wide scope's (the hidden nodes are not counted)."""
    _, pg = both
    wide = Scope(None, None, EVERYTHING)
    public = Scope(None, None, ())
    hits = pg._bm25('"test"', wide, 200, None)
    hidden = {h["id"] for h in hits} - {h["id"] for h in pg._bm25('"test"', public, 200, None)}
    assert hidden
    labelled = pg.get_nodes(sorted(hidden), scope=wide)
    assert all(n.labels for n in labelled.values())
    assert pg._figures([(["test"], None)], public)[0] < pg._figures([(["test"], None)], wide)[0]
