"""The SQLite memory store: memories, experiences and values in one file (MemoryStore).

BM25 comes from FTS5 over the same identifier spellings as the node index
(runtime/retrieval/words.py), so `PlaceOrder`, `place_order` and `place order` reach the
same memory. With an embedder (the embeddings extra, or one passed in code) items are
embedded on write and searches fuse BM25 and cosine ranks, as hybrid node search does.

Every filter is applied in the query: expiry, scope (repository, snapshot, session), and
labels (an item is visible only when every one of its labels is allowed). BM25's
statistics count only the items the caller's labels admit: FTS5's `bm25()` when the
caller may see every item, else FTS5's formula over the admitted ones
(runtime/retrieval/memory_fts.py, as the Postgres store ranks). Every row
keeps the SHA-256 of its record; a returned row whose columns or record do not match it
is MEMORY_STORE_ERROR, never an answer: a damaged file gives an error, not a wrong item.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from runtime.errors import RunError, StoreError, refuse_url
from runtime.retrieval.memory_common import (  # noqa: F401 (names other modules import here)
    FORMAT,
    LAYOUT,
    MIN_POOL,
    POOL_FACTOR,
    RRF_K,
    _body,
    _decay,
    _experience_columns,
    _fused,
    _memory_columns,
    _now,
    _recalled,
    _scrubbed,
    _value_columns,
    installed_embedder,
)
from runtime.retrieval.memory_items import (
    axis_texts,
    digest,
    experience_record,
    experience_text,
    memory_record,
)
from runtime.retrieval.memory_store import (
    AXES,
    EXPERIENCE_FILTERS,
    SCOPE_KEYS,
    EmptyMemoryStore,
    Recalled,
)
from runtime.retrieval.node import scope_value_problem
from runtime.retrieval.query import fts_query

DEFAULT_FILE = "memories.db"

_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS memory_store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS memories (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,
        type TEXT NOT NULL, created REAL NOT NULL, expires REAL, half_life REAL,
        repository TEXT, snapshot TEXT, session TEXT, labels TEXT NOT NULL,
        record TEXT NOT NULL, digest TEXT NOT NULL)""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(body,
        tokenize = 'porter unicode61 remove_diacritics 2')""",
    """CREATE TABLE IF NOT EXISTS experiences (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,
        domain TEXT NOT NULL, strategy TEXT NOT NULL, outcome TEXT NOT NULL, pipeline TEXT,
        confidence_tier TEXT NOT NULL, run_id TEXT, created REAL NOT NULL,
        labels TEXT NOT NULL, record TEXT NOT NULL, digest TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS experiences_run ON experiences (run_id)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS experiences_fts USING fts5(full, strategy, surprise,
        root_cause, tokenize = 'porter unicode61 remove_diacritics 2')""",
    """CREATE TABLE IF NOT EXISTS value_items (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL,
        axis TEXT NOT NULL, labels TEXT NOT NULL, record TEXT NOT NULL, digest TEXT NOT NULL)""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS values_fts USING fts5(body,
        tokenize = 'porter unicode61 remove_diacritics 2')""",
    """CREATE TABLE IF NOT EXISTS item_vectors (kind TEXT NOT NULL, item INTEGER NOT NULL,
        model TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (kind, item)) WITHOUT ROWID""",
]

# kind -> (table, full-text table)
_TABLES = {
    "memory": ("memories", "memories_fts"),
    "experience": ("experiences", "experiences_fts"),
    "value": ("value_items", "values_fts"),
}


_COLUMNS: dict[str, tuple[str, Callable[[Mapping[str, Any]], tuple[Any, ...]]]] = {
    "memory": (
        "id, type, created, expires, half_life, repository, snapshot, session, labels",
        _memory_columns,
    ),
    "experience": (
        "id, domain, strategy, outcome, pipeline, confidence_tier, run_id, created, labels",
        _experience_columns,
    ),
    "value": ("id, axis, labels", _value_columns),
}


def _labels_sql(labels: frozenset[str] | None, alias: str) -> tuple[str, list[Any]]:
    """Every label of the row allowed (None allows none: only `labels: []` rows)."""
    if not labels:
        return f"json_array_length({alias}.labels) = 0", []
    for label in labels:
        problem = scope_value_problem(label)
        if problem:
            raise RunError(f"allowed label {problem}", code="SCOPE_INVALID")
    ordered = sorted(labels)
    marks = ",".join("?" * len(ordered))
    return (
        f"NOT EXISTS (SELECT 1 FROM json_each({alias}.labels) j WHERE j.value NOT IN ({marks}))",
        ordered,
    )


