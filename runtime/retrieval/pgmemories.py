"""Memories, experiences and values in PostgreSQL (`--memories postgresql://...`, issue 34).

`PostgresMemoryStore` is the MemoryStore of runtime/retrieval/memories.py on a server: the
same records (validated by memory_items, checksummed), the same write paths, the same
ranking. Full text is FTS5's, reproduced by runtime/retrieval/memory_fts.py: each item's
terms and their counts per column are stored in `memory_terms`, made by SQLite's own
tokenizer, and BM25 is computed from them; vectors are the same blobs, fused by the same
reciprocal rank fusion; decay, expiry and limits are the same functions.

Access holds inside the query: an item whose labels are not all allowed is never
returned, never counted and never part of the statistics (item count, mean length,
phrase counts) that score the visible ones; expiry, scope and experience filters are in
the same WHERE. Every row keeps the SHA-256 of its record and its filter columns are
checked against the record on read: a row damaged by SQL is MEMORY_STORE_ERROR, never
an answer.

Migrations are ordered and named, recorded in `memory_store_migrations` and applied under
a transaction-scoped advisory lock. Writers take another advisory lock for their
transaction, so rows are numbered as SQLite numbers them (the next after the largest) and
ties break alike. A server that is down or goes away is MEMORY_STORE_UNAVAILABLE with the
URL's password hidden.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from runtime.errors import RunError, StoreError
from runtime.net import pgpool
from runtime.net.pgurl import display, is_url, scrub  # noqa: F401 (re-exported)
from runtime.retrieval import memory_fts
from runtime.retrieval.memory_common import (
    FORMAT,
    LAYOUT,
    MIN_POOL,
    POOL_FACTOR,
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
from runtime.retrieval.memory_store import AXES, EXPERIENCE_FILTERS, SCOPE_KEYS, Recalled
from runtime.retrieval.node import scope_value_problem
from runtime.retrieval.query import fts_query

MIGRATIONS_TABLE = "memory_store_migrations"
# pg_advisory_xact_lock keys (any fixed bigints; the run store and the index use others)
LOCK_KEY = 0x4D65_6D6F_7279_0001  # migrations
WRITE_KEY = 0x4D65_6D6F_7279_0002  # writers: one at a time numbers rows
POOL_MAX_ENV = "RUNTIME_MEMORY_POOL_MAX"
TIMEOUT_ENV = "RUNTIME_MEMORY_TIMEOUT"

# kind -> (table, filter columns, the record's values of them, full-text columns)
_KINDS: dict[str, tuple[str, tuple[str, ...], Callable[[Mapping[str, Any]], tuple[Any, ...]]]] = {
    "memory": (
        "memories",
        ("id", "type", "created", "expires", "half_life", "repository", "snapshot", "session"),
        lambda r: _memory_columns(r)[:-1],
    ),
    "experience": (
        "experiences",
        (
            "id",
            "domain",
            "strategy",
            "outcome",
            "pipeline",
            "confidence_tier",
            "run_id",
            "created",
        ),
        lambda r: _experience_columns(r)[:-1],
    ),
    "value": ("value_items", ("id", "axis"), lambda r: _value_columns(r)[:-1]),
}
_FTS_COLUMNS = {"memory": ("body",), "experience": AXES, "value": ("body",)}


def unavailable(where: str, why: str) -> StoreError:
    """A server that cannot be reached or went away, as a coded error."""
    text = " ".join(why.split()) or "no reason given"
    return StoreError(
        f"memory store {where}: the database is unavailable: {text}",
        code="MEMORY_STORE_UNAVAILABLE",
    )


# --- schema ---------------------------------------------------------------------------------
def _pgm001_memories(db: Any) -> None:
    """The SQLite store's three tables (their filter columns, record and digest), each
    item's length in tokens, the terms of every item and the vectors."""
    for statement in (
        "CREATE TABLE memory_store_info (key text PRIMARY KEY, value text NOT NULL)",
        "CREATE TABLE memories (rowid bigint PRIMARY KEY, id text UNIQUE NOT NULL,"
        " type text NOT NULL, created double precision NOT NULL, expires double precision,"
        " half_life double precision, repository text, snapshot text, session text,"
        " labels text[] NOT NULL, record text NOT NULL, digest text NOT NULL,"
        " length integer NOT NULL)",
        "CREATE TABLE experiences (rowid bigint PRIMARY KEY, id text UNIQUE NOT NULL,"
        " domain text NOT NULL, strategy text NOT NULL, outcome text NOT NULL, pipeline text,"
        " confidence_tier text NOT NULL, run_id text, created double precision NOT NULL,"
        " labels text[] NOT NULL, record text NOT NULL, digest text NOT NULL,"
        " length integer NOT NULL)",
        "CREATE INDEX experiences_run ON experiences (run_id)",
        "CREATE TABLE value_items (rowid bigint PRIMARY KEY, id text UNIQUE NOT NULL,"
        " axis text NOT NULL, labels text[] NOT NULL, record text NOT NULL,"
        " digest text NOT NULL, length integer NOT NULL)",
        # col: the full-text column (0 for memories and values; an experience's axis)
        "CREATE TABLE memory_terms (kind text NOT NULL, term text NOT NULL, item bigint NOT NULL,"
        " col smallint NOT NULL, tf integer NOT NULL, PRIMARY KEY (kind, term, item, col))",
        "CREATE INDEX memory_terms_item ON memory_terms (kind, item)",
        "CREATE TABLE memory_vectors (kind text NOT NULL, item bigint NOT NULL,"
        " model text NOT NULL, vector bytea NOT NULL, PRIMARY KEY (kind, item))",
    ):
        db.execute(statement)
    db.execute(
        "INSERT INTO memory_store_info VALUES ('format', %s), ('layout', %s)",
        (FORMAT, str(LAYOUT)),
    )


