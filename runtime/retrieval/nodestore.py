"""The node store: code and documents as nodes plus a typed dependency graph, in SQLite.

BM25 comes from FTS5. Identifiers are indexed in every spelling a person types:
`BasketService`, `basket_service` and `basket service` all reach the same node.
Every read takes a `Scope` (repository, snapshot, allowed labels) and never
returns, nor walks through, a node outside it. A node with labels is visible
only when every one of its labels is allowed; unlabelled nodes always are.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runtime.context.tokens import CUT_RULE, digest
from runtime.errors import StoreError, refuse_url
from runtime.retrieval.node import Node, Scope, label_set_token, meta_token, node_id
from runtime.retrieval.search import SearchPasses
from runtime.retrieval.words import index_terms

DEFAULT_PATH = ".runtime/index.db"


def meta_tokens(node: Node) -> str:
    """The tokens that let FTS5 itself apply scope and filters (exact, and fast)."""
    toks = [
        meta_token("r", node.repository),
        meta_token("s", node.snapshot),
        meta_token("k", node.kind),
        meta_token("g", node.language),
    ]
    toks += [meta_token("l", label) for label in node.labels]
    toks.append(label_set_token(json.dumps(sorted(node.labels))))
    return " ".join(toks)


# The token counts of a node's text: (encoding, the text's digest, first cut, last cut,
# tokens between the cuts) per encoding counted, under runtime.context.tokens.CUT_RULE
# (TokenCounter.parts).
TextCounts = tuple[tuple[str, str, int, int, int], ...]
# A node as written: the 13 columns of `nodes` (_COLS, metadata and labels as JSON), the
# FTS5 name, body and meta columns, then its text's counts. Plain tuples: the indexer's
# workers send them.
NodeRow = tuple[
    str, str, str, str, str, str, str, str, int, int, str, str, str, str, str, str, TextCounts
]


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


def node_row(n: Node, searchable: str | None = None, counters: Sequence[Any] = ()) -> NodeRow:
    """The encoded columns of a node (pure: the indexer computes them in its workers).

    searchable: the text to index instead of the node's text (a type without its
    members' bodies, which their own nodes index). counters: TokenCounters whose counts
    of the text are stored with it (so a run never encodes it again; see get_nodes).
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
        tuple((c.encoding_name, digest(n.text), *c.parts(n.text)) for c in counters),
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
    # A node text's token counts per encoding (TokenCounter.parts under the cut rule `rule`)
    # and the digest of the text counted. Added to layout 3 without a rebuild: an index
    # made before has none (the table is created empty on open), and its texts are counted
    # when a run needs them, as before.
    """CREATE TABLE IF NOT EXISTS node_tokens (node INTEGER NOT NULL, encoding TEXT NOT NULL,
        rule INTEGER NOT NULL, digest TEXT NOT NULL, first INTEGER NOT NULL,
        last INTEGER NOT NULL, middle INTEGER NOT NULL,
        PRIMARY KEY (node, encoding)) WITHOUT ROWID""",
    # Which repository names each indexed tree (an absolute path) was stored under, so
    # `runtime index PATH` without --repository reuses the name instead of storing a copy.
    """CREATE TABLE IF NOT EXISTS roots (root TEXT NOT NULL, repository TEXT NOT NULL,
        PRIMARY KEY (root, repository))""",
    # Each repository's root (an absolute path): label globs match paths relative to it,
    # whichever folder of it a run indexes (docs/retrieval.md, "Security labels"). Added to
    # layout 3 without a rebuild: a repository indexed before gets one at its next run.
    """CREATE TABLE IF NOT EXISTS repository_roots (repository TEXT PRIMARY KEY,
        root TEXT NOT NULL)""",
    # Each label set some node carries (its stored labels JSON) and the full-text token
    # naming it (label_set_token): the default rule becomes a match on the visible sets'
    # tokens (layout 4). Never pruned: a set no node holds any more matches nothing.
    """CREATE TABLE IF NOT EXISTS label_sets (token TEXT PRIMARY KEY, labels TEXT NOT NULL)
        WITHOUT ROWID""",
]


# The same weights as _BM25, for anyone querying the index with `ORDER BY rank`.
_RANK_CONFIG = "INSERT INTO nodes_fts (nodes_fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 0.0)')"


