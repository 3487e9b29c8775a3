"""The node index in PostgreSQL (`--index postgresql://...`, issue 34).

The same tables as the SQLite index (nodes, edges, node_tokens, vectors, label_sets,
files, roots) plus `node_terms`: each node's full-text terms with their counts in the
weighted name column and in the body. The terms are made by SQLite's own FTS5 tokenizer
(porter unicode61 remove_diacritics 2, in memory), so a word is split and stemmed exactly
as the SQLite index splits and stems it, and BM25 is FTS5's (k1 1.2, b 0.75, column
weights 4, 1, 0, a document's length all its tokens) computed in SQL.

The access rule of issue 28 holds inside the query: a node whose label set, repository or
snapshot the scope does not admit is never returned, counted, nor part of the statistics
(document frequencies, node count, mean length) that score the visible ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from runtime.context.tokens import CUT_RULE, digest
from runtime.errors import StoreError
from runtime.net import pgpool
from runtime.net.pgurl import display, is_url, scrub  # noqa: F401 (re-exported)
from runtime.retrieval import fts_expr
from runtime.retrieval.node import Node, Scope, label_set_token
from runtime.retrieval.query import kinds_in, name_cover, named_words, query_terms, question_stems
from runtime.retrieval.search import (
    SPELLED_CANDIDATES,
    SPELLED_MIN,
    SPELLED_POSTINGS,
    SearchPasses,
    _hit,
    _read_sets,
    _Stats,
)
from runtime.retrieval.words import WORD, split_identifier

K1 = 1.2
B = 0.75
WEIGHTS = (4.0, 1.0, 0.0)  # name, body, meta: as the SQLite index's bm25(4.0, 1.0, 0.0)
INDEX_FORMAT = 1
# Up to this many nodes hidden from a caller, the statistics' queries skip them by rowid
# (see _label_figures); more, and each posting's node row is checked instead.
HIDDEN_LISTED = 20_000
_TOKENIZER = "porter unicode61 remove_diacritics 2"

_COLS = (
    "id, repository, snapshot, kind, name, qualified_name, path, language, start_line, "
    "end_line, text, metadata, labels"
)

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS index_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS nodes (rowid BIGINT PRIMARY KEY, id TEXT UNIQUE NOT NULL,
        repository TEXT NOT NULL, snapshot TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
        qualified_name TEXT NOT NULL, path TEXT NOT NULL, language TEXT NOT NULL,
        start_line INT, end_line INT, text TEXT NOT NULL, metadata TEXT NOT NULL,
        labels TEXT NOT NULL, fts_name TEXT NOT NULL, fts_body TEXT NOT NULL,
        fts_meta TEXT NOT NULL, label_set TEXT NOT NULL, length INT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS nodes_path ON nodes (repository, snapshot, path)",
    "CREATE INDEX IF NOT EXISTS nodes_set ON nodes (label_set, repository, snapshot)",
    # A match's length by rowid without reading its row (see _ranked).
    "CREATE INDEX IF NOT EXISTS nodes_length ON nodes (rowid) INCLUDE (length)",
    """CREATE TABLE IF NOT EXISTS node_terms (term TEXT NOT NULL, node BIGINT NOT NULL,
        name_tf INT NOT NULL, body_tf INT NOT NULL,
        PRIMARY KEY (term, node) INCLUDE (name_tf, body_tf))""",
    "CREATE INDEX IF NOT EXISTS node_terms_node ON node_terms (node)",
    """CREATE TABLE IF NOT EXISTS edges (from_id TEXT NOT NULL, to_id TEXT NOT NULL,
        edge_type TEXT NOT NULL, repository TEXT NOT NULL, snapshot TEXT NOT NULL,
        PRIMARY KEY (from_id, to_id, edge_type))""",
    "CREATE INDEX IF NOT EXISTS edges_to ON edges (to_id)",
    """CREATE TABLE IF NOT EXISTS files (repository TEXT NOT NULL, snapshot TEXT NOT NULL,
        path TEXT NOT NULL, hash TEXT NOT NULL, extraction BYTEA NOT NULL,
        PRIMARY KEY (repository, snapshot, path))""",
    """CREATE TABLE IF NOT EXISTS vectors (node BIGINT PRIMARY KEY, model TEXT NOT NULL,
        vector BYTEA NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS node_tokens (node BIGINT NOT NULL, encoding TEXT NOT NULL,
        rule INT NOT NULL, digest TEXT NOT NULL, first INT NOT NULL, last INT NOT NULL,
        middle INT NOT NULL, PRIMARY KEY (node, encoding))""",
    """CREATE TABLE IF NOT EXISTS roots (root TEXT NOT NULL, repository TEXT NOT NULL,
        PRIMARY KEY (root, repository))""",
    """CREATE TABLE IF NOT EXISTS repository_roots (repository TEXT PRIMARY KEY,
        root TEXT NOT NULL)""",
    "CREATE TABLE IF NOT EXISTS label_sets (token TEXT PRIMARY KEY, labels TEXT NOT NULL)",
]


# A term longer than this (a base64 blob, a minified line) is stored as a digest of itself:
# a B-tree key holds at most about 2,700 bytes. Queries map their terms the same way, so
# matching stays exact.
LONG_TERM = 256


def stored_term(term: str) -> str:
    """The term as node_terms holds it."""
    if len(term.encode()) <= LONG_TERM:
        return term
    return "zzh" + hashlib.sha256(term.encode()).hexdigest()


class Terms:
    """FTS5's tokenizer, in memory: the terms SQLite's index stores for the same text."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self._fresh()
        self.lock = threading.Lock()
        self._queries: dict[str, list[str]] = {}

    def _fresh(self) -> None:
        """Empty tables: rows deleted from FTS5 stay in its segments until merged, and
        reading the vocabulary through them cost 9 ms a query after a batch of nodes."""
        self.db.execute("DROP TABLE IF EXISTS v")
        self.db.execute("DROP TABLE IF EXISTS t")
        self.db.execute(
            f"CREATE VIRTUAL TABLE t USING fts5(name, body, meta, tokenize = '{_TOKENIZER}')"
        )
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")

    def rows(
        self, texts: Sequence[tuple[str, str, str]]
    ) -> list[tuple[dict[str, tuple[int, int]], int]]:
        """Per (name, body, meta): term -> (count in name, count in body), and all tokens."""
        with self.lock:
            db = self.db
            db.executemany(
                "INSERT INTO t (rowid, name, body, meta) VALUES (?, ?, ?, ?)",
                [(i + 1, *t) for i, t in enumerate(texts)],
            )
            out: list[tuple[dict[str, tuple[int, int]], int]] = [({}, 0) for _ in texts]
            for raw, doc, col, n in db.execute(
                "SELECT term, doc, col, count(*) FROM v GROUP BY term, doc, col"
            ):
                term = stored_term(raw)
                terms, length = out[doc - 1]
                out[doc - 1] = (terms, length + n)
                if col == "meta":
                    continue
                name_tf, body_tf = terms.get(term, (0, 0))
                terms[term] = (name_tf + n, body_tf) if col == "name" else (name_tf, body_tf + n)
            self._fresh()
            return out

    def query(self, text: str) -> list[str]:
        """A query's distinct terms in order (as FTS5 splits and stems them)."""
        with self.lock:
            known = self._queries.get(text)
            if known is not None:
                return list(known)
            self.db.execute(
                "INSERT INTO t (rowid, name, body, meta) VALUES (1, '', ?, '')", (text,)
            )
            found = [
                stored_term(r[0]) for r in self.db.execute("SELECT term FROM v ORDER BY offset")
            ]
            self._fresh()
            if len(self._queries) > 4096:  # a bounded memo: the passes ask for the same phrases
                self._queries.clear()
            self._queries[text] = list(dict.fromkeys(found))
            return list(self._queries[text])


_TERMS: Terms | None = None


def terms() -> Terms:
    """The process's tokenizer."""
    global _TERMS
    if _TERMS is None:
        _TERMS = Terms()
    return _TERMS


def unavailable(where: str, exc: BaseException) -> StoreError:
    """A server that cannot be reached or went away, as a coded error."""
    why = " ".join(str(exc).split()) or type(exc).__name__
    return StoreError(
        f"index {where}: the database is unavailable: {why}", code="INDEX_UNAVAILABLE"
    )


def _row_node(row: Sequence[Any]) -> Node:
    return Node(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        row[8],
        row[9],
        text=row[10],
        metadata=json.loads(row[11]),
        labels=json.loads(row[12]),
    )


class PostgresNodeStore(SearchPasses):
    """The node index in a PostgreSQL database: the SQLite index's search passes over
    SQL primitives (full-text match, BM25, statistics) written for Postgres."""

    def __init__(self, url: str, *, create: bool = False, pool_max: int = 4, timeout: float = 10):
        psycopg, _ = pgpool.drivers("index")
        self.url = url
        self._local = threading.local()
        self.path = pgpool.shown(url, "index")
        try:
            with psycopg.connect(url, autocommit=True, **pgpool.connect_args(timeout)) as conn:
                found = conn.execute("SELECT to_regclass('index_meta') IS NOT NULL").fetchone()
                if not (found and found[0]):
                    if not create:
                        raise StoreError(f"no index at {self.path}", code="INDEX_NOT_FOUND")
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(3434)")
                        for statement in SCHEMA:
                            conn.execute(statement)
                        conn.execute(
                            "INSERT INTO index_meta VALUES ('format', %s), ('version', '0')"
                            " ON CONFLICT DO NOTHING",
                            (str(INDEX_FORMAT),),
                        )
        except psycopg.OperationalError as exc:
            raise unavailable(self.path, RuntimeError(scrub(str(exc), url))) from exc
        except psycopg.ProgrammingError as exc:
            raise StoreError(
                f"index {self.path}: {scrub(str(exc), url)}", code="STORE_URL_INVALID"
            ) from exc
        self._pool = pgpool.open_pool(
            self, url, size=pool_max, timeout=timeout, name="step-runtime-index"
        )

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()

    def _written(self, conn: Any) -> None:
        """Move the version readers compare their cached statistics with (same transaction)."""
        conn.execute(
            "UPDATE index_meta SET value = (value::bigint + 1)::text WHERE key = 'version'"
        )

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection; a server down or gone is INDEX_UNAVAILABLE, never a traceback."""
        import psycopg
        import psycopg_pool

        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout) as exc:
            raise unavailable(self.path, RuntimeError(scrub(str(exc), self.url))) from exc
        except psycopg.Error as exc:
            raise StoreError(f"index {self.path}: {exc}", code="INDEX_ERROR") from exc

    # --- writing ---------------------------------------------------------------------
    def put_rows(self, rows: Sequence[Any], *, rowids: Sequence[int] | None = None) -> int:
        """Add encoded node rows (nodestore.node_row's 17 columns), with their terms,
        label sets and token counts; an id already held is INDEX_ERROR."""
        if not rows:
            return 0
        made = terms().rows([(r[13], r[14], r[15]) for r in rows])
        with self._conn() as conn, conn.transaction():
            if rowids is None:
                conn.execute("LOCK TABLE nodes IN SHARE ROW EXCLUSIVE MODE")
                base = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM nodes").fetchone()[0]
                rowids = [base + i for i in range(len(rows))]
            taken = conn.execute(
                "SELECT id FROM nodes WHERE id = ANY(%s) LIMIT 1", ([r[0] for r in rows],)
            ).fetchone()
            if taken:
                raise StoreError(
                    f"the node id {taken[0]} is already held by another node", code="INDEX_ERROR"
                )
            with conn.cursor().copy(
                f"COPY nodes (rowid, {_COLS}, fts_name, fts_body, fts_meta, label_set, length)"
                " FROM STDIN"
            ) as copy:
                for rowid, r, (_, length) in zip(rowids, rows, made, strict=True):
                    copy.write_row((rowid, *r[:16], label_set_token(r[12]), length))
            with conn.cursor().copy(
                "COPY node_terms (term, node, name_tf, body_tf) FROM STDIN"
            ) as copy:
                for rowid, (found, _) in zip(rowids, made, strict=True):
                    for term, (name_tf, body_tf) in found.items():
                        copy.write_row((term, rowid, name_tf, body_tf))
            with conn.cursor().copy(
                "COPY node_tokens (node, encoding, digest, first, last, middle, rule) FROM STDIN"
            ) as copy:
                for rowid, r in zip(rowids, rows, strict=True):
                    for c in r[16]:
                        copy.write_row((rowid, *c, CUT_RULE))
            conn.cursor().executemany(
                "INSERT INTO label_sets VALUES (%s, %s) ON CONFLICT DO NOTHING",
                [(label_set_token(s), s) for s in sorted({r[12] for r in rows})],
            )
            self._written(conn)
        return len(rows)

    def put_edges(self, edges: Sequence[tuple[str, str, str, str, str]]) -> None:
        """Add (from, to, type, repository, snapshot) edges (a known edge stays as it is)."""
        with self._conn() as conn, conn.transaction():
            conn.cursor().executemany(
                "INSERT INTO edges VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [tuple(e) for e in edges],
            )
            self._written(conn)

    def put_vectors(self, model: str, vectors: dict[str, bytes]) -> None:
        """Store each node's vector (by node id) under a model name."""
        with self._conn() as conn, conn.transaction():
            conn.cursor().executemany(
                "INSERT INTO vectors (node, model, vector) SELECT rowid, %s, %s FROM nodes "
                "WHERE id = %s ON CONFLICT (node) DO UPDATE SET model = EXCLUDED.model, "
                "vector = EXCLUDED.vector",
                [(model, v, nid) for nid, v in vectors.items()],
            )
            self._written(conn)

    def delete_nodes(self, ids: Sequence[str]) -> None:
        """Remove nodes with their terms, counts, vectors and the edges leaving them."""
        with self._conn() as conn, conn.transaction():
            rows = [
                r[0]
                for r in conn.execute("SELECT rowid FROM nodes WHERE id = ANY(%s)", (list(ids),))
            ]
            for table, col in (
                ("node_terms", "node"),
                ("node_tokens", "node"),
                ("vectors", "node"),
            ):
                conn.execute(f"DELETE FROM {table} WHERE {col} = ANY(%s)", (rows,))
            conn.execute("DELETE FROM edges WHERE from_id = ANY(%s)", (list(ids),))
            conn.execute("DELETE FROM nodes WHERE rowid = ANY(%s)", (rows,))
            self._written(conn)

    # --- reading -----------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Rows per table (nodes, edges, vectors, files)."""
        with self._conn() as conn:
            return {
                t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                for t in ("nodes", "edges", "vectors", "files")
            }

    # --- the SQL primitives the shared search passes run on ------------------------------
    def conn(self) -> Any:
        """A connection speaking the sqlite3 dialect the shared passes write (`?` marks)."""
        return _Dialect(self)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One repeatable-read transaction: every statement of a search sees the same index."""
        if getattr(self._local, "held", None) is not None:
            yield
            return
        with self._conn() as conn:
            # autocommit mode. JIT compiles a search's plan for longer than it runs (20-60 ms
            # of a 100 ms query at 50k nodes); parallel workers only compete with the other
            # searches; the hash of a common word's postings fits in 64MB of work memory.
            conn.execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL jit = off;"
                " SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL work_mem = '64MB'"
            )
            self._local.held = conn
            try:
                # The version cannot move inside the snapshot: read it once, not per pass.
                self._local.version = self._version()
                yield
            finally:
                self._local.held = None
                self._local.version = None
                conn.execute("ROLLBACK")

    def _version(self) -> int:
        """The index version (moved by every write), fixed inside a snapshot."""
        held = getattr(self._local, "version", None)
        if held is not None and getattr(self._local, "held", None) is not None:
            return int(held)
        row = self.conn().execute("SELECT value FROM index_meta WHERE key = 'version'").fetchone()
        if row is None:
            raise StoreError(
                f"index {self.path}: index_meta has no version row", code="INDEX_ERROR"
            )
        return int(row[0])

    def _stats(self) -> _Stats:
        """Index-wide facts, recomputed after a write (the `version` row moves)."""
        db = self.conn()
        version = self._version()
        stats: _Stats | None = getattr(self._local, "stats", None)
        if stats is not None and stats.version == version:
            return stats
        stats = _Stats(
            version=version,
            nodes=int(db.execute("SELECT count(*) FROM nodes").fetchone()[0]),
            repositories=frozenset(
                r[0] for r in db.execute("SELECT DISTINCT repository FROM nodes")
            ),
            snapshots=frozenset(r[0] for r in db.execute("SELECT DISTINCT snapshot FROM nodes")),
            labels=frozenset(),
            label_sets=_read_sets(
                db.execute('SELECT token, labels FROM label_sets ORDER BY token COLLATE "C"')
            ),
        )
        self._local.stats = stats
        self._local.scoped = {}
        return stats

    def _scope_sql(self, scope: Scope, alias: str = "n") -> tuple[str, list[Any]]:  # type: ignore[override]
        """SQL keeping the nodes `alias` the scope may see: a label set all of whose labels
        are allowed, the set token agreeing with the stored labels, the id with the
        repository and snapshot columns (the index read as its own witness)."""
        allowed = set(scope.allowed_labels or ())
        visible = [t for t, labels in self._stats().label_sets if labels <= allowed]
        clauses = [
            (f"{alias}.label_set IN ({','.join('?' * len(visible))})" if visible else "FALSE"),
            f"{alias}.label_set = 'zzq' || left(encode(sha256(convert_to({alias}.labels,"
            " 'UTF8')), 'hex'), 16)",
            f"left({alias}.id, length({alias}.repository) + length({alias}.snapshot) + 4)"
            f" = {alias}.repository || '::' || {alias}.snapshot || '::'",
        ]
        args: list[Any] = list(visible)
        if scope.repository:
            clauses.append(f"{alias}.repository = ?")
            args.append(scope.repository)
        if scope.snapshot:
            clauses.append(f"{alias}.snapshot = ?")
            args.append(scope.snapshot)
        return " AND ".join(clauses), args

    @staticmethod
    def _filter_sql(filters: dict[str, Any] | None) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        for key in ("kind", "language"):
            value = (filters or {}).get(key)
            if value:
                values = [value] if isinstance(value, str) else list(value)
                clauses.append(f"n.{key} IN ({','.join('?' * len(values))})")
                args += values
        prefix = (filters or {}).get("path_prefix")
        if prefix:
            clauses.append("left(n.path, ?) = ?")
            args += [len(prefix), prefix]
        return (" AND " + " AND ".join(clauses)) if clauses else "", args

    def _matching(
        self,
        match: str,
        scope: Scope | None,
        filters: dict[str, Any] | None,
        extra: str = "",
        extra_args: Sequence[Any] = (),
    ) -> tuple[str, list[Any], list[Any], list[str]]:
        """(SQL selecting the matching visible nodes' rowid, id, path, kind, name and length;
        its arguments; the phrases, each (its terms, its column); the terms)."""
        found = _compile(_parse(match))
        if not found.terms:
            return "SELECT 1 WHERE FALSE", [], found.phrases, []
        m, margs = found.candidates()
        where, args = self._scope_sql(scope) if scope is not None else ("TRUE", [])
        fsql, fargs = self._filter_sql(filters)
        sql = (
            f"SELECT n.rowid, n.id, n.path, n.kind, n.name, n.length FROM ({m}) m"
            f" CROSS JOIN LATERAL ({_NODE_BY_ROW}) n WHERE {where}{fsql}{extra}"
        )
        return sql, [*margs, *args, *fargs, *extra_args], found.phrases, found.terms

    def _label_figures(self, scope: Scope) -> tuple[int, float, dict[Any, int], str, list[Any]]:
        """(nodes the scope's labels admit in any repository or snapshot, their mean
        length, their phrase document frequencies so far, SQL keeping a posting `m.node`
        of an admitted node, its arguments), computed once per index version.

        The test is the full scope check on the node row, looked up per posting, unless
        few nodes fail it: then it is the node row's existence (an index-only probe) and
        the node not among those few, read out here with the figures in the same
        snapshot: an index probe instead of a row read and hash, and a common word has
        25k postings at 50k nodes. A node is admitted exactly when its row exists and it is not among
        the failing ones, so both tests count the same postings.
        """
        stats = self._stats()  # a write since drops the per-scope figures below
        scope = Scope(allowed_labels=scope.allowed_labels)
        key = tuple(sorted(scope.allowed_labels or ()))
        scoped: dict[Any, Any] = self._local.scoped
        if key not in scoped:
            where, args = self._scope_sql(scope)
            db = self.conn()
            total, avgdl = db.execute(
                f"SELECT count(*), coalesce(avg(n.length), 0) FROM nodes n WHERE {where}", args
            ).fetchone()
            failing = stats.nodes - int(total)
            test = "EXISTS (SELECT 1 FROM nodes v WHERE v.rowid = m.node)"
            targs: list[Any] = []
            if 0 < failing <= HIDDEN_LISTED:
                hidden = [
                    r[0]
                    for r in db.execute(
                        f"SELECT n.rowid FROM nodes n WHERE NOT coalesce(({where}), FALSE)",
                        args,
                    )
                ]
                test += " AND NOT (m.node = ANY(?::bigint[]))"
                targs = [hidden]
            elif failing:
                test = f"EXISTS (SELECT 1 FROM ({_NODE_BY_ROW}) n WHERE {where})"
                targs = list(args)
            scoped[key] = (int(total), float(avgdl), {}, test, targs)
        total, avgdl, dfs, test, targs = scoped[key]
        return int(total), float(avgdl), dfs, str(test), list(targs)

    def _figures(self, phrases: list[Any], scope: Scope) -> tuple[int, float, list[float]]:
        """(admitted nodes, their mean length, each phrase's idf) for the scope's labels.

        The statistics are those of every node the caller's labels admit (FTS5 counts the
        whole index; here a denied node weighs nothing), in any repository or snapshot:
        the node count and mean length once per index version, each phrase's document
        frequency once per version too, the missing ones in one query.
        """
        total, avgdl, dfs, test, targs = self._label_figures(scope)
        # A phrase under a column filter counts the nodes holding it in that column (FTS5's).
        wanted = list(dict.fromkeys((tuple(p), c) for p, c in phrases if (tuple(p), c) not in dfs))
        parts: list[str] = []
        qargs: list[Any] = []
        for i, (words, col) in enumerate(wanted):
            if not words:
                dfs[(words, col)] = 0
                continue
            m, margs = _Compiled.conjunction(list(dict.fromkeys(words)), col)
            parts.append(f"SELECT {i}, count(*) FROM ({m}) m WHERE {test}")
            qargs += [*margs, *targs]
        if parts:
            for i, found in self.conn().execute(" UNION ALL ".join(parts), qargs):
                dfs[wanted[i]] = int(found)
        idf = [
            max(1e-6, math.log((total - dfs[(tuple(p), c)] + 0.5) / (dfs[(tuple(p), c)] + 0.5)))
            for p, c in phrases
        ]
        return total, avgdl, idf

    def _ranked(
        self,
        match: str,
        scope: Scope,
        top_k: int,
        filters: dict[str, Any] | None,
        node: int | None = None,
    ) -> list[tuple[int, str, str, str, str, float]]:
        """(rowid, id, path, kind, name, BM25) of the best top_k visible matches, scored,
        ordered (score, then id) and cut inside the query; node: that node alone."""
        found = _compile(_parse(match))
        if not found.terms:
            return []
        _, avgdl, idf = self._figures(found.phrases, scope)
        m, margs = found.candidates(node)
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)

        # FTS5's BM25 term by term in the Python scorer's order of operations (float8 is
        # the same IEEE double), so the scores are the same numbers, not close ones.
        def score(length: str) -> str:
            norm = f"{_f(K1)} * ({_f(1 - B)} + {_f(B)} * {length} / {_f(avgdl)})"
            return " + ".join(
                [_f(0.0)]
                + [
                    f"CASE WHEN m.f{i} <> 0 THEN {_f(weight)} * m.f{i} * {_f(K1 + 1)}"
                    f" / (m.f{i} + {norm if avgdl else _f(K1)}) ELSE {_f(0.0)} END"
                    for i, weight in enumerate(idf)
                ]
            )

        db = self.conn()
        if node is None and not filters:
            # First the best `window` matches of the whole index by score alone, each
            # length read from nodes_length (index-only), then the scope checked on their
            # rows: a common word's 100k matches cost a probe each, not a row each. Ties
            # at the window's edge come along (WITH TIES), so when top_k of them are
            # visible they are the visible top_k; otherwise the full query below.
            window = max(64, 4 * top_k)
            rows = db.execute(
                f"WITH top AS MATERIALIZED (SELECT m.node, {score('l.length')} AS score"
                f" FROM ({m}) m JOIN nodes l ON l.rowid = m.node ORDER BY score DESC"
                f" FETCH FIRST ? ROWS WITH TIES) SELECT n.rowid, n.id, n.path, n.kind, n.name,"
                f" m.score FROM top m CROSS JOIN LATERAL ({_NODE_BY_ROW}) n WHERE {where}"
                ' ORDER BY m.score DESC, n.id COLLATE "C" LIMIT ?',
                [*margs, window, *args, top_k],
            ).fetchall()
            if len(rows) >= top_k:
                return [(r[0], r[1], r[2], r[3], r[4], float(r[5])) for r in rows]
        rows = db.execute(
            f"SELECT n.rowid, n.id, n.path, n.kind, n.name, {score('n.length')} AS score"
            f" FROM ({m}) m CROSS JOIN LATERAL ({_NODE_BY_ROW}) n WHERE {where}{fsql}"
            ' ORDER BY score DESC, n.id COLLATE "C" LIMIT ?',
            [*margs, *args, *fargs, top_k],
        ).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4], float(r[5])) for r in rows]

    def _bm25(
        self, match: str, scope: Scope, top_k: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """One ranked match with scope and filters applied inside the query."""
        if not match:
            return []
        rows = self._ranked(match, scope, top_k, filters)
        return [_hit(i, r[1], r[5], r[2], r[3], r[4]) for i, r in enumerate(rows)]

    _EDGES_FIRST = "JOIN"  # (SearchPasses._EDGES_FIRST: Postgres plans the join itself)

    def _materialise_admitted(self, scope: Scope) -> None:
        """Nothing: the statistics here are always the admitted nodes', computed in SQL
        (the SQLite index's temporary table of admitted rows has no use here)."""

    def _admitted_table(self, scope: Scope) -> str | None:
        """None: see _materialise_admitted."""
        return None

    def _doc_count(self, stats: _Stats, term: str, cap: int, scope: Scope) -> int:
        """Nodes matching one term expression among those the scope's labels admit (any
        repository or snapshot), counted up to cap + 1 (cached per version)."""
        key = (term, tuple(sorted(set(scope.allowed_labels or ()))))
        found, counted_to = stats.doc_counts.get(key, (-1, -1))
        if found < 0 or (found > counted_to and cap > counted_to):
            compiled = _compile(_parse(term))
            found = 0
            if compiled.terms:
                m, margs = compiled.candidates()
                _, _, _, test, targs = self._label_figures(scope)
                found = int(
                    self.conn()
                    .execute(
                        f"SELECT count(*) FROM (SELECT 1 FROM ({m}) m WHERE {test} LIMIT ?) c",
                        [*margs, *targs, cap + 1],
                    )
                    .fetchone()[0]
                )
            stats.doc_counts[key] = (found, cap)
        return int(min(found, cap + 1))

    def _named(
        self, query: str, scope: Scope, limit: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """Visible nodes whose name is a word of the query written as a name (as SQLite's)."""
        names = named_words(query)
        if not names:
            return []
        where, args = self._scope_sql(scope)
        fsql, fargs = self._filter_sql(filters)
        rows = (
            self.conn()
            .execute(
                "SELECT n.rowid, n.id, n.path, n.kind, n.name FROM nodes n "
                f"WHERE lower(n.name) IN ({','.join('?' * len(names))}) AND {where}{fsql}",
                [*[n.lower() for n in names], *args, *fargs],
            )
            .fetchall()
        )
        if not rows:
            return []
        rows = sorted(rows, key=lambda r: r[1])[:64]
        scores: dict[int, float] = {}
        for r in rows:
            word = "".join(split_identifier(r[4])) or r[4].lower()
            found = self._ranked(f'"{word}"', scope, 1, None, node=r[0])
            if found:
                scores[r[0]] = found[0][5]
        kinds = kinds_in(query)
        rows.sort(key=lambda r: (r[3] not in kinds, -scores.get(r[0], 0.0), r[1]))
        return [_hit(i, r[1], scores.get(r[0], 0.0), *r[2:5]) for i, r in enumerate(rows[:limit])]

    def _spelled(
        self, query: str, scope: Scope, limit: int, filters: dict[str, Any] | None
    ) -> list[dict[str, Any]]:
        """Nodes whose own name the question spells out in words (as SQLite's _spelled)."""
        plain = " ".join(w for w in WORD.findall(query) if len(split_identifier(w)) == 1)
        found_terms, _ = query_terms(plain)
        if len(found_terms) < SPELLED_MIN:
            return []
        stats = self._stats()
        counted = sorted(
            (self._doc_count(stats, t, SPELLED_POSTINGS, scope), t) for t in found_terms
        )
        kept: list[str] = []
        total = 0
        for df, term in counted:
            if total + df > SPELLED_POSTINGS:
                break
            kept.append(term)
            total += df
        if len(kept) < SPELLED_MIN:
            return []
        stems = question_stems(query)
        pairs = " OR ".join(f"({a} AND {b})" for i, a in enumerate(kept) for b in kept[i + 1 :])
        sql, args, _, _words = self._matching(f"name : ({pairs})", scope, filters)
        rows = self.conn().execute(f"{sql} LIMIT ?", [*args, SPELLED_CANDIDATES]).fetchall()
        ranked = []
        for _, nid, path, kind, name, *_rest in rows:
            said, parts = name_cover(name, stems)
            if said >= SPELLED_MIN and 2 * said > parts:
                ranked.append((-said / parts, -said, nid, path, kind, name))
        ranked.sort(key=lambda r: r[:3])
        return [_hit(i, r[2], float(len(ranked) - i), *r[3:]) for i, r in enumerate(ranked[:limit])]

    def count_matches(self, query: str, *, scope: Scope, cap: int = 1000) -> int:
        """Visible nodes holding any searched word of query, up to cap + 1."""
        match = self._selective_any(query, scope)
        if not match:
            return 0
        sql, args, _, words = self._matching(match, scope, None)
        if not words:
            return 0
        row = (
            self.conn()
            .execute(f"SELECT count(*) FROM ({sql} LIMIT ?) m", [*args, cap + 1])
            .fetchone()
        )
        return int(row[0])

    def count_hidden(self, query: str, *, wide: Scope, narrow: Scope, cap: int = 1000) -> int:
        """Nodes `wide` may see and `narrow` may not that hold any searched word, up to cap + 1."""
        found = self.count_matches(query, scope=wide, cap=cap)
        return max(0, found - self.count_matches(query, scope=narrow, cap=cap))

    def get_nodes(self, ids: Sequence[str], *, scope: Scope) -> dict[str, Node]:
        """The visible nodes among ids (with the token counts stored for their texts)."""
        if not ids:
            return {}
        out: dict[str, Node] = {}
        by_row: dict[int, Node] = {}
        where, args = self._scope_sql(scope)
        db = self.conn()
        columns = ", ".join("n." + c.strip() for c in _COLS.split(","))
        for r in db.execute(
            f"SELECT n.rowid, {columns} FROM nodes n WHERE n.id = ANY(?) AND {where}",
            [list(ids), *args],
        ):
            by_row[r[0]] = out[r[1]] = _row_node(r[1:])
        for row, encoding, text_digest, first, last, middle in db.execute(
            "SELECT node, encoding, digest, first, last, middle FROM node_tokens "
            "WHERE node = ANY(?) AND rule = ?",
            [list(by_row), CUT_RULE],
        ):
            n = by_row[row]
            if text_digest == digest(n.text):
                n.tokens[encoding] = (first, last, middle)
        return out

    def count_nodes(self, ids: Sequence[str], *, scope: Scope) -> int:
        """How many of ids are visible."""
        where, args = self._scope_sql(scope)
        row = (
            self.conn()
            .execute(
                f"SELECT count(*) FROM nodes n WHERE n.id = ANY(?) AND {where}", [list(ids), *args]
            )
            .fetchone()
        )
        return int(row[0])

    def edges(
        self,
        ids: Sequence[str],
        *,
        scope: Scope,
        direction: str = "out",
        edge_types: Sequence[str] | None = None,
    ) -> list[tuple[str, str, str]]:
        """Edges from (out), to (in) or around (both) ids whose far end is visible."""
        if not ids:
            return []
        where, args = self._scope_sql(scope)
        tsql = " AND e.edge_type = ANY(?)" if edge_types else ""
        targs = [list(edge_types)] if edge_types else []
        out: list[tuple[str, str, str]] = []
        db = self.conn()
        if direction in ("out", "both"):
            out += db.execute(
                "SELECT e.from_id, e.to_id, e.edge_type FROM edges e JOIN nodes n ON n.id ="
                f" e.to_id WHERE e.from_id = ANY(?){tsql} AND {where} ORDER BY"
                ' e.from_id COLLATE "C", e.edge_type COLLATE "C", e.to_id COLLATE "C"',
                [list(ids), *targs, *args],
            ).fetchall()
        if direction in ("in", "both"):
            out += db.execute(
                "SELECT e.from_id, e.to_id, e.edge_type FROM edges e JOIN nodes n ON n.id ="
                f" e.from_id WHERE e.to_id = ANY(?){tsql} AND {where} ORDER BY"
                ' e.to_id COLLATE "C", e.edge_type COLLATE "C", e.from_id COLLATE "C"',
                [list(ids), *targs, *args],
            ).fetchall()
        return [tuple(r) for r in out]  # type: ignore[misc]


class _Result:
    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


class _Dialect:
    """What the shared passes call `conn()`: sqlite3's execute over Postgres (`?` marks)."""

    def __init__(self, store: PostgresNodeStore) -> None:
        self.store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Result:
        text = sql.replace("%", "%%").replace("?", "%s")
        held = getattr(self.store._local, "held", None)
        if held is not None:
            return self._run(held, text, params)
        with self.store._conn() as conn:
            return self._run(conn, text, params)

    def _run(self, conn: Any, text: str, params: Sequence[Any]) -> _Result:
        import psycopg

        try:
            cur = conn.execute(text, tuple(params) or None)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise unavailable(
                self.store.path, RuntimeError(scrub(str(exc), self.store.url))
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(f"index {self.store.path}: {exc}", code="INDEX_ERROR") from exc
        rows = cur.fetchall() if cur.description is not None else []
        return _Result(
            [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]
        )


# --- FTS5 match expressions, as the shared passes write them ----------------------------

_parse = fts_expr.parse  # (the tree every reader of FTS5 expressions here shares)


# One term's postings, from node_terms' (term, node) key (its INCLUDE columns make it an
# index-only scan in node order, so a conjunction is a merge join of posting lists).
_POSTINGS = "SELECT node, name_tf, body_tf FROM node_terms WHERE term = ?"
# A candidate's node row, looked up by rowid: the planner cannot estimate the scope's
# conditions (it takes them for one row, and then joined every node to every posting);
# OFFSET 0 keeps this a lookup per candidate.
_NODE_BY_ROW = (
    "SELECT n.rowid, n.id, n.path, n.kind, n.name, n.length, n.language, n.label_set,"
    " n.labels, n.repository, n.snapshot FROM nodes n WHERE n.rowid = m.node OFFSET 0"
)


def _f(value: float) -> str:
    """A float as an exact float8 literal (repr round-trips)."""
    return f"'{value!r}'::float8"


class _Compiled:
    """A match expression over node_terms: one posting list per distinct term (p0, p1, ...),
    the condition a node's postings meet, and the phrases BM25 scores."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.phrases: list[tuple[list[str], str | None]] = []
        self.guards: list[list[str]] = []  # per phrase: the subexpressions holding it
        self.cond = "TRUE"
        self.conj = True  # every term required: inner (merge) joins instead of full joins

    def alias(self, term: str) -> str:
        """The posting list's alias for a term (one per distinct term)."""
        if term not in self.terms:
            self.terms.append(term)
        return f"p{self.terms.index(term)}"

    def present(self, term: str, column: str | None) -> str:
        """A node holds the term (in that column); two-valued, so NOT works on it."""
        p = self.alias(term)
        if column == "name":
            return f"coalesce({p}.name_tf, 0) > 0"
        if column == "body":
            return f"coalesce({p}.body_tf, 0) > 0"
        return f"{p}.node IS NOT NULL"

    def count(self, words: list[str], column: str | None) -> str:
        """A phrase's weighted count in a node: its rarest word's (the Python scorer's f)."""
        per: list[str] = []
        for word in words:
            p = self.alias(word)
            name = f"{_f(WEIGHTS[0])} * coalesce({p}.name_tf, 0)"
            body = f"{_f(WEIGHTS[1])} * coalesce({p}.body_tf, 0)"
            per.append(
                {
                    None: f"({name} + {body})",
                    "name": f"({name} + {_f(0.0)})",
                    "body": f"({_f(0.0)} + {body})",
                }.get(column, _f(0.0))
            )
        if not per:
            return _f(0.0)
        return per[0] if len(per) == 1 else f"LEAST({', '.join(per)})"

    def kept(self, i: int, count: str) -> str:
        """Phrase i's count where every subexpression holding it matches the row, else 0
        (in a conjunction every one does wherever the whole matches)."""
        guards = [] if self.conj or i >= len(self.guards) else self.guards[i]
        if not guards:
            return count
        return f"CASE WHEN {' AND '.join(guards)} THEN {count} ELSE {_f(0.0)} END"

    def candidates(self, node: int | None = None) -> tuple[str, list[Any]]:
        """SQL of the matching nodes (`node`) with each phrase's count (f0, f1, ...), and
        its arguments; node: that node alone."""
        lists = [f"({_POSTINGS}) p{i}" for i in range(len(self.terms))]
        if self.conj:
            joins = lists[0] + "".join(
                f" JOIN {p} ON p{i}.node = p0.node" for i, p in enumerate(lists[1:], 1)
            )
            key = "p0.node"
        else:
            joins = lists[0] + "".join(f" FULL JOIN {p} USING (node)" for p in lists[1:])
            key = "node"
        counts = "".join(
            f", {self.kept(i, self.count(words, col))} AS f{i}"
            for i, (words, col) in enumerate(self.phrases)
        )
        where = self.cond + (f" AND {key} = ?" if node is not None else "")
        args: list[Any] = [*self.terms, *([node] if node is not None else [])]
        return f"SELECT {key} AS node{counts} FROM {joins} WHERE {where}", args

    @classmethod
    def conjunction(cls, words: list[str], column: str | None) -> tuple[str, list[Any]]:
        """SQL of the nodes holding every word (in that column), and its arguments."""
        found = cls()
        found.cond = " AND ".join(found.present(w, column) for w in words)
        return found.candidates()


def _compile(tree: Any) -> _Compiled:
    """A parsed expression as posting lists, condition and phrases."""
    found = _Compiled()
    found.conj = _conjunctive(tree)
    found.cond = _condition(tree, found, found.phrases, None)
    for guards in found.guards:  # the whole expression matches every candidate
        if guards and guards[-1] == found.cond:
            guards.pop()
    return found


def _conjunctive(tree: Any) -> bool:
    """Whether every term of the tree is required (no OR, no NOT)."""
    kind = tree[0]
    if kind == "phrase":
        return True
    if kind == "col":
        return _conjunctive(tree[2])
    if kind == "and":
        return all(_conjunctive(c) for c in tree[1])
    return False


def _condition(tree: Any, found: _Compiled, phrases: list[Any], column: str | None) -> str:
    """The condition a node's postings meet for a tree; appends each phrase's terms to
    phrases (a NOT's right side is not scored) and, to its guards, the condition of every
    subexpression holding it: FTS5 clears the hits of a phrase under a subexpression that
    does not match the row (fts5ExprCheckPoslists), so `(a AND b) OR (a AND c)` counts a
    row's `a` once when only `a AND c` matches there."""
    kind = tree[0]
    start = len(phrases)
    if kind == "phrase":
        words = terms().query(tree[1])
        phrases.append((words, column))
        if phrases is found.phrases:
            found.guards.append([])
        if not words:
            return "FALSE"
        return "(" + " AND ".join(found.present(w, column) for w in dict.fromkeys(words)) + ")"
    if kind == "col":
        return _condition(tree[2], found, phrases, tree[1])
    if kind == "not":
        left = _condition(tree[1], found, phrases, column)
        right = _condition(tree[2], found, [], column)
        cond = f"({left} AND NOT {right})"
    else:
        children = [_condition(c, found, phrases, column) for c in tree[1]]
        if not children:
            return "FALSE"
        cond = "(" + f" {kind.upper()} ".join(children) + ")"
    if phrases is found.phrases:
        for i in range(start, len(phrases)):
            found.guards[i].append(cond)
    return cond
