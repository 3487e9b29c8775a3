"""The index half of `runtime store copy FROM TO --what index` (issue 34).

Copies a node index SQLite -> Postgres or Postgres -> SQLite in one target transaction:
nodes (with their full-text columns, label rows, label sets and, on Postgres, the terms
FTS5's tokenizer makes of them), edges, token counts, vectors, file rows and roots. Every
table is then read back from both sides in a canonical form (nodes by id, what hangs off a
node by the node's id, text in byte order) and compared by row count and SHA-256 before
the commit: a difference is STORE_COPY_MISMATCH naming the table, and nothing is kept.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from runtime.engine.storecopy import CopyReport, TableCheck, _canonical, refuse_mismatch
from runtime.errors import StoreError
from runtime.net import pgtext
from runtime.retrieval.node import label_set_token

BATCH = 2000

# table -> (SQLite query, Postgres query) giving its canonical rows in the same order.
_NODE_COLS = (
    "n.id, n.repository, n.snapshot, n.kind, n.name, n.qualified_name, n.path, n.language,"
    " n.start_line, n.end_line, n.text, n.metadata, n.labels"
)
VIEWS: dict[str, tuple[str, str]] = {
    "nodes": (
        f"SELECT {_NODE_COLS}, f.name, f.body, f.meta FROM nodes n"
        " JOIN nodes_fts f ON f.rowid = n.rowid ORDER BY n.id",
        f'SELECT {_NODE_COLS}, n.fts_name, n.fts_body, n.fts_meta FROM nodes n ORDER BY n.id COLLATE "C"',
    ),
    "edges": (
        "SELECT from_id, to_id, edge_type, repository, snapshot FROM edges"
        " ORDER BY from_id, to_id, edge_type",
        "SELECT from_id, to_id, edge_type, repository, snapshot FROM edges"
        ' ORDER BY from_id COLLATE "C", to_id COLLATE "C", edge_type COLLATE "C"',
    ),
    "node_tokens": (
        "SELECT n.id, t.encoding, t.rule, t.digest, t.first, t.last, t.middle FROM node_tokens t"
        " JOIN nodes n ON n.rowid = t.node ORDER BY n.id, t.encoding",
        "SELECT n.id, t.encoding, t.rule, t.digest, t.first, t.last, t.middle FROM node_tokens t"
        ' JOIN nodes n ON n.rowid = t.node ORDER BY n.id COLLATE "C", t.encoding COLLATE "C"',
    ),
    "vectors": (
        "SELECT n.id, v.model, v.vector FROM vectors v JOIN nodes n ON n.rowid = v.node"
        " ORDER BY n.id",
        'SELECT n.id, v.model, v.vector FROM vectors v JOIN nodes n ON n.rowid = v.node ORDER BY n.id COLLATE "C"',
    ),
    "files": (
        "SELECT repository, snapshot, path, hash, extraction FROM files"
        " ORDER BY repository, snapshot, path",
        "SELECT repository, snapshot, path, hash, extraction FROM files"
        ' ORDER BY repository COLLATE "C", snapshot COLLATE "C", path COLLATE "C"',
    ),
    "label_sets": (
        "SELECT token, labels FROM label_sets ORDER BY token",
        'SELECT token, labels FROM label_sets ORDER BY token COLLATE "C"',
    ),
    "roots": (
        "SELECT root, repository FROM roots ORDER BY root, repository",
        'SELECT root, repository FROM roots ORDER BY root COLLATE "C", repository COLLATE "C"',
    ),
    "repository_roots": (
        "SELECT repository, root FROM repository_roots ORDER BY repository",
        'SELECT repository, root FROM repository_roots ORDER BY repository COLLATE "C"',
    ),
}

# A test's hook: a function (table, row) -> row applied to what is written (a damaged copy).
_damage: Callable[[str, tuple[Any, ...]], tuple[Any, ...]] | None = None


class _Side:
    """One end of an index copy: a SQLite file or a Postgres database, in one transaction."""

    def __init__(self, location: str, create: bool) -> None:
        from runtime.retrieval.indexes import is_url, open_index

        store = open_index(location, create=create)  # the schema, current
        self.where = str(store.path)
        self.postgres = is_url(location)
        if self.postgres:
            import psycopg

            store.close()
            self.conn: Any = psycopg.connect(location)
            pgtext.install(self.conn)  # NUL characters round-trip (runtime/net/pgtext.py)
        else:
            self.conn = sqlite3.connect(location, isolation_level=None)
            self.conn.execute("BEGIN IMMEDIATE")

    def rows(self, sql: str) -> Iterator[tuple[Any, ...]]:
        cur = self.conn.cursor()
        cur.execute(sql)
        while True:
            batch = cur.fetchmany(BATCH)
            if not batch:
                return
            for row in batch:
                yield tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)

    def view(self, table: str) -> str:
        return VIEWS[table][1 if self.postgres else 0]

    def digest(self, table: str) -> tuple[int, str]:
        h = hashlib.sha256()
        n = 0
        for row in self.rows(self.view(table)):
            h.update(_canonical(row))
            n += 1
        return n, h.hexdigest()

    def count(self, table: str) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        if self.postgres:
            self.conn.cursor().executemany(sql.replace("?", "%s"), rows)
        else:
            self.conn.executemany(sql, rows)

    def commit(self) -> None:
        self.conn.commit() if self.postgres else self.conn.execute("COMMIT")

    def close(self) -> None:
        if self.postgres:
            self.conn.rollback()
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        self.conn.close()


def _damaged(table: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [_damage(table, r) for r in rows] if _damage is not None else rows


def _write_nodes(src: _Side, dst: _Side) -> None:
    """Nodes with their row ids, full-text columns, labels, terms (Postgres) and sets."""
    from runtime.retrieval.pgindex import terms

    if src.postgres:
        sql = (
            f"SELECT n.rowid, {_NODE_COLS}, n.fts_name, n.fts_body, n.fts_meta FROM nodes n"
            " ORDER BY n.rowid"
        )
    else:
        sql = (
            f"SELECT n.rowid, {_NODE_COLS}, f.name, f.body, f.meta FROM nodes n"
            " JOIN nodes_fts f ON f.rowid = n.rowid ORDER BY n.rowid"
        )
    batch: list[tuple[Any, ...]] = []

    def flush() -> None:
        rows = _damaged("nodes", batch)
        if dst.postgres:
            made = terms().rows([(r[14], r[15], r[16]) for r in rows])
            with dst.conn.cursor().copy(
                "COPY nodes (rowid, id, repository, snapshot, kind, name, qualified_name, path,"
                " language, start_line, end_line, text, metadata, labels, fts_name, fts_body,"
                " fts_meta, label_set, length) FROM STDIN"
            ) as copy:
                for r, (_, length) in zip(rows, made, strict=True):
                    copy.write_row((*r, label_set_token(r[13]), length))
            with dst.conn.cursor().copy(
                "COPY node_terms (term, node, name_tf, body_tf) FROM STDIN"
            ) as copy:
                for r, (found, _) in zip(rows, made, strict=True):
                    for term, (name_tf, body_tf) in found.items():
                        copy.write_row((term, r[0], name_tf, body_tf))
        else:
            dst.many(
                f"INSERT INTO nodes (rowid, {_NODE_COLS.replace('n.', '')}) VALUES"
                f" ({','.join('?' * 14)})",
                [r[:14] for r in rows],
            )
            dst.many(
                "INSERT INTO node_labels VALUES (?, ?)",
                [(r[0], label) for r in rows if r[13] != "[]" for label in json.loads(r[13])],
            )
            dst.many(
                "INSERT INTO nodes_fts (rowid, name, body, meta) VALUES (?, ?, ?, ?)",
                [(r[0], r[14], r[15], r[16]) for r in rows],
            )
        batch.clear()

    for row in src.rows(sql):
        batch.append(row)
        if len(batch) >= BATCH:
            flush()
    flush()


_PLAIN = {
    "edges": ("SELECT from_id, to_id, edge_type, repository, snapshot FROM edges", 5),
    "node_tokens": ("SELECT node, encoding, rule, digest, first, last, middle FROM node_tokens", 7),
    "vectors": ("SELECT node, model, vector FROM vectors", 3),
    "files": ("SELECT repository, snapshot, path, hash, extraction FROM files", 5),
    "label_sets": ("SELECT token, labels FROM label_sets", 2),
    "roots": ("SELECT root, repository FROM roots", 2),
    "repository_roots": ("SELECT repository, root FROM repository_roots", 2),
}


def copy_index(source: str, target: str) -> CopyReport:
    """Copy a node index into an empty one (SQLite <-> Postgres); verified, else refused."""
    from runtime.engine.storecopy import _driver_errors

    errors = _driver_errors()
    try:
        src = _Side(source, create=False)
    except errors as exc:
        raise StoreError(f"store copy: {source}: {exc}") from exc
    try:
        dst = _Side(target, create=True)
    except BaseException:
        src.close()
        raise
    report = CopyReport(src.where, dst.where)
    try:
        if dst.count("nodes") or dst.count("files"):
            raise StoreError(
                f"store copy: {dst.where} already holds an index; copy into an empty one",
                code="STORE_COPY_TARGET_NOT_EMPTY",
            )
        _write_nodes(src, dst)
        for table, (sql, width) in _PLAIN.items():
            rows: list[tuple[Any, ...]] = []
            cols = sql.split("SELECT ", 1)[1].split(" FROM")[0]
            insert = f"INSERT INTO {table} ({cols}) VALUES ({','.join('?' * width)})"
            for row in src.rows(sql):
                rows.append(row)
                if len(rows) >= BATCH:
                    dst.many(insert, _damaged(table, rows))
                    rows = []
            dst.many(insert, _damaged(table, rows))
        if dst.postgres:  # readers' cached statistics are of the index before
            dst.conn.execute(
                "UPDATE index_meta SET value = (value::bigint + 1)::text WHERE key = 'version'"
            )
        for table in VIEWS:
            rows_n, digest = src.digest(table)
            target_rows, target_digest = dst.digest(table)
            report.tables.append(TableCheck(table, rows_n, digest, target_rows, target_digest))
        refuse_mismatch(report, dst.where)
        dst.commit()
    except errors as exc:
        raise StoreError(f"store copy: {dst.where}: {exc}; nothing was copied") from exc
    finally:
        src.close()
        dst.close()
    return report
