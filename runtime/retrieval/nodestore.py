"""The node store: code and documents as nodes plus a typed dependency graph, in SQLite.

BM25 comes from FTS5. Identifiers are indexed in every spelling a person types:
`BasketService`, `basket_service` and `basket service` all reach the same node.
Every read takes a `Scope` (repository, snapshot, allowed labels) and never
returns, nor walks through, a node outside it. A node with labels is visible
only when every one of its labels is allowed; unlabelled nodes always are.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import re
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import StoreError

DEFAULT_PATH = ".runtime/index.db"
# Nodes the any-word pass ranks at most (see SqliteNodeStore._selective_any).
ANY_PASS_POSTINGS = 4000
# BM25 column weights: names count four times the body; the meta column (scope and filter
# tokens, see meta_tokens) not at all. Passed to bm25() directly: ~30% faster than `rank`.
_BM25 = "bm25(nodes_fts, 4.0, 1.0, 0.0)"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "this",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "me",
        "show",
        "tell",
        "find",
        "explain",
        "about",
        "into",
        "there",
        "their",
        "they",
        "them",
        "get",
        "gets",
        "have",
        "has",
        "had",
        "was",
        "were",
        "been",
        "being",
    ]
)


def split_identifier(word: str) -> list[str]:
    """`BasketService` / `basket_service` -> ['basket', 'service']."""
    return list(_split(word))


@functools.lru_cache(maxsize=65536)
def _split(word: str) -> tuple[str, ...]:
    parts: list[str] = []
    for chunk in word.split("_"):
        parts += [p.lower() for p in _CAMEL.findall(chunk)]
    return tuple(p for p in parts if p)


_ASCII_WORD = re.compile(r"\w+", re.A)
# Every word split so far, and the split forms of those with several parts: set operations
# (in C) then leave only unseen words to Python. Bounded for long-lived processes.
_SEEN: set[str] = set()
_MULTI: dict[str, tuple[str, str]] = {}


def index_terms(text: str) -> str:
    """Extra searchable text: identifiers split into words and joined into one word."""
    words = set(_ASCII_WORD.findall(text))
    if len(_SEEN) > 200_000:
        _SEEN.clear()
        _MULTI.clear()
    for word in words - _SEEN:
        # Leading digits are a number, not part of the identifier (as _WORD reads them).
        parts = _split(word.lstrip("0123456789"))
        if len(parts) > 1:
            _MULTI[word] = (" ".join(parts), "".join(parts))
        _SEEN.add(word)
    out = [term for word in words & _MULTI.keys() for term in _MULTI[word]]
    out.sort()
    return " ".join(out)


# Words in a question that name a kind of node ("which stored procedure ...").
KIND_WORDS = {
    "procedure": "procedure",
    "procedures": "procedure",
    "proc": "procedure",
    "sproc": "procedure",
    "table": "table",
    "tables": "table",
    "view": "view",
    "views": "view",
    "trigger": "trigger",
    "triggers": "trigger",
    "function": "function",
    "class": "class",
    "classes": "class",
    "interface": "interface",
    "method": "method",
    "methods": "method",
    "controller": "class",
    "endpoint": "method",
    "migration": "class",
    "functions": "function",
    "interfaces": "interface",
    "index": "index",
    "indexes": "index",
    "indices": "index",
    "sequence": "sequence",
    "sequences": "sequence",
    "enum": "enum",
    "enums": "enum",
    "enumeration": "enum",
    "property": "property",
    "properties": "property",
    "constructor": "constructor",
    "constructors": "constructor",
}


_SQL_KIND_WORDS = frozenset(
    w
    for w, kind in KIND_WORDS.items()
    if kind in ("procedure", "table", "view", "trigger", "function", "index", "sequence")
)


def kinds_in(query: str) -> list[str]:
    """Node kinds a question names, in order."""
    return list(
        dict.fromkeys(
            KIND_WORDS[w] for w in re.findall(r"[a-z]+", query.lower()) if w in KIND_WORDS
        )
    )


def named_words(query: str) -> list[str]:
    """Words a question writes as names: `Orders` mid-sentence, `BasketService`, `usp_X`.

    A capital at the start of the question is grammar, not a name.
    """
    out: list[str] = []
    for i, m in enumerate(_WORD.finditer(query)):
        word = m.group(0)
        if (
            "_" in word.strip("_")
            or any(c.isupper() for c in word[1:])
            or (word[0].isupper() and i > 0 and word.lower() not in STOPWORDS)
        ):
            out.append(word)
    return list(dict.fromkeys(out))


_KIND_WORD = re.compile(r"\b(?:" + "|".join(KIND_WORDS) + r")\b", re.I)


def without_kind_words(query: str) -> str:
    """The query without the words naming a node kind ("which stored procedure" -> "which stored")."""
    return _KIND_WORD.sub(" ", query)


def query_terms(query: str) -> tuple[list[str], list[str]]:
    """(word terms, joined-adjacent-word terms) as FTS5 expressions; stop words dropped."""
    terms: list[str] = []
    words: list[str] = []
    for word in _WORD.findall(query):
        parts = split_identifier(word)
        # One letter alone is a fragment ("customer's" -> "s"), not a word to search for.
        if not parts or (len(parts) == 1 and (parts[0] in STOPWORDS or len(parts[0]) == 1)):
            words.append("")
            continue
        if len(parts) == 1:
            terms.append(f'"{parts[0]}"')
            words.append(parts[0])
        else:
            joined = "".join(parts)
            terms.append(
                f'("{joined}" OR ({" AND ".join(f"{chr(34)}{p}{chr(34)}" for p in parts)}))'
            )
            words.append("")
    # "stored procedure" names a kind of SQL object, not the CommandType.StoredProcedure
    # that every data-access call mentions: words naming SQL kinds are not joined.
    pairs = [
        f'"{a}{b}"'
        for a, b in itertools.pairwise(words)
        if a and b and not {a, b} & _SQL_KIND_WORDS
    ]
    return list(dict.fromkeys(terms)), list(dict.fromkeys(pairs))


def fts_query(query: str, mode: str = "any") -> str:
    """An FTS5 MATCH expression: `any` word (or joined pair), `all` words, or `joined` pairs only.

    Each word matches in every identifier spelling; adjacent plain words are also tried
    joined (`basket service` -> `basketservice`), so a query typed as words finds the
    identifier it names.
    """
    terms, pairs = query_terms(query)
    if mode == "joined":
        return " OR ".join(pairs)
    if mode == "all":
        return " AND ".join(terms)
    return " OR ".join(terms + pairs)


def _tok(prefix: str, value: str) -> str:
    """A hidden FTS token for an attribute value (hex keeps any value one token)."""
    return f"zz{prefix}{value.encode().hex()}"


def meta_tokens(node: Node) -> str:
    """The tokens that let FTS5 itself apply scope and filters (exact, and fast)."""
    toks = [
        _tok("r", node.repository),
        _tok("s", node.snapshot),
        _tok("k", node.kind),
        _tok("g", node.language),
    ]
    toks += [_tok("l", label) for label in node.labels]
    return " ".join(toks)


# A node as written: the 13 columns of `nodes` (_COLS, metadata and labels as JSON), then
# the FTS5 name, body and meta columns. Plain tuples: the indexer's workers send them.
NodeRow = tuple[str, str, str, str, str, str, str, str, int, int, str, str, str, str, str, str]


def _described(metadata: dict[str, Any]) -> str:
    """Words for what a SQL object's metadata says: its columns, keys and parameters.

    A question asks for "the columns of the Orders table"; a CREATE TABLE never says
    "column".
    """
    out = []
    columns = metadata.get("columns")
    if isinstance(columns, list) and columns:
        names = [str(c.get("name", "")) for c in columns if isinstance(c, dict)]
        out.append("columns " + " ".join(names))
    if metadata.get("primary_key"):
        out.append("primary key " + " ".join(map(str, metadata["primary_key"])))
    for fk in metadata.get("foreign_keys") or []:
        if isinstance(fk, dict):
            cols = " ".join(map(str, fk.get("columns", [])))
            out.append(f"foreign key {cols} references {fk.get('references', '')}")
    params = metadata.get("parameters")
    if isinstance(params, list) and params:
        names = [str(p.get("name", "")).lstrip("@") for p in params if isinstance(p, dict)]
        out.append("parameters " + " ".join(names))
    return ("\n" + "\n".join(out)) if out else ""


def node_row(n: Node, searchable: str | None = None) -> NodeRow:
    """The encoded columns of a node (pure: the indexer computes them in its workers).

    searchable: the text to index instead of the node's text (a type without its
    members' bodies, which their own nodes index).
    """
    head = " ".join(str(n.metadata.get(k, "")) for k in ("doc", "signature", "heading"))
    head += _described(n.metadata)
    # The kind and names go in the weighted column; doc line and signature (which sit
    # outside a member's text) go with the body.
    names = (
        f"{n.kind} {n.name} {n.qualified_name} {n.path} "
        f"{index_terms(n.qualified_name + ' ' + n.path)}"
    )
    text = n.text if searchable is None else searchable
    body = f"{head}\n{text}\n{index_terms(head + ' ' + text)}"
    return (
        n.id,
        n.repository,
        n.snapshot,
        n.kind,
        n.name,
        n.qualified_name,
        n.path,
        n.language,
        n.start_line,
        n.end_line,
        n.text,
        json.dumps(n.metadata),
        json.dumps(sorted(n.labels)),
        names,
        body,
        meta_tokens(n),
    )


def encode_extraction(summary: Any) -> bytes:
    """A file's extraction summary as stored: compact JSON, zlib level 1 (about 5x smaller)."""
    return zlib.compress(json.dumps(summary, separators=(",", ":")).encode(), 1)