# The layout written by this version; an index in another layout is rebuilt by the indexer
# and refused by readers (INDEX_FORMAT). 2: edges WITHOUT ROWID, compressed extractions.
# 3: a name defined more than once keeps every definition (path-qualified ids, see
# node_id), doc headings in the extraction summaries, SameName edges. A layout-2 index
# holds collapsed nodes an incremental run would never restore, so it is rebuilt.
# 4: a token per label set in the full-text meta column and the `label_sets` table (issue
# 28: the default rule matches visible sets instead of excluding hidden labels, +87% ->
# about +5% on BM25 at 50k nodes); a layout-3 index is migrated in place (_migrate_3).
INDEX_FORMAT = 4


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


class SqliteNodeStore(SearchPasses):
    """The embedded default store (one SQLite file)."""

    def __init__(self, path: str, *, create: bool = False) -> None:
        refuse_url(path, "index")
        self.path = path
        if not create and not Path(path).is_file():
            raise StoreError(f"no index at {path}", code="INDEX_NOT_FOUND")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self.rebuilt = False  # True when an index in an older layout was dropped (create=True)
        with self.conn() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
            migrate = bool(tables) and create and version == 3
            if tables and version != INDEX_FORMAT and not migrate:
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
            if migrate:
                with db:
                    self._migrate_3(db)
                    db.execute("INSERT INTO nodes_fts (nodes_fts) VALUES ('optimize')")
                    db.execute(f"PRAGMA user_version = {INDEX_FORMAT}")
            if self.rebuilt or not tables:  # written once, not by every reader that opens it
                db.execute(_RANK_CONFIG)
                db.execute(f"PRAGMA user_version = {INDEX_FORMAT}")

    @staticmethod
    def _migrate_3(db: sqlite3.Connection) -> None:
        """Layout 3 -> 4 in place: each node's label-set token and the set table (one
        UPDATE per distinct set; the nodes, edges and vectors stay as they are)."""
        for (labels,) in db.execute("SELECT DISTINCT labels FROM nodes").fetchall():
            token = label_set_token(labels)
            db.execute("INSERT OR IGNORE INTO label_sets VALUES (?, ?)", (token, labels))
            db.execute(
                "UPDATE nodes_fts SET meta = meta || ' ' || ? "
                "WHERE rowid IN (SELECT rowid FROM nodes WHERE labels = ?)",
                (token, labels),
            )

    @staticmethod
    def _label_sets(db: sqlite3.Connection, rows: Sequence[NodeRow]) -> None:
        """Record the label sets of rows being written (see the `label_sets` table)."""
        db.executemany(
            "INSERT OR IGNORE INTO label_sets VALUES (?, ?)",
            [(label_set_token(labels), labels) for labels in sorted({r[12] for r in rows})],
        )

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
        """Group many writes in one transaction (committed at the end, rolled back on error);
        a batch inside a batch joins it (the indexer's git history runs inside its run's)."""
        db = self.conn()
        if getattr(self._local, "batch", False):
            yield
            return
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
        encode_extraction); known=False: the file has no nodes yet (skips their deletion).

        Ids must be unique: an id held by another node (of this file or another) is an
        INDEX_ERROR, never a silent replacement (the indexer names duplicate definitions
        by their path, see node_id).
        """
        ids = [row[0] for row in rows]
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            raise StoreError(
                f"{path}: two nodes have the id {twice[0]}; every node needs its own id",
                code="INDEX_ERROR",
            )
        with self._write() as db:
            if known:
                self._delete_file(db, repository, snapshot, path)
            # Row ids assigned here let each table take the whole file in one executemany.
            base = (db.execute("SELECT max(rowid) FROM nodes").fetchone()[0] or 0) + 1
            try:
                db.executemany(
                    f"INSERT INTO nodes (rowid, {_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [(base + i, *r[:13]) for i, r in enumerate(rows)],
                )
            except sqlite3.IntegrityError as exc:
                raise self._taken(db, ids, path, exc) from exc
            labels = [
                (base + i, label)
                for i, r in enumerate(rows)
                if r[12] != "[]"
                for label in json.loads(r[12])
            ]
            if labels:
                db.executemany("INSERT INTO node_labels VALUES (?, ?)", labels)
            self._label_sets(db, rows)
            db.executemany(
                "INSERT INTO nodes_fts (rowid, name, body, meta) VALUES (?, ?, ?, ?)",
                [(base + i, *r[13:16]) for i, r in enumerate(rows)],
            )
            counts = [(base + i, *c, CUT_RULE) for i, r in enumerate(rows) for c in r[16]]
            if counts:
                db.executemany(
                    "INSERT INTO node_tokens (node, encoding, digest, first, last, middle, rule) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    counts,
                )
            db.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                (repository, snapshot, path, file_hash, extraction),
            )
        return len(rows)

    @staticmethod
    def _taken(db: sqlite3.Connection, ids: Sequence[str], path: str, exc: Exception) -> StoreError:
        """The INDEX_ERROR for ids of which one is already held by another node."""
        for nid in ids:
            row = db.execute("SELECT path FROM nodes WHERE id = ?", (nid,)).fetchone()
            if row:
                return StoreError(
                    f"{path}: the node id {nid} is already held by a node of {row[0]}",
                    code="INDEX_ERROR",
                )
        return StoreError(f"{path}: cannot store its nodes: {exc}", code="INDEX_ERROR")

    def optimize(self) -> None:
        """Merge the full-text index's segments into one (the indexer, after writing).

        A match is joined with the visible label sets' tokens (the default rule); over the
        dozens of segments a bulk index leaves, each join seeks through every one of them:
        +10-19% on BM25 p50 at 50k nodes against +3-4% once merged (0.2 s to merge).
        """
        with self._write() as db:
            db.execute("INSERT INTO nodes_fts (nodes_fts) VALUES ('optimize')")

    def rename_nodes(self, renames: Sequence[tuple[str, str]]) -> None:
        """Give nodes new ids ((old, new) pairs; an old id no node holds is skipped).

        Rows of every other table hang off the row id, so only `nodes` changes; edges are
        the caller's to replace (the indexer resolves them again after renaming).
        """
        if not renames:
            return
        with self._write() as db:
            for old, new in renames:
                try:
                    db.execute("UPDATE nodes SET id = ? WHERE id = ?", (new, old))
                except sqlite3.IntegrityError as exc:
                    raise self._taken(db, [new], f"renaming {old}", exc) from exc

    def delete_nodes(
        self, repository: str, snapshot: str, paths: Sequence[str]
    ) -> set[tuple[str, str]]:
        """Remove the nodes of files (their file rows stay); the (kind, qualified name)
        of every node removed."""
        keys: set[tuple[str, str]] = set()
        with self._write() as db:
            for path in paths:
                keys |= self._delete_file(db, repository, snapshot, path)
        return keys

    @staticmethod
    def _delete_rowids(db: sqlite3.Connection, rowids: Sequence[int]) -> None:
        """Remove nodes with everything that hangs off them (full-text row first)."""
        if not rowids:
            return
        keys = [(r,) for r in rowids]
        db.executemany("DELETE FROM nodes_fts WHERE rowid = ?", keys)
        db.executemany("DELETE FROM node_labels WHERE node = ?", keys)
        db.executemany("DELETE FROM vectors WHERE node = ?", keys)
        db.executemany("DELETE FROM node_tokens WHERE node = ?", keys)
        db.executemany("DELETE FROM nodes WHERE rowid = ?", keys)

    def _delete_file(
        self, db: sqlite3.Connection, repository: str, snapshot: str, path: str
    ) -> set[tuple[str, str]]:
        """Remove a file's nodes; the (kind, qualified name) of each."""
        rows = db.execute(
            "SELECT rowid, kind, qualified_name FROM nodes "
            "WHERE repository = ? AND snapshot = ? AND path = ?",
            (repository, snapshot, path),
        ).fetchall()
        self._delete_rowids(db, [r[0] for r in rows])
        return {(r[1], r[2]) for r in rows}

    def delete_file(self, repository: str, snapshot: str, path: str) -> set[tuple[str, str]]:
        """Remove a file's nodes and its file row (the file was deleted); the (kind,
        qualified name) of every node removed."""
        with self._write() as db:
            keys = self._delete_file(db, repository, snapshot, path)
            db.execute(
                "DELETE FROM files WHERE repository = ? AND snapshot = ? AND path = ?",
                (repository, snapshot, path),
            )
        return keys

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

    # --- nodes outside any file (git commits: runtime/retrieval/git_history.py) ------
    def kind_nodes(self, repository: str, snapshot: str, kind: str) -> dict[str, str]:
        """qualified name -> metadata JSON of a snapshot's nodes of one kind."""
        rows = self.conn().execute(
            "SELECT qualified_name, metadata FROM nodes WHERE repository = ? AND snapshot = ? "
            "AND kind = ?",
            (repository, snapshot, kind),
        )
        return dict(rows.fetchall())

    def put_loose_rows(self, rows: Sequence[NodeRow]) -> int:
        """Write nodes that belong to no file (no file row: a re-index of the files never
        deletes them); their ids must be free."""
        if not rows:
            return 0
        with self._write() as db:
            base = (db.execute("SELECT max(rowid) FROM nodes").fetchone()[0] or 0) + 1
            try:
                db.executemany(
                    f"INSERT INTO nodes (rowid, {_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    [(base + i, *r[:13]) for i, r in enumerate(rows)],
                )
            except sqlite3.IntegrityError as exc:
                raise self._taken(db, [r[0] for r in rows], "git history", exc) from exc
            labels = [
                (base + i, label)
                for i, r in enumerate(rows)
                if r[12] != "[]"
                for label in json.loads(r[12])
            ]
            db.executemany("INSERT INTO node_labels VALUES (?, ?)", labels)
            self._label_sets(db, rows)
            db.executemany(
                "INSERT INTO nodes_fts (rowid, name, body, meta) VALUES (?, ?, ?, ?)",
                [(base + i, *r[13:16]) for i, r in enumerate(rows)],
            )
        return len(rows)

    def delete_kind_nodes(
        self, repository: str, snapshot: str, kind: str, qualified_names: Iterable[str]
    ) -> None:
        """Remove a snapshot's nodes of one kind by qualified name."""
        names = list(qualified_names)
        with self._write() as db:
            rowids = []
            for start in range(0, len(names), 500):
                chunk = names[start : start + 500]
                rowids += [
                    r[0]
                    for r in db.execute(
                        "SELECT rowid FROM nodes WHERE repository = ? AND snapshot = ? AND "
                        f"kind = ? AND qualified_name IN ({','.join('?' * len(chunk))})",
                        (repository, snapshot, kind, *chunk),
                    )
                ]
            self._delete_rowids(db, rowids)

    def path_nodes(
        self, repository: str, snapshot: str, skip_kinds: Iterable[str]
    ) -> dict[str, list[str]]:
        """path -> ids of the snapshot's nodes in that file, without the kinds skipped."""
        skip = sorted(skip_kinds)
        rows = self.conn().execute(
            "SELECT path, id FROM nodes WHERE repository = ? AND snapshot = ? AND path != '' "
            f"AND kind NOT IN ({','.join('?' * len(skip))}) ORDER BY path, id",
            (repository, snapshot, *skip),
        )
        out: dict[str, list[str]] = {}
        for path, nid in rows:
            out.setdefault(path, []).append(nid)
        return out

    def typed_edges(
        self, repository: str, snapshot: str, edge_type: str
    ) -> list[tuple[str, str, str]]:
        """The snapshot's edges of one type."""
        where, args = _snapshot_edges(repository, snapshot)
        return [
            (f, t, e)
            for f, t, e in self.conn().execute(
                f"SELECT from_id, to_id, edge_type FROM edges WHERE {where} AND edge_type = ?",
                (*args, edge_type),
            )
        ]

    def replace_typed_edges(
        self, repository: str, snapshot: str, edge_type: str, edges: Iterable[tuple[str, str]]
    ) -> int:
        """Make the snapshot's edges of one type exactly these (from, to) pairs."""
        new = {(f, t, edge_type) for f, t in edges}
        old = set(self.typed_edges(repository, snapshot, edge_type))
        with self._write() as db:
            db.executemany(
                "DELETE FROM edges WHERE from_id = ? AND to_id = ? AND edge_type = ?",
                sorted(old - new),
            )
            db.executemany(
                "INSERT OR IGNORE INTO edges VALUES (?, ?, ?, ?, ?)",
                [(f, t, e, repository, snapshot) for f, t, e in sorted(new - old)],
            )
        return len(new)

    def root_repositories(self, root: str) -> list[str]:
        """The repository names a tree (its absolute path) was indexed under, sorted."""
        rows = self.conn().execute(
            "SELECT repository FROM roots WHERE root = ? ORDER BY repository", (root,)
        )
        return [r[0] for r in rows]

    def record_root(self, root: str, repository: str) -> None:
        """Remember that the tree at root (an absolute path) is indexed as repository."""
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO roots VALUES (?, ?)", (root, repository))

    def repository_root(self, repository: str) -> str | None:
        """The root recorded for a repository (the folder its label globs match from)."""
        row = (
            self.conn()
            .execute("SELECT root FROM repository_roots WHERE repository = ?", (repository,))
            .fetchone()
        )
        return None if row is None else str(row[0])

    def record_repository_root(self, repository: str, root: str) -> None:
        """Record (or, given on purpose, change) a repository's root."""
        if self.repository_root(repository) == root:
            return  # no write when it stands
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO repository_roots VALUES (?, ?)", (repository, root))

    def labelled_nodes(self, repository: str, snapshot: str) -> int:
        """How many nodes of a repository snapshot carry labels."""
        return int(
            self.conn()
            .execute(
                "SELECT count(*) FROM nodes WHERE repository = ? AND snapshot = ?"
                " AND labels != '[]'",
                (repository, snapshot),
            )
            .fetchone()[0]
        )

    def edge_count(self, repository: str, snapshot: str) -> int:
        """Edges of a repository snapshot."""
        where, args = _snapshot_edges(repository, snapshot)
        return int(
            self.conn().execute(f"SELECT count(*) FROM edges WHERE {where}", args).fetchone()[0]
        )

    def nodes_without_vectors(
        self, repository: str, snapshot: str, model: str
    ) -> list[tuple[str, str, str, str, str]]:
        """(id, kind, name, qualified name, doc comment) of the snapshot's nodes that have no
        vector of this model, in id order."""
        rows = (
            self.conn()
            .execute(
                "SELECT n.id, n.kind, n.name, n.qualified_name, n.metadata FROM nodes n "
                "LEFT JOIN vectors v ON v.node = n.rowid AND v.model = ? "
                "WHERE n.repository = ? AND n.snapshot = ? AND v.node IS NULL ORDER BY n.id",
                (model, repository, snapshot),
            )
            .fetchall()
        )
        return [(i, k, n, q, str(json.loads(m).get("doc") or "")) for i, k, n, q, m in rows]

    def missing_vectors(self, repository: str, snapshot: str) -> dict[str, int]:
        """vector model -> nodes of the snapshot without a vector of it, for every model some
        node of the snapshot has a vector of (empty: none has a vector)."""
        rows = (
            self.conn()
            .execute(
                "SELECT v.model, count(*) FROM nodes n LEFT JOIN vectors v ON v.node = n.rowid "
                "WHERE n.repository = ? AND n.snapshot = ? GROUP BY v.model ORDER BY v.model",
                (repository, snapshot),
            )
            .fetchall()
        )
        total = sum(n for _, n in rows)
        # A node has at most one vector (the table's key), so the others lack this model's.
        return {model: total - n for model, n in rows if model and total > n}

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

    def get_nodes(self, ids: Sequence[str], *, scope: Scope) -> dict[str, Node]:
        """The visible nodes among ids."""
        if not ids:
            return {}
        where, args = self._scope_sql(scope)
        out: dict[str, Node] = {}
        by_row: dict[int, Node] = {}
        db = self.conn()
        columns = ", ".join("n." + c.strip() for c in _COLS.split(","))
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            # CROSS JOIN: each id looked up by its unique index, then the scope checked on
            # that row (with `id IN (...)` the planner took the scope's repository index and
            # read the repository's every node: 20 ms at 50k nodes for 32 ids).
            rows = db.execute(
                f"SELECT n.rowid, {columns} FROM (SELECT DISTINCT value AS id FROM"
                f" json_each(?)) i CROSS JOIN nodes n ON n.id = i.id WHERE {where}",
                [json.dumps(chunk), *args],
            )
            for r in rows:
                by_row[r[0]] = out[r[1]] = _row_node(r[1:])
        keys = list(by_row)
        digests: dict[int, str] = {}
        for start in range(0, len(keys), 500):  # the texts' counts made under today's cut rule
            rowids = keys[start : start + 500]
            for row, encoding, text_digest, first, last, middle in db.execute(
                "SELECT node, encoding, digest, first, last, middle FROM node_tokens "
                f"WHERE node IN ({','.join('?' * len(rowids))}) AND rule = ?",
                [*rowids, CUT_RULE],
            ):
                n = by_row[row]
                if row not in digests:
                    digests[row] = digest(n.text)
                if text_digest == digests[row]:  # counts of another text are never handed on
                    n.tokens[encoding] = (first, last, middle)
        return out

    def file_resources(self, path: str) -> list[tuple[str, str, str, str, str, list[str]]]:
        """(id, repository, snapshot, kind, path, labels) of the nodes indexed from a file
        (an absolute path under a recorded repository root); never their text."""
        db = self.conn()
        out: list[tuple[str, str, str, str, str, list[str]]] = []
        for repository, root in db.execute("SELECT repository, root FROM repository_roots"):
            prefix = root.rstrip("/") + "/"
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            for nid, snap, kind, npath, labels in db.execute(
                "SELECT id, snapshot, kind, path, labels FROM nodes "
                "WHERE repository = ? AND path = ?",
                (repository, rel),
            ):
                try:
                    parsed = json.loads(labels)
                except ValueError:
                    parsed = None
                # Labels that do not read as a list hide the node: shown as unreadable.
                if not isinstance(parsed, list):
                    parsed = ["(unreadable labels)"]
                out.append((nid, repository, snap, kind, npath, [str(x) for x in parsed]))
        return out

    def index_labels(self) -> frozenset[str]:
        """Every label some node of the index carries (cached with the statistics)."""
        return self._stats().labels

    def count_nodes(self, ids: Sequence[str], *, scope: Scope) -> int:
        """How many of ids the scope may see (counted in SQL: no row is read out)."""
        where, args = self._scope_sql(scope)
        total = 0
        db = self.conn()
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), 500):
            chunk = unique[start : start + 500]
            total += db.execute(  # each id by its index first, as get_nodes
                "SELECT count(*) FROM (SELECT value AS id FROM json_each(?)) i"
                f" CROSS JOIN nodes n ON n.id = i.id WHERE {where}",
                [json.dumps(chunk), *args],
            ).fetchone()[0]
        return int(total)

    def count_edges(
        self,
        ids: Sequence[str],
        *,
        scope: Scope,
        direction: str = "out",
        edge_types: Sequence[str] | None = None,
    ) -> int:
        """How many edges `edges` would return under scope (counted in SQL)."""
        if not ids:
            return 0
        where, args = self._scope_sql(scope)
        marks = ",".join("?" * len(ids))
        tsql = f" AND e.edge_type IN ({','.join('?' * len(edge_types))})" if edge_types else ""
        targs = list(edge_types or [])
        total = 0
        db = self.conn()
        for near, far in (("from_id", "to_id"), ("to_id", "from_id")):
            if (near == "from_id" and direction == "in") or (
                near == "to_id" and direction == "out"
            ):
                continue
            total += db.execute(
                f"SELECT count(*) FROM edges e CROSS JOIN nodes n ON n.id = e.{far} "
                f"WHERE e.{near} IN ({marks}){tsql} AND {where}",
                [*ids, *targs, *args],
            ).fetchone()[0]
        return int(total)

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
                f"SELECT e.from_id, e.to_id, e.edge_type FROM edges e CROSS JOIN nodes n ON n.id = e.to_id "
                f"WHERE e.from_id IN ({marks}){tsql} AND {where} ORDER BY e.from_id, e.edge_type, e.to_id",
                [*ids, *targs, *args],
            ).fetchall()
        if direction in ("in", "both"):
            out += db.execute(
                f"SELECT e.from_id, e.to_id, e.edge_type FROM edges e CROSS JOIN nodes n ON n.id = e.from_id "
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