class SqliteMemoryStore:
    """Memories, experiences and values in one SQLite file (the embedded MemoryStore)."""

    def __init__(self, path: str, *, create: bool = False, embedder: Any = None) -> None:
        refuse_url(path, "memory store")
        self.path = path
        self._embedder = embedder
        if not create and not Path(path).is_file():
            raise StoreError(f"no memory store at {path}", code="MEMORY_STORE_ERROR")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._writes = 0  # moved by every write through this store (cached statistics)
        with self._guard("open"):
            db = self.conn()
            tables = {
                r[0]
                for r in db.execute(
                    "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE "
                    "'sqlite_%'"
                )
            }
            if tables and "memory_store_info" not in tables:
                raise StoreError(
                    f"{path} is a SQLite database of another kind, not a memory store",
                    code="MEMORY_STORE_ERROR",
                )
            if tables:
                info = dict(db.execute("SELECT key, value FROM memory_store_info"))
                if info.get("format") != FORMAT or info.get("layout") != str(LAYOUT):
                    raise StoreError(
                        f"{path} is not a memory store of layout {LAYOUT} (it says "
                        f"{str(info.get('format'))[:40]!r} layout {str(info.get('layout'))[:10]})",
                        code="MEMORY_STORE_ERROR",
                    )
            elif create:
                with db:
                    for statement in _SCHEMA:
                        db.execute(statement)
                    db.executemany(
                        "INSERT INTO memory_store_info VALUES (?, ?)",
                        [("format", FORMAT), ("layout", str(LAYOUT))],
                    )
            else:
                raise StoreError(
                    f"{path} is an empty file, not a memory store", code="MEMORY_STORE_ERROR"
                )

    # --- plumbing ----------------------------------------------------------------
    @property
    def embedder(self) -> Any:
        """The embedder (None: BM25 only); "auto" is resolved on first use."""
        if self._embedder == "auto":
            self._embedder = installed_embedder()
        return self._embedder

    def conn(self) -> sqlite3.Connection:
        """This thread's connection."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.create_function("mem_decay", 3, _decay, deterministic=True)
            db.create_function("mem_doclen", 1, _doclen, deterministic=True)
            self._local.db = db
        return db

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes in one transaction: all are stored, or none (rolled back on error)."""
        db = self.conn()
        self._local.tx = True
        try:
            yield
            with self._guard("commit"):
                db.commit()
        except BaseException:
            db.rollback()
            raise
        finally:
            self._local.tx = False

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """The connection to write with: committed at the end unless a transaction is open."""
        db = self.conn()
        if getattr(self._local, "tx", False):
            yield db
        else:
            with db:
                yield db

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """SQLite's errors (a damaged or locked file) as MEMORY_STORE_ERROR."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(
                f"memory store {self.path}: cannot {doing}: {exc}", code="MEMORY_STORE_ERROR"
            ) from exc

    def _checked(self, kind: str, row: Sequence[Any]) -> dict[str, Any]:
        """The record of a fetched row (columns, record JSON, digest), verified whole."""
        names, derive = _COLUMNS[kind]
        width = len(names.split(","))
        columns, record_json, stored = row[:width], row[width], row[width + 1]
        try:
            record = json.loads(record_json)
            ok = (
                isinstance(record, dict)
                and digest(record) == stored
                and tuple(derive(record)) == tuple(columns)
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            ok = False
        if not ok:
            raise StoreError(
                f"memory store {self.path}: a {kind} row does not match its checksum "
                "(the file is damaged)",
                code="MEMORY_STORE_ERROR",
            )
        return record

    # --- writing -----------------------------------------------------------------
    def remember(
        self,
        items: Iterable[Any],
        *,
        now: datetime | None = None,
        scrub: Any = None,
        where: str = "",
    ) -> list[str]:
        """Validate and store memories (all or none); their ids. scrub: a Scrubber whose
        secrets are replaced in every field before anything is stored."""
        moment = _now(now)
        records = []
        for i, item in enumerate(items):
            record = memory_record(item, now=moment, where=f"{where}memory {i + 1}")
            records.append(_scrubbed(record, scrub, "text"))
        self._write("memory", records, lambda r: _body(r["text"]), lambda r: r["text"])
        return [r["id"] for r in records]

    def record_experiences(
        self,
        items: Iterable[Any],
        *,
        now: datetime | None = None,
        scrub: Any = None,
        where: str = "",
    ) -> list[str]:
        """Validate and store experiences (all or none); their ids."""
        moment = _now(now)
        records = []
        for i, item in enumerate(items):
            record = experience_record(item, now=moment, where=f"{where}experience {i + 1}")
            records.append(_scrubbed(record, scrub, None))
        self._write(
            "experience",
            records,
            lambda r: tuple(_body(t) for t in axis_texts(r).values()),
            lambda r: experience_text(r),
        )
        return [r["id"] for r in records]

    def replace_values(self, records: Sequence[Mapping[str, Any]]) -> int:
        """Make the stored values exactly these (what `runtime values rebuild` computed)."""
        with self.transaction():
            with self._guard("write values"), self._writing() as db:
                self._delete_all(db, "value")
            self._write("value", list(records), lambda r: _body(r["text"]), lambda r: r["text"])
        return len(records)

    def _delete_all(self, db: sqlite3.Connection, kind: str) -> None:
        self._writes += 1
        table, fts = _TABLES[kind]
        db.execute(f"DELETE FROM {fts}")
        db.execute("DELETE FROM item_vectors WHERE kind = ?", (kind,))
        db.execute(f"DELETE FROM {table}")

    def _write(
        self,
        kind: str,
        records: Sequence[Mapping[str, Any]],
        body: Callable[[Mapping[str, Any]], str | tuple[str, ...]],
        embed_text: Callable[[Mapping[str, Any]], str],
        given: Mapping[str, tuple[str, bytes]] | None = None,
    ) -> None:
        """Insert or replace records (by id) with their full-text rows and vectors (given:
        each id's (model, blob) as stored elsewhere, instead of embedding again)."""
        if not records:
            return
        ids = [r["id"] for r in records]
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})[0]
            raise RunError(f"two {kind} items have the id {twice!r}", code="MEMORY_INVALID")
        vectors: list[tuple[str, bytes] | None] = [None] * len(records)
        if given is not None:
            vectors = [given.get(r["id"]) for r in records]
        elif self.embedder is not None:
            from runtime.retrieval.embeddings import to_blob

            name = self.embedder.name
            embedded = self.embedder.embed([embed_text(r) for r in records])
            vectors = [(name, to_blob(v)) for v in embedded]
        table, fts = _TABLES[kind]
        names, derive = _COLUMNS[kind]
        width = len(names.split(","))
        self._writes += 1
        with self._guard(f"write {kind} items"), self._writing() as db:
            for i, record in enumerate(records):
                old = db.execute(f"SELECT rowid FROM {table} WHERE id = ?", (record["id"],))
                for (rowid,) in old.fetchall():
                    db.execute(f"DELETE FROM {fts} WHERE rowid = ?", (rowid,))
                    db.execute(
                        "DELETE FROM item_vectors WHERE kind = ? AND item = ?", (kind, rowid)
                    )
                    db.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
                cur = db.execute(
                    f"INSERT INTO {table} ({names}, record, digest) "
                    f"VALUES ({','.join('?' * (width + 2))})",
                    (*derive(record), json.dumps(record, ensure_ascii=False), digest(record)),
                )
                rowid = cur.lastrowid
                parts = body(record)
                parts = (parts,) if isinstance(parts, str) else parts
                db.execute(
                    f"INSERT INTO {fts} (rowid, {', '.join(_fts_columns(kind))}) "
                    f"VALUES (?, {','.join('?' * len(parts))})",
                    (rowid, *parts),
                )
                vector = vectors[i]
                if vector is not None:
                    db.execute(
                        "INSERT INTO item_vectors VALUES (?, ?, ?, ?)",
                        (kind, rowid, vector[0], vector[1]),
                    )

    def put_records(
        self,
        kind: str,
        records: Sequence[Mapping[str, Any]],
        vectors: Mapping[str, tuple[str, bytes]] | None = None,
    ) -> None:
        """Store records as they are (already validated: a copy's), with their vectors by
        id (model, blob) instead of embedding them again."""
        texts = _WRITE_TEXTS[kind]
        self._write(kind, records, texts[0], texts[1], given=vectors or {})

    def dump(self, kind: str) -> list[tuple[int, dict[str, Any], tuple[str, bytes] | None]]:
        """Every item of a kind in row order: (row number, verified record, its vector)."""
        table = _TABLES[kind][0]
        cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS[kind][0].split(","))
        with self._guard(f"read {kind} items"):
            rows = (
                self.conn()
                .execute(
                    f"SELECT m.rowid, v.model, v.vector, {cols}, m.record, m.digest FROM {table} m"
                    " LEFT JOIN item_vectors v ON v.kind = ? AND v.item = m.rowid ORDER BY m.rowid",
                    (kind,),
                )
                .fetchall()
            )
        return [
            (int(r[0]), self._checked(kind, r[3:]), (r[1], bytes(r[2])) if r[1] else None)
            for r in rows
        ]

    def terms(self, kind: str) -> list[tuple[str, str, int, int]]:
        """Every item's full-text terms: (id, term, column, hits), sorted (a copy's check)."""
        from runtime.retrieval.memory_fts import stored_term

        table, fts = _TABLES[kind]
        columns = _fts_columns(kind)
        with self._guard(f"read {kind} terms"):
            db = self.conn()
            vocab = self._vocab(db, fts)
            rows = db.execute(
                f"SELECT m.id, v.term, v.col, count(*) FROM {vocab} v JOIN {table} m"
                " ON m.rowid = v.doc GROUP BY m.id, v.term, v.col"
            ).fetchall()
        out: dict[tuple[str, str, int], int] = {}
        for item, term, col, n in rows:
            key = (str(item), stored_term(term), columns.index(col))
            out[key] = out.get(key, 0) + int(n)
        return sorted((*k, v) for k, v in out.items())

    def set_tier(self, key: str, tier: str, *, note: str | None = None) -> str:
        """Set the confidence tier (and note) of the experience with this id or run id;
        its id, or EXPERIENCE_NOT_FOUND."""
        with self._guard("read experiences"):
            row = (
                self.conn()
                .execute(
                    f"SELECT {_COLUMNS['experience'][0]}, record, digest FROM experiences "
                    "WHERE id = ? OR run_id = ? ORDER BY id LIMIT 1",
                    (key, key),
                )
                .fetchone()
            )
        if row is None:
            raise RunError(
                f"no experience has the id or run id {key[:80]!r}", code="EXPERIENCE_NOT_FOUND"
            )
        record = self._checked("experience", row)
        record["confidence_tier"] = tier
        if note is not None:
            record["note"] = note
        self.record_experiences([record], now=datetime.fromisoformat(record["created_at"]))
        return str(record["id"])

    # --- reading -----------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Memories, experiences and values stored."""
        with self._guard("count items"):
            db = self.conn()
            return {
                kind: db.execute(f"SELECT count(*) FROM {_TABLES[kind][0]}").fetchone()[0]
                for kind in _TABLES
            }

    def all_experiences(self) -> list[dict[str, Any]]:
        """Every experience record (verified), in id order (for `runtime values rebuild`)."""
        with self._guard("read experiences"):
            rows = self.conn().execute(
                f"SELECT {_COLUMNS['experience'][0]}, record, digest FROM experiences ORDER BY id"
            )
            return [self._checked("experience", r) for r in rows.fetchall()]

    def search_memories(
        self,
        query: str,
        *,
        limit: int,
        scope: Mapping[str, str] | None = None,
        labels: frozenset[str] | None = None,
        now: datetime | None = None,
    ) -> list[Recalled]:
        """Memories for query, best first: unexpired, in scope, every label allowed;
        BM25 (fused with vectors when there are) times the decay of each item's age."""
        at = _now(now).timestamp()
        where, args = _labels_sql(labels, "m")
        where += " AND (m.expires IS NULL OR m.expires > ?)"
        args.append(at)
        for key, value in (scope or {}).items():
            if key not in SCOPE_KEYS:
                raise RunError(
                    f"a memory scope has repository, snapshot and session, not {str(key)[:40]!r}",
                    code="SCOPE_INVALID",
                )
            if value is None:
                continue
            problem = scope_value_problem(value)
            if problem:
                raise RunError(f"scope {key} {problem}", code="SCOPE_INVALID")
            where += f" AND (m.{key} IS NULL OR m.{key} = ?)"
            args.append(value)
        decay = "mem_decay(m.created, m.half_life, ?)"
        return self._search(
            "memory",
            query,
            limit,
            where,
            args,
            decay=decay,
            decay_args=[at],
            column=None,
            labels=labels,
        )

    def search_experiences(
        self,
        query: str,
        *,
        axis: str = "full",
        limit: int,
        filters: Mapping[str, str] | None = None,
        labels: frozenset[str] | None = None,
    ) -> list[Recalled]:
        """Experiences for query on one axis, best first, matching every filter."""
        if axis not in AXES:
            raise RunError(
                f"unknown experience axis {str(axis)[:40]!r} (use {', '.join(AXES)})",
                code="MEMORY_AXIS_UNKNOWN",
            )
        where, args = _labels_sql(labels, "m")
        for key, value in (filters or {}).items():
            if key not in EXPERIENCE_FILTERS:
                raise RunError(
                    f"unknown experience filter {str(key)[:40]!r} "
                    f"(use {', '.join(EXPERIENCE_FILTERS)})",
                    code="MEMORY_AXIS_UNKNOWN",
                )
            if value is None:
                continue
            values = [value] if isinstance(value, str) else list(value)
            where += f" AND m.{key} IN ({','.join('?' * len(values))})"
            args += values
        return self._search("experience", query, limit, where, args, column=axis, labels=labels)

    def search_values(
        self, query: str, *, limit: int, labels: frozenset[str] | None = None
    ) -> list[Recalled]:
        """Values, best first (BM25, fused with vectors when there are)."""
        where, args = _labels_sql(labels, "m")
        return self._search("value", query, limit, where, args, column=None, labels=labels)

    def _search(
        self,
        kind: str,
        query: str,
        limit: int,
        where: str,
        args: list[Any],
        *,
        column: str | None,
        decay: str = "1.0",
        decay_args: Sequence[Any] = (),
        labels: frozenset[str] | None = None,
    ) -> list[Recalled]:
        """The shared ranking: full-text (one column, or all), vectors, fusion, decay."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise RunError(
                "a search limit must be a whole number, 0 or more", code="MEMORY_INVALID"
            )
        if limit == 0:
            return []
        table, fts = _TABLES[kind]
        names = _COLUMNS[kind][0]
        cols = ", ".join(f"m.{c.strip()}" for c in names.split(","))
        pool = max(MIN_POOL, POOL_FACTOR * limit)
        match = fts_query(query) if isinstance(query, str) else ""
        lists: list[list[tuple[int, float]]] = []
        with self._guard(f"search {kind} items"):
            db = self.conn()
            db.execute("BEGIN")  # one snapshot for every list and the rows read
            try:
                if match:
                    expr = f"{{{column}}} : ({match})" if column else match
                    admitted, admitted_args = _labels_sql(labels, "m")
                    denied = db.execute(
                        f"SELECT EXISTS (SELECT 1 FROM {table} m WHERE NOT ({admitted}))",
                        admitted_args,
                    ).fetchone()[0]
                    if denied:
                        # FTS5's statistics count every row: a denied item would weigh in
                        # the others' scores. BM25 over the admitted items instead.
                        lists.append(
                            self._admitted_bm25(
                                db, kind, expr, where, args, (admitted, admitted_args), pool
                            )
                        )
                    else:
                        rows = db.execute(
                            f"SELECT f.rowid, -bm25({fts}) FROM {fts} f JOIN {table} m "
                            f"ON m.rowid = f.rowid WHERE {fts} MATCH ? AND {where} "
                            f"ORDER BY bm25({fts}), f.rowid LIMIT ?",
                            [expr, *args, pool],
                        ).fetchall()
                        lists.append([(r[0], float(r[1])) for r in rows])
                    semantic = self._semantic(db, kind, query, table, where, args, pool)
                    if semantic is not None:
                        lists.append(semantic)
                else:
                    # No searchable word: every visible item, newest first, equally relevant.
                    rows = db.execute(
                        f"SELECT m.rowid FROM {table} m WHERE {where} "
                        f"ORDER BY m.rowid DESC LIMIT ?",
                        [*args, pool],
                    ).fetchall()
                    lists.append([(r[0], 1.0) for r in rows])
                relevance = _fused(lists)
                if not relevance:
                    return []
                keys = list(relevance)
                fetched = db.execute(
                    f"SELECT m.rowid, {decay}, {cols}, m.record, m.digest FROM {table} m "
                    f"WHERE m.rowid IN ({','.join('?' * len(keys))})",
                    [*decay_args, *keys],
                ).fetchall()
            finally:
                db.execute("COMMIT")
        out = []
        for row in fetched:
            record = self._checked(kind, row[2:])
            score = relevance[row[0]] * float(row[1])
            out.append(_recalled(kind, record, round(score, 9)))
        out.sort(key=lambda r: (-r.score, r.id))
        return out[:limit]

    def _admitted_bm25(
        self,
        db: sqlite3.Connection,
        kind: str,
        expr: str,
        where: str,
        args: list[Any],
        admitted: tuple[str, list[Any]],
        pool: int,
    ) -> list[tuple[int, float]]:
        """(row, BM25) of the matching visible items, best first, then by row, at most
        pool: FTS5's formula (runtime/retrieval/memory_fts.py) over the statistics of the
        items the caller's labels admit, as the Postgres store ranks."""
        from runtime.retrieval import memory_fts

        table, fts = _TABLES[kind]
        columns = _fts_columns(kind)
        tree, phrases = memory_fts.parse(expr, columns)
        raw = sorted({t for p in phrases for t in p.raw})
        matched = {
            r[0]: int(r[1])
            for r in db.execute(
                f"SELECT f.rowid, mem_doclen(d.sz) FROM {fts} f JOIN {table} m ON m.rowid = f.rowid"
                f" JOIN {fts}_docsize d ON d.id = f.rowid WHERE {fts} MATCH ? AND {where}",
                [expr, *args],
            ).fetchall()
        }
        if not matched or not raw:
            return []
        vocab = self._vocab(db, fts)
        marks = ",".join("?" * len(raw))
        counts: dict[int, dict[tuple[str, int], int]] = {rowid: {} for rowid in matched}
        for doc, term, col, n in db.execute(
            f"SELECT doc, term, col, count(*) FROM {vocab} WHERE term IN ({marks})"
            " GROUP BY doc, term, col",
            raw,
        ):
            if doc in counts:
                counts[doc][(memory_fts.stored_term(term), columns.index(col))] = int(n)
        where_a, args_a = admitted
        # The admitted items' count and mean length, kept until the file changes (another
        # connection's commit moves data_version; this store's own writes move _writes).
        version = (db.execute("PRAGMA data_version").fetchone()[0], self._writes)
        cache: dict[Any, Any] = self._local.__dict__.setdefault("stats", {})
        stats_key = (kind, where_a, tuple(args_a))
        known = cache.get(stats_key)
        if known is not None and known[0] == version:
            total, mean = known[1]
        else:
            total, mean = db.execute(
                f"SELECT count(*), coalesce(avg(mem_doclen(d.sz)), 0) FROM {table} m"
                f" JOIN {fts}_docsize d ON d.id = m.rowid WHERE {where_a}",
                args_a,
            ).fetchone()
            if len(cache) > 256:
                cache.clear()
            cache[stats_key] = (version, (total, mean))
        per_term: dict[tuple[str, int | None], int] = {}
        for term, col, n in db.execute(
            f"SELECT v.term, v.col, count(DISTINCT v.doc) FROM {vocab} v JOIN {table} m"
            f" ON m.rowid = v.doc WHERE v.term IN ({marks}) AND {where_a} GROUP BY v.term, v.col"
            f" UNION ALL SELECT v.term, NULL, count(DISTINCT v.doc) FROM {vocab} v JOIN {table}"
            f" m ON m.rowid = v.doc WHERE v.term IN ({marks}) AND {where_a} GROUP BY v.term",
            [*raw, *args_a, *raw, *args_a],
        ):
            key = (memory_fts.stored_term(term), None if col is None else columns.index(col))
            per_term[key] = int(n)
        item_counts = []
        for phrase in phrases:
            if len(set(phrase.terms)) == 1:
                item_counts.append(per_term.get((phrase.terms[0], phrase.column), 0))
            elif not phrase.terms:
                item_counts.append(0)
            else:  # a phrase of several terms: FTS5's own count of the items holding it
                quoted = '"' + " ".join(phrase.raw).replace('"', '""') + '"'
                only = f"{{{columns[phrase.column]}}} : " if phrase.column is not None else ""
                item_counts.append(
                    db.execute(
                        f"SELECT count(*) FROM {fts} f JOIN {table} m ON m.rowid = f.rowid"
                        f" WHERE {fts} MATCH ? AND {where_a}",
                        [only + quoted, *args_a],
                    ).fetchone()[0]
                )
        stats = memory_fts.Stats(int(total), float(mean), item_counts)
        scored = []
        for rowid, length in matched.items():  # FTS5 matched them; live: what counts
            live = memory_fts.evaluate(tree, counts[rowid]) or {}
            scored.append(
                (rowid, memory_fts.score(tree, phrases, counts[rowid], length, stats, live))
            )
        scored.sort(key=lambda r: (-r[1], r[0]))
        return scored[:pool]

    def _vocab(self, db: sqlite3.Connection, fts: str) -> str:
        """This connection's fts5vocab table of a full-text table (instances by term)."""
        name = f"temp.{fts}_v"
        db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5vocab(main, {fts}, 'instance')"
        )
        return name

    def _semantic(
        self,
        db: sqlite3.Connection,
        kind: str,
        query: str,
        table: str,
        where: str,
        args: list[Any],
        pool: int,
    ) -> list[tuple[int, float]] | None:
        """The cosine ranking of the visible items' vectors (None: no embedder or vectors)."""
        if self.embedder is None:
            return None
        rows = db.execute(
            f"SELECT v.item, v.vector FROM item_vectors v JOIN {table} m ON m.rowid = v.item "
            f"WHERE v.kind = ? AND v.model = ? AND {where}",
            [kind, self.embedder.name, *args],
        ).fetchall()
        if not rows:
            return None
        from runtime.retrieval.embeddings import cosine_top

        [qvec] = self.embedder.embed([query])
        best = cosine_top(qvec, [r[1] for r in rows], pool)
        return [(rows[i][0], s) for i, s in best]