def decode_extraction(blob: bytes) -> Any:
    """The summary encode_extraction stored."""
    return json.loads(zlib.decompress(blob))


def _snapshot_edges(repository: str, snapshot: str) -> tuple[str, tuple[str, ...]]:
    """WHERE clause and arguments selecting a snapshot's edges by a range of their key.

    Every edge leaves a node whose id starts `repository::snapshot::`; the columns are
    compared too, for exactness.
    """
    prefix = node_id(repository, snapshot, "", "")[:-2]
    return (
        "from_id >= ? AND from_id < ? AND repository = ? AND snapshot = ?",
        (prefix, prefix[:-1] + ";", repository, snapshot),
    )


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
    return "(" + " OR ".join(f"meta:{_tok(prefix, v)}" for v in values) + ")"


@dataclass
class _Stats:
    """Cached index statistics (see SqliteNodeStore._stats)."""

    version: int
    nodes: int
    repositories: frozenset[str]
    snapshots: frozenset[str]
    labels: frozenset[str]
    doc_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # (count, cap)


@dataclass(frozen=True)
class Scope:
    """What a caller may see: a repository, a snapshot and allowed security labels."""

    repository: str | None = None
    snapshot: str | None = None
    allowed_labels: tuple[str, ...] | None = None  # None: only unlabelled nodes are visible


