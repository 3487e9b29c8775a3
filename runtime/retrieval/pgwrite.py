"""`runtime index --index postgresql://...` (issue 34): the indexer's writes into Postgres.

PostgresIndexWriter implements the indexer's write protocol (runtime/retrieval/
indexwrite.py, which SqliteNodeStore implements too) over one connection of its own:

- One transaction per batch(): a run's files, edges and vectors commit together. Until
  then searchers see the index as the last run left it, and a run that fails, is killed
  or loses its server leaves exactly that index behind (nothing half-written).
- One indexer at a time: the writer holds a session advisory lock (WRITER_LOCK) from the
  moment it opens, before it reads a single file hash, so a second indexer waits for the
  first to finish and then sees what it stored (incremental, as on one SQLite file); it
  waits lock_wait seconds at most, then INDEX_BUSY. A killed indexer's lock goes with its
  connection.
- Rows go through PostgresNodeStore's own writes (put_rows, put_vectors, delete_nodes):
  the same terms, label sets and token counts `runtime store copy` writes.
- A server that is down or goes away is INDEX_UNAVAILABLE, its URL's password hidden.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from runtime.errors import StoreError
from runtime.net import pgpool, pgtext
from runtime.retrieval.nodestore import NodeRow, decode_extraction
from runtime.retrieval.pgindex import PostgresNodeStore, display, scrub, unavailable

# pg_advisory_lock key of the one indexer writing a database ("SRIdxWrt"; the schema's
# creation uses 3434, the run store and the queue their own).
WRITER_LOCK = 0x5352_4964_7857_7274
Key = tuple[str, str]
# Node rows of files buffered before they are sent in one put_rows (indexcopy's batch).
FLUSH_ROWS = 2000


class _Through(PostgresNodeStore):
    """The Postgres index whose writes run on the writer's connection (its transaction)."""

    through: Any = None

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        if self.through is None:
            with super()._conn() as conn:
                yield conn
            return
        yield self.through


