"""The search passes over the SQLite node store: named, joined, kind, all-informative and
any-word BM25 passes, semantic search, and hybrid fusion."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from runtime.retrieval.node import Scope, meta_token
from runtime.retrieval.query import (
    fts_query,
    kinds_in,
    named_words,
    query_terms,
    without_kind_words,
)
from runtime.retrieval.words import split_identifier

# Nodes the any-word pass ranks at most (see SqliteNodeStore._selective_any).
ANY_PASS_POSTINGS = 4000


# BM25 column weights: names count four times the body; the meta column (scope and filter
# tokens, see meta_tokens) not at all. Passed to bm25() directly: ~30% faster than `rank`.
_BM25 = "bm25(nodes_fts, 4.0, 1.0, 0.0)"


def _hit(index: int, nid: str, score: float, path: str, kind: str, name: str) -> dict[str, Any]:
    """One search result as every search type returns it (index 0 is rank 1)."""
    return {
        "id": nid,
        "score": round(score, 6),
        "rank": index + 1,
        "path": path,
        "kind": kind,
        "name": name,
    }


def _any(prefix: str, values: Iterable[str]) -> str:
    return "(" + " OR ".join(f"meta:{meta_token(prefix, v)}" for v in values) + ")"


@dataclass
class _Stats:
    """Cached index statistics (see SqliteNodeStore._stats)."""

    version: int
    nodes: int
    repositories: frozenset[str]
    snapshots: frozenset[str]
    labels: frozenset[str]
    doc_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # (count, cap)


class SearchPasses:
    """The search passes of the SQLite node store (mixed into SqliteNodeStore).

    The store provides the connection (`conn`) and the per-thread cache (`_local`).
    """

    if TYPE_CHECKING:
        _local: threading.local

        def conn(self) -> sqlite3.Connection: ...

    # --- reading -------------------------------------------------------------------
    @staticmethod
    def _scope_sql(scope: Scope, alias: str = "n") -> tuple[str, list[Any]]:
        clauses, args = [], []
        if scope.repository:
            clauses.append(f"{alias}.repository = ?")
            args.append(scope.repository)
        if scope.snapshot:
            clauses.append(f"{alias}.snapshot = ?")
            args.append(scope.snapshot)
        allowed = list(scope.allowed_labels or [])
        marks = ",".join("?" * len(allowed))
        clauses.append(
            f"NOT EXISTS (SELECT 1 FROM node_labels l WHERE l.node = {alias}.rowid"
            + (f" AND l.label NOT IN ({marks}))" if allowed else ")")
        )
        args += allowed
        return " AND ".join(clauses), args

    @staticmethod
    def _filter_sql(filters: dict[str, Any] | None) -> tuple[str, list[Any]]:
        clauses, args = [], []
        for key in ("kind", "language"):
            value = (filters or {}).get(key)
            if value:
                values = [value] if isinstance(value, str) else list(value)
                clauses.append(f"n.{key} IN ({','.join('?' * len(values))})")
                args += values
        prefix = (filters or {}).get("path_prefix")
        if prefix:
            clauses.append("n.path LIKE ? ESCAPE '\\'")
            args.append(prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        return (" AND " + " AND ".join(clauses)) if clauses else "", args

    def bm25(
        self, query: str, *, scope: Scope, top_k: int, filters: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """BM25 hits, best first, in passes that each add what the previous ones missed.

        0. nodes named by a word written as a name ("the Orders table", "usp_PlaceOrder"),
           up to half;
        1. adjacent words joined, as the identifier they may spell ("place order" -> PlaceOrder);
        2. nodes of a kind the question names ("which stored procedure ..."), up to half;
        3. nodes with every informative word; 4. nodes with any word.
        Every pass ranks with BM25 inside FTS5 under the same scope and filters. Matching
        all words before any word is both more precise and far cheaper.

        All of it reads one snapshot of the index (see `_snapshot`): the hidden labels
        are read from the statistics and written into each MATCH expression, so a node
        with a new label committed in between would otherwise be matched unfiltered.
        """
        with self._snapshot():
            return self._bm25_passes(query, scope, top_k, filters)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction over several statements: each sees the same index.

        SQLite (WAL) fixes a read transaction's snapshot at its first read; the first
        statement here is such a read, before the statistics are checked, so
        `PRAGMA data_version`, the cached label list and every MATCH agree. Inside a
        transaction already open on this connection, that one is the snapshot.
        """
        db = self.conn()
        if db.in_transaction:
            yield
            return
        db.execute("BEGIN")
        try:
            db.execute("SELECT 1 FROM nodes LIMIT 1").fetchall()  # fixes the snapshot now
            yield
        finally:
            db.rollback()  # read-only: ending it is all there is to do

    def _bm25_passes(
        self, query: str, scope: Scope, top_k: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        passes: list[tuple[str, dict[str, Any] | None, int]] = [
            ("named", filters, (top_k + 1) // 2),
            ("joined", filters, top_k),
        ]
        kinds = kinds_in(query)
        if kinds and not (filters or {}).get("kind"):
            by_kind = {**(filters or {}), "kind": kinds}
            passes += [("all", by_kind, (top_k + 1) // 2), ("any", by_kind, (top_k + 1) // 2)]
        passes += [("all", filters, top_k), ("any", filters, top_k)]
        merged: list[dict[str, Any]] = []
        from_kind_pass = 0
        for mode, flt, cap in passes:
            if len(merged) >= top_k:
                break  # later passes only add below what is already full
            kind_pass = flt is not filters
            if mode == "named":
                for h in self._named(query, scope, cap, filters):
                    if all(h["id"] != m["id"] for m in merged):
                        merged.append(h)
                continue
            # A kind pass already selects the kind: the word naming it would only add noise.
            words = without_kind_words(query) if kind_pass else query
            if mode == "any":
                match = self._selective_any(words)
            elif mode == "all":
                match = self._informative_all(words)
            else:
                match = fts_query(words, mode)
            for h in self._bm25(match, scope, top_k, flt):
                if len(merged) >= top_k or (kind_pass and from_kind_pass >= cap):
                    break
                if all(h["id"] != m["id"] for m in merged):
                    merged.append(h)
                    from_kind_pass += kind_pass
        return [{**h, "rank": i + 1} for i, h in enumerate(merged)]

    def _named(
        self, query: str, scope: Scope, limit: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """Visible nodes whose name is a word of the query written as a name.

        Those of a kind the query names come first, then by the BM25 of their own name.
        """
        names = named_words(query)
        if not names:
            return []
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        marks = ",".join("?" * len(names))
        rows = (
            self.conn()
            .execute(
                # INDEXED BY: without statistics the planner would scan the scope's index.
                f"SELECT n.rowid, n.id, n.path, n.kind, n.name FROM nodes n INDEXED BY nodes_name "
                f"WHERE n.name COLLATE NOCASE IN ({marks}) AND {where}{fsql}",
                [*names, *args, *fargs],
            )
            .fetchall()
        )
        if not rows:
            return []
        # Each node's score is the BM25 of its own name (as one joined identifier word),
        # looked up by rowid: scoring the whole question would rank every node its common
        # words match. Many same-named nodes (`Id`) are cut to the first 64 by id.
        rows = sorted(rows, key=lambda r: r[1])[:64]
        scores: dict[int, float] = {}
        for r in rows:
            word = "".join(split_identifier(r[4])) or r[4].lower()
            found = (
                self.conn()
                .execute(
                    f"SELECT {_BM25} FROM nodes_fts WHERE nodes_fts MATCH ? AND rowid = ?",
                    (f'"{word}"', r[0]),
                )
                .fetchone()
            )
            scores[r[0]] = found[0] if found else 0.0
        kinds = kinds_in(query)
        rows.sort(key=lambda r: (r[3] not in kinds, scores.get(r[0], 0.0), r[1]))
        return [_hit(i, r[1], -scores.get(r[0], 0.0), *r[2:5]) for i, r in enumerate(rows[:limit])]

    def _selective_any(self, query: str) -> str:
        """The any-word expression over the most selective words, within a postings budget.

        Ranking costs about a microsecond per matching node, so the words are taken rarest
        first while their nodes add up to at most ANY_PASS_POSTINGS (the rarest word is
        always taken). The words left out are the commonest, whose BM25 weight is lowest;
        they still count in the all-words pass. Adjacent-word joins are always kept.
        """
        terms, pairs = query_terms(query)
        if not terms:
            return " OR ".join(pairs)
        stats = self._stats()
        counted = sorted((self._doc_count(stats, t, ANY_PASS_POSTINGS), t) for t in terms)
        kept: list[str] = []
        total = 0
        for df, term in counted:
            if kept and total + df > ANY_PASS_POSTINGS:
                break
            kept.append(term)
            total += df
        return " OR ".join(kept + pairs)

    def _informative_all(self, query: str) -> str:
        """The all-words expression without the words in half the nodes or more.

        FTS5's BM25 gives such a word no weight (its idf is clamped), so requiring it only
        drops nodes: "how is stock reserved for an order" in a codebase about orders must
        still find ReserveAsync, which never says "order". If every word is that common,
        all are required.
        """
        terms, _ = query_terms(query)
        stats = self._stats()
        half = stats.nodes // 2
        kept = [t for t in terms if 2 * self._doc_count(stats, t, half) < stats.nodes]
        return " AND ".join(kept or terms)

    def _doc_count(self, stats: _Stats, term: str, cap: int) -> int:
        """Nodes matching one term, counted up to cap + 1 (cached until the index changes)."""
        found, counted_to = stats.doc_counts.get(term, (-1, -1))
        if found < 0 or (found > counted_to and cap > counted_to):  # unknown, or cut short
            sql = (
                "SELECT count(*) FROM (SELECT rowid FROM nodes_fts WHERE nodes_fts MATCH ? LIMIT ?)"
            )
            found = self.conn().execute(sql, (term, cap + 1)).fetchone()[0]
            stats.doc_counts[term] = (found, cap)
        return int(min(found, cap + 1))

    def _stats(self) -> _Stats:
        """Index-wide facts the query planner needs, recomputed only after the index changed.

        `PRAGMA data_version` moves when another connection commits; this connection's own
        writes drop the cache in `_write`.
        """
        db = self.conn()
        version = db.execute("PRAGMA data_version").fetchone()[0]
        stats: _Stats | None = getattr(self._local, "stats", None)
        if stats is not None and stats.version == version:
            return stats
        stats = _Stats(
            version=version,
            nodes=db.execute("SELECT count(*) FROM nodes").fetchone()[0],
            repositories=frozenset(
                r[0] for r in db.execute("SELECT DISTINCT repository FROM nodes")
            ),
            snapshots=frozenset(r[0] for r in db.execute("SELECT DISTINCT snapshot FROM nodes")),
            labels=frozenset(r[0] for r in db.execute("SELECT DISTINCT label FROM node_labels")),
        )
        self._local.stats = stats
        return stats

    def _meta_match(self, scope: Scope, filters: dict[str, Any] | None) -> tuple[str, str]:
        """(required tokens, forbidden tokens) expressing scope and kind/language filters."""
        need: list[str] = []
        stats = self._stats()
        # A constraint every node satisfies only slows FTS5 down: skip it, it excludes nothing.
        for value, present, prefix in (
            (scope.repository, stats.repositories, "r"),
            (scope.snapshot, stats.snapshots, "s"),
        ):
            if value and present != {value}:
                need.append(_any(prefix, [value]))  # absent values stay: nothing matches
        for key, prefix in (("kind", "k"), ("language", "g")):
            value = (filters or {}).get(key)
            if value:
                need.append(_any(prefix, [value] if isinstance(value, str) else value))
        hidden = sorted(stats.labels - set(scope.allowed_labels or ()))
        return " AND ".join(need), (_any("l", hidden) if hidden else "")

    def _bm25(
        self, match: str, scope: Scope, top_k: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """One ranked FTS5 query with scope and filters applied inside the index."""
        if not match:
            return []
        need, hidden = self._meta_match(scope, filters)
        expr = f"({match})" + (f" AND {need}" if need else "")
        if hidden:
            expr = f"({expr}) NOT {hidden}"
        prefix = (filters or {}).get("path_prefix")
        db = self.conn()
        window = top_k if not prefix else max(top_k * 8, 64)
        while True:  # only a path prefix is applied after ranking; the window grows until exact
            rows = db.execute(
                f"SELECT n.id, f.score, n.path, n.kind, n.name FROM (SELECT rowid, {_BM25} AS score "
                "FROM nodes_fts WHERE nodes_fts MATCH ? ORDER BY score LIMIT ?) f "
                "JOIN nodes n ON n.rowid = f.rowid "
                "WHERE (? IS NULL OR substr(n.path, 1, length(?)) = ?) ORDER BY f.score, n.id LIMIT ?",
                [expr, window, prefix, prefix, prefix, top_k],
            ).fetchall()
            if len(rows) >= top_k or not prefix:
                break
            matched = db.execute(
                "SELECT count(*) FROM (SELECT rowid FROM nodes_fts WHERE nodes_fts "
                "MATCH ? LIMIT ?)",
                (expr, window),
            ).fetchone()[0]
            if matched < window:
                break
            window *= 8
        return [_hit(i, r[0], -r[1], *r[2:5]) for i, r in enumerate(rows)]

    def semantic(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        embedder: Any,
        filters: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Cosine-similarity hits over stored vectors of the embedder's model."""
        from runtime.retrieval.embeddings import cosine_top

        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        rows = (
            self.conn()
            .execute(
                "SELECT n.id, v.vector, n.path, n.kind, n.name FROM vectors v JOIN nodes n ON n.rowid = v.node "
                f"WHERE v.model = ? AND {where}{fsql}",
                [embedder.name, *args, *fargs],
            )
            .fetchall()
        )
        if not rows:
            return []
        [qvec] = embedder.embed([query])
        best = cosine_top(qvec, [r[1] for r in rows], top_k)
        return [_hit(k, rows[i][0], s, *rows[i][2:5]) for k, (i, s) in enumerate(best)]

    def search(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        search_type: str = "bm25",
        filters: dict[str, Any] | None = None,
        rrf_k: int = 60,
        embedder: Any = None,
    ) -> list[dict[str, Any]]:
        """BM25, semantic, or hybrid by reciprocal rank fusion."""
        if search_type == "bm25":
            return self.bm25(query, scope=scope, top_k=top_k, filters=filters)
        if embedder is None:
            from runtime.retrieval.embeddings import default_embedder

            embedder = default_embedder()
        if search_type == "semantic":
            return self.semantic(
                query, scope=scope, top_k=top_k, embedder=embedder, filters=filters
            )
        pool = max(top_k * 4, 20)
        lists = [
            self.bm25(query, scope=scope, top_k=pool, filters=filters),
            self.semantic(query, scope=scope, top_k=pool, embedder=embedder, filters=filters),
        ]
        fused: dict[str, float] = {}
        info: dict[str, dict[str, Any]] = {}
        for hits in lists:
            for h in hits:
                fused[h["id"]] = fused.get(h["id"], 0.0) + 1.0 / (rrf_k + h["rank"])
                info[h["id"]] = h
        order = sorted(fused, key=lambda i: (-fused[i], i))[:top_k]
        return [
            {**info[i], "score": round(fused[i], 6), "rank": k + 1} for k, i in enumerate(order)
        ]