@dataclass
class Node:
    """One indexed node."""

    id: str
    repository: str
    snapshot: str
    kind: str
    name: str
    qualified_name: str
    path: str
    language: str
    start_line: int = 0
    end_line: int = 0
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


def node_id(repository: str, snapshot: str, kind: str, qualified_name: str) -> str:
    """The stable, readable id `<repository>::<snapshot>::<kind>::<qualified name>`."""
    return f"{repository}::{snapshot}::{kind}::{qualified_name}"


class NodeStore(Protocol):
    """What actions and the indexer need (a server-backed store implements the same)."""

    def search(
        self,
        query: str,
        *,
        scope: Scope,
        top_k: int,
        search_type: str = "bm25",
        filters: dict[str, Any] | None = None,
        rrf_k: int = 60,
    ) -> list[dict[str, Any]]:
        """Ranked hits `{id, score, rank, path, kind, name}`."""

    def get_nodes(self, ids: Sequence[str], *, scope: Scope) -> dict[str, Node]:
        """The visible nodes among ids."""

    def edges(
        self,
        ids: Sequence[str],
        *,
        scope: Scope,
        direction: str = "out",
        edge_types: Sequence[str] | None = None,
    ) -> list[tuple[str, str, str]]:
        """(from, to, type) edges touching ids whose other end is visible."""