class PostgresIndexWriter:
    """The indexer's write protocol over a Postgres node index (see the module's doc)."""

    rebuilt = False  # the Postgres index is never rebuilt from another layout here

    def __init__(
        self,
        url: str,
        *,
        lock_wait: float = 600.0,
        timeout: float = 10,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        psycopg, _ = pgpool.drivers("index")  # STORE_DRIVER_MISSING without them
        self.url = url
        self.index = _Through(url, create=True, pool_max=1, timeout=timeout)
        self.path = self.index.path
        self._depth = 0
        self._dirty = False
        # Files written but not yet sent (see _flush): rows, id -> path, key -> (hash, summary)
        self._pending: list[NodeRow] = []
        self._owner: dict[str, str] = {}
        self._files: dict[tuple[str, str, str], tuple[str, bytes]] = {}
        try:
            self.conn: Any = psycopg.connect(
                url,
                autocommit=True,
                connect_timeout=max(1, int(timeout)),
                application_name="step-runtime-indexer",
            )
        except psycopg.Error as exc:
            self.index.close()
            raise unavailable(self.path, RuntimeError(scrub(str(exc), url))) from exc
        pgtext.install(self.conn)  # NUL characters round-trip, as through the index's pool
        try:
            self._lock(lock_wait, on_wait)
        except BaseException:
            self.close()
            raise
        self.index.through = self.conn

    def _lock(self, wait: float, on_wait: Callable[[str], None] | None) -> None:
        """Hold WRITER_LOCK for this session, waiting at most `wait` seconds for it
        (on_wait(where) is told when another indexer holds it)."""
        import psycopg

        with self._guard():
            got = self.conn.execute("SELECT pg_try_advisory_lock(%s)", (WRITER_LOCK,)).fetchone()
            if got[0]:
                return
            if on_wait is not None:
                on_wait(self.path)
            # lock_timeout bounds the wait of pg_advisory_lock as of any lock.
            self.conn.execute(f"SET lock_timeout = '{max(1, int(wait * 1000))}ms'")
            try:
                self.conn.execute("SELECT pg_advisory_lock(%s)", (WRITER_LOCK,))
            except psycopg.errors.LockNotAvailable as exc:
                raise StoreError(
                    f"index {self.path}: another `runtime index` has been writing it for "
                    f"{wait:g}s and still is; run again when it has finished",
                    code="INDEX_BUSY",
                ) from exc
            finally:
                self.conn.execute("RESET lock_timeout")

    def close(self) -> None:
        """Release the lock (with the connection) and the index's pool."""
        with contextlib.suppress(Exception):  # a server already gone has nothing to release
            self.conn.close()
        self.index.close()

    def __enter__(self) -> PostgresIndexWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """psycopg's errors as coded ones (the URL's password never in a message)."""
        import psycopg

        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise unavailable(self.path, RuntimeError(scrub(str(exc), self.url))) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"index {display(self.url)}: {scrub(str(exc), self.url)}", code="INDEX_ERROR"
            ) from exc

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """A statement's rows, after the buffered files are written (it must see them)."""
        self._flush()
        return self._exec(sql, params)

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._guard():
            cur = self.conn.execute(sql, tuple(params) or None)
            return cur.fetchall() if cur.description is not None else []

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction around the writes inside (a batch inside joins it)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self._guard(), self.conn.transaction():
            self._depth, self._dirty = 1, False
            try:
                yield
                self._flush()
                if self._dirty:  # searchers' cached statistics are of the index before
                    self.index._written(self.conn)
            finally:
                self._depth = 0
                self._pending, self._owner, self._files = [], {}, {}

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        with self.batch():
            self._dirty = True
            yield

    # --- files -----------------------------------------------------------------------
    def file_hashes(self, repository: str, snapshot: str) -> dict[str, str]:
        """path -> content hash of the files indexed for a repository snapshot."""
        rows = self._rows(
            "SELECT path, hash FROM files WHERE repository = %s AND snapshot = %s",
            (repository, snapshot),
        )
        return {str(p): str(h) for p, h in rows}

    def extractions(
        self, repository: str, snapshot: str, paths: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """path -> the stored extraction summary; all, or of paths."""
        sql = "SELECT path, extraction FROM files WHERE repository = %s AND snapshot = %s"
        args: list[Any] = [repository, snapshot]
        if paths is not None:
            sql += " AND path = ANY(%s)"
            args.append(list(paths))
        return {p: decode_extraction(bytes(e)) for p, e in self._rows(sql, args)}

    def _taken(self, ids: Sequence[str], path: str) -> None:
        """INDEX_ERROR when another node holds one of ids (named with its file)."""
        row = self._rows(
            'SELECT id, path FROM nodes WHERE id = ANY(%s) ORDER BY id COLLATE "C" LIMIT 1',
            (list(ids),),
        )
        if row:
            raise StoreError(
                f"{path}: the node id {row[0][0]} is already held by a node of {row[0][1]}",
                code="INDEX_ERROR",
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
        """Replace a file's nodes with rows and record its hash and extraction
        (known=False: the file has no nodes yet)."""
        ids = [row[0] for row in rows]
        if len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            raise StoreError(
                f"{path}: two nodes have the id {twice[0]}; every node needs its own id",
                code="INDEX_ERROR",
            )
        with self._write():
            if known:
                self.delete_nodes(repository, snapshot, [path])
            clash = next((i for i in ids if i in self._owner), None)
            if clash is not None:
                raise StoreError(
                    f"{path}: the node id {clash} is already held by a node of "
                    f"{self._owner[clash]}",
                    code="INDEX_ERROR",
                )
            self._pending += rows
            self._owner.update(dict.fromkeys(ids, path))
            self._files[(repository, snapshot, path)] = (file_hash, extraction)
            if len(self._pending) >= FLUSH_ROWS:
                self._flush()
        return len(rows)

    def _flush(self) -> None:
        """Write the buffered files' nodes and file rows (a few statements for many files:
        one per file made a run wait on the server about 20 times a file)."""
        if not self._pending and not self._files:
            return
        rows, owner, files = self._pending, self._owner, self._files
        self._pending, self._owner, self._files = [], {}, {}
        if rows:
            held = self._exec(
                'SELECT id, path FROM nodes WHERE id = ANY(%s) ORDER BY id COLLATE "C" LIMIT 1',
                ([r[0] for r in rows],),
            )
            if held:
                raise StoreError(
                    f"{owner[held[0][0]]}: the node id {held[0][0]} is already held by a node "
                    f"of {held[0][1]}",
                    code="INDEX_ERROR",
                )
            self.index.put_rows(rows)
        keys = sorted(files)
        self._exec(
            "INSERT INTO files SELECT * FROM unnest(%s::text[], %s::text[], %s::text[],"
            " %s::text[], %s::bytea[]) ON CONFLICT (repository, snapshot, path) DO UPDATE SET"
            " hash = EXCLUDED.hash, extraction = EXCLUDED.extraction",
            (
                *([k[i] for k in keys] for i in range(3)),
                [files[k][0] for k in keys],
                [files[k][1] for k in keys],
            ),
        )

    def _delete_where(self, where: str, args: Sequence[Any]) -> set[Key]:
        """Remove the nodes `where` selects (with what hangs off them); their keys."""
        found = self._rows(f"SELECT id, kind, qualified_name FROM nodes WHERE {where}", args)
        if found:
            with self._write():
                self.index.delete_nodes([r[0] for r in found])
        return {(r[1], r[2]) for r in found}

    def delete_nodes(self, repository: str, snapshot: str, paths: Sequence[str]) -> set[Key]:
        """Remove the nodes of files (their file rows stay); the keys removed."""
        if not paths:
            return set()
        return self._delete_where(
            "repository = %s AND snapshot = %s AND path = ANY(%s)",
            (repository, snapshot, list(paths)),
        )

    def delete_file(self, repository: str, snapshot: str, path: str) -> set[Key]:
        """Remove a file's nodes and its file row; the keys removed."""
        with self._write():
            keys = self.delete_nodes(repository, snapshot, [path])
            self._rows(
                "DELETE FROM files WHERE repository = %s AND snapshot = %s AND path = %s",
                (repository, snapshot, path),
            )
        return keys

    def rename_nodes(self, renames: Sequence[tuple[str, str]]) -> None:
        """Give nodes new ids ((old, new); an old id no node holds is skipped)."""
        if not renames:
            return
        import psycopg

        self._flush()
        with self._write():
            for old, new in renames:
                try:
                    with self.conn.transaction():  # a savepoint: the batch goes on to say why
                        self.conn.execute("UPDATE nodes SET id = %s WHERE id = %s", (new, old))
                except psycopg.errors.UniqueViolation:
                    self._taken([new], f"renaming {old}")
                    raise

    # --- edges -----------------------------------------------------------------------
    @staticmethod
    def _snapshot_edges(repository: str, snapshot: str) -> tuple[str, list[Any]]:
        """A snapshot's edges: their columns, and a source id of the snapshot (as SQLite's)."""
        from runtime.retrieval.node import node_id

        prefix = node_id(repository, snapshot, "", "")[:-2]
        return (
            "repository = %s AND snapshot = %s AND starts_with(from_id, %s)",
            [repository, snapshot, prefix],
        )

    def edge_count(self, repository: str, snapshot: str) -> int:
        """Edges of a repository snapshot."""
        where, args = self._snapshot_edges(repository, snapshot)
        return int(self._rows(f"SELECT count(*) FROM edges WHERE {where}", args)[0][0])

    def typed_edges(
        self, repository: str, snapshot: str, edge_type: str
    ) -> list[tuple[str, str, str]]:
        """The snapshot's edges of one type."""
        where, args = self._snapshot_edges(repository, snapshot)
        rows = self._rows(
            f"SELECT from_id, to_id, edge_type FROM edges WHERE {where} AND edge_type = %s",
            [*args, edge_type],
        )
        return [(f, t, e) for f, t, e in rows]

    def _edit_edges(
        self,
        repository: str,
        snapshot: str,
        old: set[tuple[str, str, str]],
        new: set[tuple[str, str, str]],
    ) -> None:
        """Delete old - new and insert new - old, each in one statement (in key order)."""
        gone, added = sorted(old - new), sorted(new - old)
        if not gone and not added:
            return
        with self._write():
            if gone:
                self._rows(
                    "DELETE FROM edges e USING unnest(%s::text[], %s::text[], %s::text[])"
                    " AS g(f, t, k) WHERE e.from_id = g.f AND e.to_id = g.t AND e.edge_type = g.k",
                    [list(col) for col in zip(*gone, strict=True)],
                )
            if added:
                self._rows(
                    "INSERT INTO edges SELECT f, t, k, %s, %s FROM unnest(%s::text[], %s::text[],"
                    " %s::text[]) AS a(f, t, k) ON CONFLICT DO NOTHING",
                    [repository, snapshot, *[list(col) for col in zip(*added, strict=True)]],
                )

    def replace_edges(
        self, repository: str, snapshot: str, edges: Iterable[tuple[str, str, str]]
    ) -> int:
        """Make the snapshot's edges exactly these (only the difference is written)."""
        new = {(f, t, e) for f, t, e in edges}
        where, args = self._snapshot_edges(repository, snapshot)
        old = {
            (f, t, e)
            for f, t, e in self._rows(
                f"SELECT from_id, to_id, edge_type FROM edges WHERE {where}", args
            )
        }
        self._edit_edges(repository, snapshot, old, new)
        return len(new)

    def replace_typed_edges(
        self, repository: str, snapshot: str, edge_type: str, edges: Iterable[tuple[str, str]]
    ) -> int:
        """Make the snapshot's edges of one type exactly these (from, to) pairs."""
        new = {(f, t, edge_type) for f, t in edges}
        old = set(self.typed_edges(repository, snapshot, edge_type))
        self._edit_edges(repository, snapshot, old, new)
        return len(new)

    # --- nodes outside any file (git commits) ------------------------------------------
    def kind_nodes(self, repository: str, snapshot: str, kind: str) -> dict[str, str]:
        """qualified name -> metadata JSON of a snapshot's nodes of one kind."""
        rows = self._rows(
            "SELECT qualified_name, metadata FROM nodes WHERE repository = %s AND snapshot = %s"
            " AND kind = %s",
            (repository, snapshot, kind),
        )
        return {str(q): str(m) for q, m in rows}

    def put_loose_rows(self, rows: Sequence[NodeRow]) -> int:
        """Write nodes that belong to no file (their ids must be free)."""
        if not rows:
            return 0
        with self._write():
            self._taken([r[0] for r in rows], "git history")
            return self.index.put_rows(rows)

    def delete_kind_nodes(
        self, repository: str, snapshot: str, kind: str, qualified_names: Iterable[str]
    ) -> None:
        """Remove a snapshot's nodes of one kind by qualified name."""
        names = list(qualified_names)
        if names:
            self._delete_where(
                "repository = %s AND snapshot = %s AND kind = %s AND qualified_name = ANY(%s)",
                (repository, snapshot, kind, names),
            )

    def path_nodes(
        self, repository: str, snapshot: str, skip_kinds: Iterable[str]
    ) -> dict[str, list[str]]:
        """path -> ids of the snapshot's nodes in that file, without the kinds skipped."""
        rows = self._rows(
            "SELECT path, id FROM nodes WHERE repository = %s AND snapshot = %s AND path <> ''"
            ' AND NOT kind = ANY(%s) ORDER BY path COLLATE "C", id COLLATE "C"',
            (repository, snapshot, sorted(skip_kinds)),
        )
        out: dict[str, list[str]] = {}
        for path, nid in rows:
            out.setdefault(path, []).append(nid)
        return out

    # --- vectors -----------------------------------------------------------------------
    def nodes_without_vectors(
        self, repository: str, snapshot: str, model: str
    ) -> list[tuple[str, str, str, str, str]]:
        """(id, kind, name, qualified name, doc) of the snapshot's nodes without a vector
        of this model, in id order."""
        rows = self._rows(
            "SELECT n.id, n.kind, n.name, n.qualified_name, n.metadata FROM nodes n"
            " LEFT JOIN vectors v ON v.node = n.rowid AND v.model = %s"
            " WHERE n.repository = %s AND n.snapshot = %s AND v.node IS NULL"
            ' ORDER BY n.id COLLATE "C"',
            (model, repository, snapshot),
        )
        return [(i, k, n, q, str(json.loads(m).get("doc") or "")) for i, k, n, q, m in rows]

    def missing_vectors(self, repository: str, snapshot: str) -> dict[str, int]:
        """vector model -> nodes of the snapshot without a vector of it."""
        rows = self._rows(
            "SELECT v.model, count(*) FROM nodes n LEFT JOIN vectors v ON v.node = n.rowid"
            ' WHERE n.repository = %s AND n.snapshot = %s GROUP BY v.model ORDER BY v.model COLLATE "C"',
            (repository, snapshot),
        )
        total = sum(int(n) for _, n in rows)
        return {model: total - int(n) for model, n in rows if model and total > n}

    def put_vectors(self, model: str, vectors: dict[str, bytes]) -> None:
        """Store vectors (float32 bytes) by node id."""
        if vectors:
            self._flush()
            with self._write():
                self.index.put_vectors(model, vectors)

    # --- roots and labels ----------------------------------------------------------------
    def root_repositories(self, root: str) -> list[str]:
        """The repository names a tree (its absolute path) was indexed under, sorted."""
        rows = self._rows(
            'SELECT repository FROM roots WHERE root = %s ORDER BY repository COLLATE "C"',
            (root,),
        )
        return [r[0] for r in rows]

    def record_root(self, root: str, repository: str) -> None:
        """Remember that the tree at root is indexed as repository."""
        with self._write():
            self._rows(
                "INSERT INTO roots VALUES (%s, %s) ON CONFLICT DO NOTHING", (root, repository)
            )

    def repository_root(self, repository: str) -> str | None:
        """The root recorded for a repository."""
        rows = self._rows("SELECT root FROM repository_roots WHERE repository = %s", (repository,))
        return str(rows[0][0]) if rows else None

    def record_repository_root(self, repository: str, root: str) -> None:
        """Record (or change) a repository's root."""
        if self.repository_root(repository) == root:
            return
        with self._write():
            self._rows(
                "INSERT INTO repository_roots VALUES (%s, %s) ON CONFLICT (repository)"
                " DO UPDATE SET root = EXCLUDED.root",
                (repository, root),
            )

    def labelled_nodes(self, repository: str, snapshot: str) -> int:
        """How many nodes of a repository snapshot carry labels."""
        rows = self._rows(
            "SELECT count(*) FROM nodes WHERE repository = %s AND snapshot = %s AND labels <> '[]'",
            (repository, snapshot),
        )
        return int(rows[0][0])

    def counts(self) -> dict[str, int]:
        """Rows per table (nodes, edges, vectors, files)."""
        self._flush()
        return self.index.counts()


def file_resources(index: Any, path: str) -> list[tuple[str, str, str, str, str, list[str]]]:
    """(id, repository, snapshot, kind, path, labels) of the nodes indexed from a file (an
    absolute path under a recorded repository root), from either backend; never their text."""
    method = getattr(index, "file_resources", None)
    if method is not None:
        return list(method(path))
    db = index.conn()  # the Postgres index's `?` dialect
    out: list[tuple[str, str, str, str, str, list[str]]] = []
    for repository, root in db.execute("SELECT repository, root FROM repository_roots"):
        prefix = root.rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        for nid, snap, kind, npath, labels in db.execute(
            "SELECT id, snapshot, kind, path, labels FROM nodes WHERE repository = ? AND path = ?",
            (repository, path[len(prefix) :]),
        ):
            try:
                parsed = json.loads(labels)
            except ValueError:
                parsed = None
            if not isinstance(parsed, list):  # labels that do not read hide the node
                parsed = ["(unreadable labels)"]
            out.append((nid, repository, snap, kind, npath, [str(x) for x in parsed]))
    return out