# Ordered and named; append, never edit.
MIGRATIONS: list[tuple[str, Callable[[Any], None]]] = [("pgm001_memories", _pgm001_memories)]
TABLES = ("memory_store_info", "memories", "experiences", "value_items", "memory_terms")


def _labels_sql(labels: frozenset[str] | None) -> tuple[str, list[Any]]:
    """Every label of the row allowed (None allows none: only `labels: []` rows)."""
    if not labels:
        return "cardinality(m.labels) = 0", []
    for label in labels:
        problem = scope_value_problem(label)
        if problem:
            raise RunError(f"allowed label {problem}", code="SCOPE_INVALID")
    return "m.labels <@ %s::text[]", [sorted(labels)]


class PostgresMemoryStore:
    """Memories, experiences and values in a PostgreSQL database (a MemoryStore)."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = False,
        embedder: Any = None,
        pool_max: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Open (and migrate) the store; create=False refuses a database without one
        (MEMORY_STORE_ERROR). `pool_max` connections at most (default
        $RUNTIME_MEMORY_POOL_MAX or 4); `timeout` seconds to wait for the server or a free
        connection (default $RUNTIME_MEMORY_TIMEOUT or 10)."""
        psycopg, _ = pgpool.drivers("memory store")
        self.url = url
        self.path = pgpool.shown(url, "memory store")
        self._embedder = embedder
        self._local = threading.local()
        self.timeout = float(timeout or os.environ.get(TIMEOUT_ENV) or 10)
        size = int(pool_max or os.environ.get(POOL_MAX_ENV) or 4)
        try:
            conn = psycopg.connect(url, autocommit=True, **pgpool.connect_args(self.timeout))
        except psycopg.OperationalError as exc:
            raise unavailable(self.path, scrub(str(exc), url)) from exc
        except psycopg.ProgrammingError as exc:  # a malformed URL or option
            raise StoreError(
                f"memory store {self.path}: {scrub(str(exc), url)}", code="STORE_URL_INVALID"
            ) from exc
        try:
            with conn:
                self._open(conn, create)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise unavailable(self.path, scrub(str(exc), url)) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"memory store {self.path}: cannot open: {scrub(str(exc), url)}",
                code="MEMORY_STORE_ERROR",
            ) from exc
        self._pool = pgpool.open_pool(
            self, url, size=size, timeout=self.timeout, name="step-runtime-memories"
        )

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()

    # --- opening -----------------------------------------------------------------------
    def _open(self, conn: Any, create: bool) -> None:
        """Check the database holds a memory store (or none yet) and migrate it."""
        present = conn.execute("SELECT to_regclass('memory_store_info') IS NOT NULL").fetchone()[0]
        if not present and not create:
            raise StoreError(
                f"no memory store at {self.path}", code="MEMORY_STORE_ERROR", missing=self.path
            )
        if present:
            self._refuse_foreign(conn)
        self.migrate(conn)
        self._refuse_foreign(conn)

    def _refuse_foreign(self, conn: Any) -> None:
        """MEMORY_STORE_ERROR unless memory_store_info names this format and layout."""
        import psycopg

        try:
            info = dict(conn.execute("SELECT key, value FROM memory_store_info").fetchall())
        except psycopg.ProgrammingError as exc:  # a table of that name and another shape
            info = {"format": f"a table of another shape ({type(exc).__name__})"}
        if info.get("format") != FORMAT or info.get("layout") != str(LAYOUT):
            raise StoreError(
                f"{self.path} holds no memory store of layout {LAYOUT} (it says "
                f"{str(info.get('format'))[:40]!r} layout {str(info.get('layout'))[:10]})",
                code="MEMORY_STORE_ERROR",
            )

    @staticmethod
    def migrate(conn: Any) -> list[str]:
        """Apply the missing migrations in order, under an advisory lock; their names."""
        applied: list[str] = []
        with conn.transaction():
            # One process migrates at a time; the others wait here, then find nothing to do.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE}"
                " (name text PRIMARY KEY, applied_at double precision NOT NULL)"
            )
            done = {r[0] for r in conn.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
            for name, step in MIGRATIONS:
                if name in done:
                    continue
                step(conn)
                conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (%s, %s)", (name, time.time()))
                applied.append(name)
        return applied

    # --- plumbing ----------------------------------------------------------------------
    @property
    def embedder(self) -> Any:
        """The embedder (None: BM25 only); "auto" is resolved on first use."""
        if self._embedder == "auto":
            self._embedder = installed_embedder()
        return self._embedder

    @contextlib.contextmanager
    def _conn(self, doing: str) -> Iterator[Any]:
        """The transaction's connection, else a pooled one; the driver's errors coded."""
        import psycopg
        import psycopg_pool

        held = getattr(self._local, "held", None)
        try:
            if held is not None:
                yield held
            else:
                with self._pool.connection() as conn:
                    yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout) as exc:
            raise unavailable(self.path, scrub(str(exc), self.url)) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"memory store {self.path}: cannot {doing}: {scrub(str(exc), self.url)}",
                code="MEMORY_STORE_ERROR",
            ) from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes in one transaction: all are stored, or none (rolled back on error)."""
        if getattr(self._local, "held", None) is not None:
            yield  # nested: the outer transaction commits
            return
        with self._conn("write") as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_KEY,))
            self._local.held = conn
            try:
                yield
            finally:
                self._local.held = None

    def _checked(self, kind: str, row: Sequence[Any]) -> dict[str, Any]:
        """The record of a fetched row (filter columns, labels, record, digest), verified."""
        _, names, derive = _KINDS[kind]
        width = len(names)
        columns, labels, record_json, stored = (
            row[:width],
            row[width],
            row[width + 1],
            row[width + 2],
        )
        try:
            record = json.loads(record_json)
            ok = (
                isinstance(record, dict)
                and digest(record) == stored
                and tuple(derive(record)) == tuple(columns)
                and list(labels) == sorted(record["labels"])
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            ok = False
        if not ok:
            raise StoreError(
                f"memory store {self.path}: a {kind} row does not match its checksum "
                "(the database was changed outside the runtime)",
                code="MEMORY_STORE_ERROR",
            )
        return record

    def _select(self, kind: str) -> str:
        _, names, _ = _KINDS[kind]
        return ", ".join(f"m.{c}" for c in (*names, "labels", "record", "digest"))

    # --- writing -----------------------------------------------------------------------
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
        self._write("memory", records)
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
        self._write("experience", records)
        return [r["id"] for r in records]

    def replace_values(self, records: Sequence[Mapping[str, Any]]) -> int:
        """Make the stored values exactly these (what `runtime values rebuild` computed)."""
        with self.transaction(), self._conn("write values") as conn:
            conn.execute("DELETE FROM memory_terms WHERE kind = 'value'")
            conn.execute("DELETE FROM memory_vectors WHERE kind = 'value'")
            conn.execute("DELETE FROM value_items")
            self._write("value", list(records))
        return len(records)

    def put_records(
        self,
        kind: str,
        records: Sequence[Mapping[str, Any]],
        vectors: Mapping[str, tuple[str, bytes]] | None = None,
    ) -> None:
        """Store records as they are (already validated: a copy's), with their vectors by
        id (model, blob) instead of embedding them again."""
        self._write(kind, records, vectors=vectors or {})

    def _write(
        self,
        kind: str,
        records: Sequence[Mapping[str, Any]],
        *,
        vectors: Mapping[str, tuple[str, bytes]] | None = None,
    ) -> None:
        """Insert or replace records (by id) with their terms and vectors."""
        if not records:
            return
        ids = [r["id"] for r in records]
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})[0]
            raise RunError(f"two {kind} items have the id {twice!r}", code="MEMORY_INVALID")
        given: dict[str, tuple[str, bytes]] = dict(vectors or {})
        if vectors is None and self.embedder is not None:
            from runtime.retrieval.embeddings import to_blob

            texts = [experience_text(r) if kind == "experience" else r["text"] for r in records]
            for record, vec in zip(records, self.embedder.embed(texts), strict=True):
                given[record["id"]] = (self.embedder.name, to_blob(vec))
        docs = [_fts_texts(kind, r) for r in records]
        counted = memory_fts.tokenizer().counts(docs)
        table, names, derive = _KINDS[kind]
        cols = ", ".join((*names, "labels", "record", "digest", "length"))
        marks = ", ".join(["%s"] * (len(names) + 4))
        with self.transaction(), self._conn(f"write {kind} items") as conn:
            stale: list[int] = []
            written: list[tuple[int, Mapping[str, Any], dict[tuple[str, int], int]]] = []
            for record, (terms, length) in zip(records, counted, strict=True):
                stale += [
                    r[0]
                    for r in conn.execute(
                        f"DELETE FROM {table} WHERE id = %s RETURNING rowid", (record["id"],)
                    ).fetchall()
                ]
                # the next number after the largest, as SQLite numbers an INTEGER PRIMARY KEY
                (rowid,) = conn.execute(
                    f"INSERT INTO {table} (rowid, {cols}) SELECT coalesce(max(rowid), 0) + 1,"
                    f" {marks} FROM {table} RETURNING rowid",
                    (
                        *derive(record),
                        list(record["labels"]),
                        json.dumps(record, ensure_ascii=False),
                        digest(record),
                        length,
                    ),
                ).fetchone()
                written.append((int(rowid), record, terms))
            # a replaced item's rows, before the new ones (its number may be used again)
            if stale:
                for extra in ("memory_terms", "memory_vectors"):
                    conn.execute(
                        f"DELETE FROM {extra} WHERE kind = %s AND item = ANY(%s)", (kind, stale)
                    )
            with conn.cursor().copy(
                "COPY memory_terms (kind, term, item, col, tf) FROM STDIN"
            ) as copy:
                for rowid, _, terms in written:
                    for (term, col), tf in sorted(terms.items()):
                        copy.write_row((kind, term, rowid, col, tf))
            rows = [
                (kind, rowid, *given[record["id"]])
                for rowid, record, _ in written
                if record["id"] in given
            ]
            if rows:
                conn.cursor().executemany(
                    "INSERT INTO memory_vectors VALUES (%s, %s, %s, %s)", rows
                )

    def set_tier(self, key: str, tier: str, *, note: str | None = None) -> str:
        """Set the confidence tier (and note) of the experience with this id or run id;
        its id, or EXPERIENCE_NOT_FOUND."""
        with self._conn("read experiences") as conn:
            row = conn.execute(
                f"SELECT {self._select('experience')} FROM experiences m"
                ' WHERE m.id = %s OR m.run_id = %s ORDER BY m.id COLLATE "C" LIMIT 1',
                (key, key),
            ).fetchone()
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

    # --- reading -----------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Memories, experiences and values stored."""
        with self._conn("count items") as conn:
            return {
                kind: int(conn.execute(f"SELECT count(*) FROM {spec[0]}").fetchone()[0])
                for kind, spec in _KINDS.items()
            }

    def all_experiences(self) -> list[dict[str, Any]]:
        """Every experience record (verified), in id order (for `runtime values rebuild`)."""
        with self._conn("read experiences") as conn:
            rows = conn.execute(
                f'SELECT {self._select("experience")} FROM experiences m ORDER BY m.id COLLATE "C"'
            ).fetchall()
        return [self._checked("experience", r) for r in rows]

    def dump(self, kind: str) -> list[tuple[int, dict[str, Any], tuple[str, bytes] | None]]:
        """Every item of a kind in row order: (row number, verified record, its vector)."""
        table = _KINDS[kind][0]
        with self._conn(f"read {kind} items") as conn:
            rows = conn.execute(
                f"SELECT m.rowid, v.model, v.vector, {self._select(kind)} FROM {table} m"
                " LEFT JOIN memory_vectors v ON v.kind = %s AND v.item = m.rowid ORDER BY m.rowid",
                (kind,),
            ).fetchall()
        return [
            (int(r[0]), self._checked(kind, r[3:]), (r[1], bytes(r[2])) if r[1] else None)
            for r in rows
        ]

    def terms(self, kind: str) -> list[tuple[str, str, int, int]]:
        """Every item's full-text terms: (id, term, column, hits), sorted (a copy's check)."""
        table = _KINDS[kind][0]
        with self._conn(f"read {kind} terms") as conn:
            rows = conn.execute(
                f"SELECT m.id, t.term, t.col, t.tf FROM memory_terms t JOIN {table} m"
                " ON m.rowid = t.item WHERE t.kind = %s",
                (kind,),
            ).fetchall()
        return sorted((str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows)

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
        admitted, admitted_args = _labels_sql(labels)
        where = admitted + " AND (m.expires IS NULL OR m.expires > %s)"
        args = [*admitted_args, at]
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
            where += f" AND (m.{key} IS NULL OR m.{key} = %s)"
            args.append(value)
        return self._search(
            "memory", query, limit, where, args, (admitted, admitted_args), None, at
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
        admitted, admitted_args = _labels_sql(labels)
        where, args = admitted, list(admitted_args)
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
            where += f" AND m.{key} = ANY(%s)"
            args.append([str(v) for v in values])
        return self._search(
            "experience", query, limit, where, args, (admitted, admitted_args), axis, None
        )

    def search_values(
        self, query: str, *, limit: int, labels: frozenset[str] | None = None
    ) -> list[Recalled]:
        """Values, best first (BM25, fused with vectors when there are)."""
        admitted, admitted_args = _labels_sql(labels)
        return self._search(
            "value", query, limit, admitted, list(admitted_args), (admitted, admitted_args), None
        )

    def _search(
        self,
        kind: str,
        query: str,
        limit: int,
        where: str,
        args: list[Any],
        admitted: tuple[str, list[Any]],
        column: str | None,
        at: float | None = None,
    ) -> list[Recalled]:
        """The SQLite store's ranking: full text (one column, or all), vectors, fusion,
        decay; statistics over the items the caller's labels admit."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise RunError(
                "a search limit must be a whole number, 0 or more", code="MEMORY_INVALID"
            )
        if limit == 0:
            return []
        table = _KINDS[kind][0]
        pool = max(MIN_POOL, POOL_FACTOR * limit)
        match = fts_query(query) if isinstance(query, str) else ""
        if match and column:
            match = f"{{{column}}} : ({match})"
        lists: list[list[tuple[int, float]]] = []
        with self._conn(f"search {kind} items") as conn, self._snapshot(conn):
            if match:
                lists.append(self._bm25(conn, kind, match, where, args, admitted, pool))
                semantic = self._semantic(conn, kind, query, table, where, args, pool)
                if semantic is not None:
                    lists.append(semantic)
            else:
                # No searchable word: every visible item, newest first, equally relevant.
                rows = conn.execute(
                    f"SELECT m.rowid FROM {table} m WHERE {where} ORDER BY m.rowid DESC LIMIT %s",
                    [*args, pool],
                ).fetchall()
                lists.append([(int(r[0]), 1.0) for r in rows])
            relevance = _fused(lists)
            if not relevance:
                return []
            extra = ", m.created, m.half_life" if kind == "memory" else ""
            fetched = conn.execute(
                f"SELECT m.rowid{extra}, {self._select(kind)} FROM {table} m"
                " WHERE m.rowid = ANY(%s)",
                (list(relevance),),
            ).fetchall()
        out = []
        skip = 3 if kind == "memory" else 1
        for row in fetched:
            record = self._checked(kind, row[skip:])
            decay = _decay(row[1], row[2], at) if kind == "memory" and at is not None else 1.0
            score = relevance[int(row[0])] * decay
            out.append(_recalled(kind, record, round(score, 9)))
        out.sort(key=lambda r: (-r.score, r.id))
        return out[:limit]

    @contextlib.contextmanager
    def _snapshot(self, conn: Any) -> Iterator[None]:
        """One snapshot for every list and the rows read (inside a writer's transaction:
        that transaction's view)."""
        if getattr(self._local, "held", None) is not None:
            yield
            return
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield

    def _bm25(
        self,
        conn: Any,
        kind: str,
        match: str,
        where: str,
        args: list[Any],
        admitted: tuple[str, list[Any]],
        pool: int,
    ) -> list[tuple[int, float]]:
        """(row, BM25) of the matching visible items, best first, then by row, at most pool."""
        table = _KINDS[kind][0]
        tree, phrases = memory_fts.parse(match, _FTS_COLUMNS[kind])
        words = sorted({t for p in phrases for t in p.terms})
        if not words:
            return []
        # Candidates: visible items holding any of the words; the expression is applied to
        # their counts (the same rules as FTS5's MATCH).
        rows = conn.execute(
            f"SELECT m.rowid, m.length, array_agg(t.term), array_agg(t.col), array_agg(t.tf)"
            f" FROM memory_terms t JOIN {table} m ON m.rowid = t.item"
            f" WHERE t.kind = %s AND t.term = ANY(%s) AND {where} GROUP BY m.rowid, m.length",
            [kind, words, *args],
        ).fetchall()
        items: list[tuple[int, int, dict[tuple[str, int], int], dict[int, int]]] = []
        for rowid, length, terms, cols, tfs in rows:
            counts = {(t, int(c)): int(n) for t, c, n in zip(terms, cols, tfs, strict=True)}
            live = memory_fts.evaluate(tree, counts)
            if live is not None:
                items.append((int(rowid), int(length), counts, live))
        if not items:
            return []
        stats = self._stats(conn, kind, phrases, admitted)
        scored = [
            (rowid, memory_fts.score(tree, phrases, counts, length, stats, live))
            for rowid, length, counts, live in items
        ]
        scored.sort(key=lambda r: (-r[1], r[0]))
        return scored[:pool]

    def _stats(
        self,
        conn: Any,
        kind: str,
        phrases: Sequence[memory_fts.Phrase],
        admitted: tuple[str, list[Any]],
    ) -> memory_fts.Stats:
        """Item count, mean length and each phrase's item count over the admitted items
        (a denied item weighs nothing)."""
        table = _KINDS[kind][0]
        where, args = admitted
        total, mean = conn.execute(
            f"SELECT count(*), coalesce(avg(m.length), 0) FROM {table} m WHERE {where}", args
        ).fetchone()
        # One round trip for every one-term phrase: items holding each term in each
        # column, and in any column (the grouping set without the column).
        single = sorted({p.terms[0] for p in phrases if len(set(p.terms)) == 1})
        per_term: dict[tuple[str, int | None], int] = {}
        if single:
            for term, col, n in conn.execute(
                "SELECT t.term, t.col, count(DISTINCT t.item) FROM memory_terms t JOIN"
                f" {table} m ON m.rowid = t.item WHERE t.kind = %s AND t.term = ANY(%s)"
                f" AND {where} GROUP BY GROUPING SETS ((t.term, t.col), (t.term))",
                [kind, single, *args],
            ).fetchall():
                per_term[(str(term), None if col is None else int(col))] = int(n)
        found: dict[memory_fts.Phrase, int] = {}
        for phrase in dict.fromkeys(phrases):
            if not phrase.terms:
                found[phrase] = 0
                continue
            if len(set(phrase.terms)) == 1:
                found[phrase] = per_term.get((phrase.terms[0], phrase.column), 0)
                continue
            col = "" if phrase.column is None else " AND t.col = %s"
            col_args = [] if phrase.column is None else [phrase.column]
            distinct = sorted(set(phrase.terms))
            found[phrase] = int(
                conn.execute(
                    "SELECT count(*) FROM (SELECT t.item FROM memory_terms t JOIN"
                    f" {table} m ON m.rowid = t.item WHERE t.kind = %s AND t.term = ANY(%s)"
                    f"{col} AND {where} GROUP BY t.item HAVING count(DISTINCT t.term) = %s) x",
                    [kind, distinct, *col_args, *args, len(distinct)],
                ).fetchone()[0]
            )
        return memory_fts.Stats(int(total), float(mean), [found[p] for p in phrases])

    def _semantic(
        self,
        conn: Any,
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
        rows = conn.execute(
            f"SELECT v.item, v.vector FROM memory_vectors v JOIN {table} m ON m.rowid = v.item"
            f" WHERE v.kind = %s AND v.model = %s AND {where} ORDER BY v.item",
            [kind, self.embedder.name, *args],
        ).fetchall()
        if not rows:
            return None
        from runtime.retrieval.embeddings import cosine_top

        [qvec] = self.embedder.embed([query])
        best = cosine_top(qvec, [bytes(r[1]) for r in rows], pool)
        return [(int(rows[i][0]), s) for i, s in best]


def _fts_texts(kind: str, record: Mapping[str, Any]) -> list[str]:
    """The full-text columns of an item, as the SQLite store writes them."""
    if kind == "experience":
        return [_body(t) for t in axis_texts(record).values()]
    return [_body(str(record["text"]))]