_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS nodes (
        rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, repository TEXT NOT NULL,
        snapshot TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, qualified_name TEXT NOT NULL,
        path TEXT NOT NULL, language TEXT NOT NULL, start_line INT, end_line INT, text TEXT NOT NULL,
        metadata TEXT NOT NULL, labels TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS nodes_path ON nodes (repository, snapshot, path)",
    # The named search pass looks names up case-insensitively (built on open if missing).
    "CREATE INDEX IF NOT EXISTS nodes_name ON nodes (name COLLATE NOCASE)",
    "CREATE TABLE IF NOT EXISTS node_labels (node INTEGER NOT NULL, label TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS node_labels_node ON node_labels (node)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS nodes_fts USING fts5(
        name, body, meta, tokenize = 'porter unicode61 remove_diacritics 2')""",
    # WITHOUT ROWID: the table is its key index (the ids are long; storing them twice
    # made edges a quarter of the file).
    """CREATE TABLE IF NOT EXISTS edges (from_id TEXT NOT NULL, to_id TEXT NOT NULL,
        edge_type TEXT NOT NULL, repository TEXT NOT NULL, snapshot TEXT NOT NULL,
        PRIMARY KEY (from_id, to_id, edge_type)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS edges_to ON edges (to_id)",
    """CREATE TABLE IF NOT EXISTS files (repository TEXT NOT NULL, snapshot TEXT NOT NULL,
        path TEXT NOT NULL, hash TEXT NOT NULL, extraction BLOB NOT NULL,
        PRIMARY KEY (repository, snapshot, path))""",
    "CREATE TABLE IF NOT EXISTS vectors (node INTEGER PRIMARY KEY, model TEXT NOT NULL, vector BLOB NOT NULL)",
]
# The same weights as _BM25, for anyone querying the index with `ORDER BY rank`.
_RANK_CONFIG = "INSERT INTO nodes_fts (nodes_fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 0.0)')"
# The layout written by this version; an index in another layout is rebuilt by the indexer
# and refused by readers (INDEX_FORMAT). 2: edges WITHOUT ROWID, compressed extractions.
INDEX_FORMAT = 2
_COLS = (
    "id, repository, snapshot, kind, name, qualified_name, path, language, start_line, "
    "end_line, text, metadata, labels"
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
        row[10],
        metadata=json.loads(row[11]),
        labels=json.loads(row[12]),
    )