def _doclen(sizes: bytes | None) -> int:
    """An item's length in tokens, all columns: the sum of the varints FTS5 keeps in its
    docsize row (one per column)."""
    total = value = shift = 0
    for byte in sizes or b"":
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
        else:
            total, value, shift = total + value, 0, 0
    return total


# kind -> (its full-text columns' texts, the text its vector embeds), as the writers pass them
_WRITE_TEXTS: dict[
    str,
    tuple[Callable[[Mapping[str, Any]], str | tuple[str, ...]], Callable[[Mapping[str, Any]], str]],
] = {
    "memory": (lambda r: _body(r["text"]), lambda r: r["text"]),
    "experience": (
        lambda r: tuple(_body(t) for t in axis_texts(r).values()),
        lambda r: experience_text(r),
    ),
    "value": (lambda r: _body(r["text"]), lambda r: r["text"]),
}


def _fts_columns(kind: str) -> tuple[str, ...]:
    return AXES if kind == "experience" else ("body",)


def default_memory_path(index_path: str | None = None) -> str:
    """`$RUNTIME_MEMORIES`, else memories.db beside the node index (index_path, else
    `$RUNTIME_INDEX`, else .runtime/index.db); a postgresql:// index: its database."""
    named = os.environ.get("RUNTIME_MEMORIES")
    if named:
        return named
    from runtime.retrieval.nodestore import default_path

    index = index_path or default_path()
    if index.startswith(("postgresql://", "postgres://")):
        return index  # a Postgres index keeps the memories in its database (their own tables)
    return str(Path(index).parent / DEFAULT_FILE)


def open_memory_store(
    path: str | None = None,
    *,
    index_path: str | None = None,
    create: bool = False,
    embedder: Any = "auto",
) -> Any:
    """The memory store at path (default: default_memory_path(index_path)).

    Reading a file that does not exist gives an empty store (nothing remembered yet) and
    creates nothing; create=True (the writers) creates it. A postgresql:// location opens
    the memories in that database (runtime/retrieval/pgmemories.py), alike. embedder: "auto" (the
    installed one, see installed_embedder, resolved on first use), None (BM25 only), or
    any object with `name` and `embed(texts)`.
    """
    target = path or default_memory_path(index_path)
    if target.startswith(("postgresql://", "postgres://")):
        from runtime.retrieval.pgmemories import PostgresMemoryStore

        try:
            return PostgresMemoryStore(target, create=create, embedder=embedder)
        except StoreError as exc:
            if not exc.details.get("missing"):
                raise
            empty = EmptyMemoryStore()  # a database without memories: nothing remembered yet
            empty.path = str(exc.details["missing"])
            return empty
    if not create and not Path(target).is_file():
        empty = EmptyMemoryStore()
        empty.path = target
        return empty
    return SqliteMemoryStore(target, create=create, embedder=embedder)