class SqliteNodeStore:
    """The embedded default store (one SQLite file)."""

    def __init__(self, path: str, *, create: bool = False) -> None:
        self.path = path
        if not create and not Path(path).is_file():
            raise StoreError(f"no index at {path}", code="INDEX_NOT_FOUND")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self.rebuilt = False  # True when an index in an older layout was dropped (create=True)
        with self.conn() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
            if tables and version != INDEX_FORMAT:
                if not create:
                    raise StoreError(
                        f"index {path} has layout {version}, this version reads layout "
                        f"{INDEX_FORMAT}; run `runtime index` again to rebuild it",
                        code="INDEX_FORMAT",
                    )
                self._drop_all(db)
                self.rebuilt = True
            for statement in _SCHEMA:
                db.execute(statement)  # IF NOT EXISTS: no write when the index is current
            if self.rebuilt or not tables:  # written once, not by every reader that opens it
                db.execute(_RANK_CONFIG)
                db.execute(f"PRAGMA user_version = {INDEX_FORMAT}")

    @staticmethod
    def _drop_all(db: sqlite3.Connection) -> None:
        """Remove every table and index (an index is derived data: the sources rebuild it)."""
        names = db.execute(
            "SELECT type, name FROM sqlite_schema WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'nodes_fts_%'"
        ).fetchall()
        for kind, name in names:
            db.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')

    def conn(self) -> sqlite3.Connection:
        """This thread's connection."""
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise StoreError(
                    f"cannot open index {self.path}: {exc}", code="INDEX_ERROR"
                ) from exc
            self._local.db = db
        return db

    # --- writing (the indexer) ---------------------------------------------------
    def file_hashes(self, repository: str, snapshot: str) -> dict[str, str]:
        """path -> content hash of the files indexed for a repository snapshot."""
        rows = self.conn().execute(
            "SELECT path, hash FROM files WHERE repository = ? AND snapshot = ?",
            (repository, snapshot),
        )
        return dict(rows.fetchall())

    def extractions(
        self, repository: str, snapshot: str, paths: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """path -> the stored extraction summary (for cross-file resolution); all, or paths."""
        db = self.conn()
        sql = "SELECT path, extraction FROM files WHERE repository = ? AND snapshot = ?"
        if paths is None:
            return {p: decode_extraction(e) for p, e in db.execute(sql, (repository, snapshot))}
        out: dict[str, Any] = {}
        for start in range(0, len(paths), 500):
            chunk = list(paths[start : start + 500])
            rows = db.execute(
                f"{sql} AND path IN ({','.join('?' * len(chunk))})", (repository, snapshot, *chunk)
            )
            out.update({p: decode_extraction(e) for p, e in rows})
        return out

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group many writes in one transaction (committed at the end, rolled back on error)."""
        db = self.conn()
        self._local.batch = True
        try:
            yield
            db.commit()
        except BaseException:
            db.rollback()
            raise
        finally:
            self._local.batch = False

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self.conn()
        self._local.stats = None  # this connection's own writes do not bump data_version
        try:
            if getattr(self._local, "batch", False):
                yield db
            else:
                with db:
                    yield db
        finally:
            self._local.stats = None

    def replace_file(
        self,
        repository: str,
        snapshot: str,
        path: str,
        file_hash: str,
        nodes: Sequence[Node],
        extraction: Any,
    ) -> int:
        """Replace every node of one file; returns the number written."""
        rows = [node_row(n) for n in nodes]
        return self.replace_file_rows(
            repository, snapshot, path, file_hash, rows, encode_extraction(extraction)
        )

    def replace_file_rows(
        self,
        repository: str,
        snapshot: str,
        path: str,
        file_hash: str,
        rows: Sequence[NodeRow],
        extraction: bytes,
        *,
        known: bool = True,
    ) -> int:
        """Replace every node of one file with encoded rows and extraction (see node_row,
        encode_extraction); known=False: the file has no nodes yet (skips their deletion)."""
        unique = list({row[0]: row for row in rows}.values())  # a later declaration wins
        with self._write() as db:
            if known:
                self._delete_file(db, repository, snapshot, path)
            # An id may belong to a node of another file (a partial class): it goes, whole,
            # so no full-text row outlives its node.
            clash: list[int] = []
            for start in range(0, len(unique), 500):
                ids = [r[0] for r in unique[start : start + 500]]
                clash += [
                    r[0]
                    for r in db.execute(
                        f"SELECT rowid FROM nodes WHERE id IN ({','.join('?' * len(ids))})", ids
                    )
                ]
            self._delete_rowids(db, clash)
            # Row ids assigned here let each table take the whole file in one executemany.
            base = (db.execute("SELECT max(rowid) FROM nodes").fetchone()[0] or 0) + 1
            db.executemany(
                f"INSERT INTO nodes (rowid, {_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [(base + i, *r[:13]) for i, r in enumerate(unique)],
            )
            labels = [
                (base + i, label)
                for i, r in enumerate(unique)
                if r[12] != "[]"
                for label in json.loads(r[12])
            ]
            if labels:
                db.executemany("INSERT INTO node_labels VALUES (?, ?)", labels)
            db.executemany(
                "INSERT INTO nodes_fts (rowid, name, body, meta) VALUES (?, ?, ?, ?)",
                [(base + i, *r[13:]) for i, r in enumerate(unique)],
            )
            db.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                (repository, snapshot, path, file_hash, extraction),
            )
        return len(unique)

    @staticmethod
    def _delete_rowids(db: sqlite3.Connection, rowids: Sequence[int]) -> None:
        """Remove nodes with everything that hangs off them (full-text row first)."""
        if not rowids:
            return
        keys = [(r,) for r in rowids]
        db.executemany("DELETE FROM nodes_fts WHERE rowid = ?", keys)
        db.executemany("DELETE FROM node_labels WHERE node = ?", keys)
        db.executemany("DELETE FROM vectors WHERE node = ?", keys)
        db.executemany("DELETE FROM nodes WHERE rowid = ?", keys)

    def _delete_file(
        self, db: sqlite3.Connection, repository: str, snapshot: str, path: str
    ) -> None:
        rowids = [
            r[0]
            for r in db.execute(
                "SELECT rowid FROM nodes WHERE repository = ? AND snapshot = ? AND path = ?",
                (repository, snapshot, path),
            )
        ]
        self._delete_rowids(db, rowids)

    def delete_file(self, repository: str, snapshot: str, path: str) -> None:
        """Remove a file's nodes (the file was deleted)."""
        with self._write() as db:
            self._delete_file(db, repository, snapshot, path)
            db.execute(
                "DELETE FROM files WHERE repository = ? AND snapshot = ? AND path = ?",
                (repository, snapshot, path),
            )

    def replace_edges(
        self, repository: str, snapshot: str, edges: Iterable[tuple[str, str, str]]
    ) -> int:
        """Make the edges of a repository snapshot exactly these; returns their number.

        Only the difference is written, so re-indexing a few files rewrites a few edges.
        """
        new = {(f, t, e) for f, t, e in edges}
        with self._write() as db:
            where, args = _snapshot_edges(repository, snapshot)
            old = set(
                db.execute(f"SELECT from_id, to_id, edge_type FROM edges WHERE {where}", args)
            )
            db.executemany(
                "DELETE FROM edges WHERE from_id = ? AND to_id = ? AND edge_type = ?",
                sorted(old - new),
            )
            # Sorted: B-tree inserts in key order touch each page once.
            db.executemany(
                "INSERT OR IGNORE INTO edges VALUES (?, ?, ?, ?, ?)",
                [(f, t, e, repository, snapshot) for f, t, e in sorted(new - old)],
            )
        return len(new)

    def edge_count(self, repository: str, snapshot: str) -> int:
        """Edges of a repository snapshot."""
        where, args = _snapshot_edges(repository, snapshot)
        return int(
            self.conn().execute(f"SELECT count(*) FROM edges WHERE {where}", args).fetchone()[0]
        )

    def put_vectors(self, model: str, vectors: dict[str, bytes]) -> None:
        """Store embedding vectors (float32 bytes) by node id."""
        with self._write() as db:
            for nid, blob in vectors.items():
                db.execute(
                    "INSERT OR REPLACE INTO vectors SELECT rowid, ?, ? FROM nodes WHERE id = ?",
                    (model, blob, nid),
                )

    def counts(self) -> dict[str, int]:
        """Nodes, edges and files in the index."""
        db = self.conn()
        return {
            t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("nodes", "edges", "files")
        }

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
        """
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

    def get_nodes(self, ids: Sequence[str], *, scope: Scope) -> dict[str, Node]:
        """The visible nodes among ids."""
        if not ids:
            return {}
        where, args = self._scope_sql(scope)
        out: dict[str, Node] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            rows = self.conn().execute(
                f"SELECT {', '.join('n.' + c.strip() for c in _COLS.split(','))} FROM nodes n "
                f"WHERE n.id IN ({','.join('?' * len(chunk))}) AND {where}",
                [*chunk, *args],
            )
            out.update({r[0]: _row_node(r) for r in rows})
        return out

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
        marks = ",".join("?" * len(ids))
        tsql = f" AND e.edge_type IN ({','.join('?' * len(edge_types))})" if edge_types else ""
        targs = list(edge_types or [])
        out: list[tuple[str, str, str]] = []
        db = self.conn()
        if direction in ("out", "both"):
            out += db.execute(
                f"SELECT e.from_id, e.to_id, e.edge_type FROM edges e JOIN nodes n ON n.id = e.to_id "
                f"WHERE e.from_id IN ({marks}){tsql} AND {where} ORDER BY e.from_id, e.edge_type, e.to_id",
                [*ids, *targs, *args],
            ).fetchall()
        if direction in ("in", "both"):
            out += db.execute(
                f"SELECT e.from_id, e.to_id, e.edge_type FROM edges e JOIN nodes n ON n.id = e.from_id "
                f"WHERE e.to_id IN ({marks}){tsql} AND {where} ORDER BY e.to_id, e.edge_type, e.from_id",
                [*ids, *targs, *args],
            ).fetchall()
        return [tuple(r) for r in out]  # type: ignore[misc]


def default_path() -> str:
    """`$RUNTIME_INDEX`, else .runtime/index.db under the working directory."""
    return os.environ.get("RUNTIME_INDEX") or DEFAULT_PATH


def open_store(path: str | None = None, *, create: bool = False) -> SqliteNodeStore:
    """Open the node index (create=True for the indexer)."""
    return SqliteNodeStore(path or default_path(), create=create)
