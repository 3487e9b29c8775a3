"""The run store on PostgreSQL (issue 34): the SQLite store's code over a psycopg pool.

`PostgresRunStore` is `SqliteRunStore` with its connections replaced: every method, the
provenance ledger and the checksummed originals run the same code and the same SQL, which
`_Dialect` rewrites for Postgres (placeholders, `INSERT OR REPLACE` / `OR IGNORE`, two
scalar functions, a FROM subquery's alias). The schema is the SQLite store's, table for
table and column for column (tests/runtime/test_pgstore_schema.py holds it), created by
the ordered, named migrations below, recorded in `run_store_migrations` and applied under
a transaction-scoped advisory lock, so several processes may open a new database at once.

Connections come from a psycopg-pool pool; a transaction takes one for its duration, a
read one per statement. Durability: `normal` commits with `synchronous_commit = off` (a
crash of the server may lose the last commits, never consistency: SQLite's WAL without
fsync), `full` with it on (WAL flushed at every commit).

A server that is down or goes away is STORE_UNAVAILABLE, never a traceback; a transaction
that failed so was rolled back by the server, so the run resumes from its last checkpoint.
Text with a NUL character, which a Postgres text column cannot hold, is escaped on its
way in and out (runtime/net/pgtext.py), so it round-trips as on SQLite.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from runtime.engine import ledger as _ledger
from runtime.engine.owner import is_gone
from runtime.engine.store import DURABILITY, SqliteRunStore, _owner, _RunMemo
from runtime.errors import RunError, StoreError
from runtime.governance.ledger import key_from_env
from runtime.net import pgpool, pgtext
from runtime.net.pgurl import display, is_url, scrub  # noqa: F401 (re-exported)

MIGRATIONS_TABLE = "run_store_migrations"
# pg_advisory_xact_lock key: "step-runtime run store" (any fixed bigint; the index uses another)
LOCK_KEY = 0x5352_756E_5374_6F72
POOL_MAX_ENV = "RUNTIME_STORE_POOL_MAX"
TIMEOUT_ENV = "RUNTIME_STORE_TIMEOUT"


# --- schema: the SQLite store's tables, in the SQLite store's column order -------------------
def _pg001_run_store(db: Any) -> None:
    """Every table of the SQLite store as of its m015 (runs, checkpoints, events, ledger ...)."""
    for statement in (
        "CREATE TABLE runs (id text PRIMARY KEY, pipeline text NOT NULL, file text,"
        " content_hash text NOT NULL, status text NOT NULL, created_at double precision NOT NULL,"
        " updated_at double precision NOT NULL, output text, error text,"
        " steps bigint NOT NULL DEFAULT 0, durability text, pipeline_parts text, owner text)",
        "CREATE INDEX runs_created ON runs (created_at)",
        # ord: the order variables were first set in (SQLite's rowid; an upsert keeps it)
        "CREATE TABLE run_vars (run_id text NOT NULL, name text NOT NULL, hash text NOT NULL,"
        " value text NOT NULL, ord bigserial, PRIMARY KEY (run_id, name))",
        "CREATE TABLE checkpoints (run_id text PRIMARY KEY, position text, engine text NOT NULL,"
        " event_seq bigint NOT NULL, steps bigint NOT NULL DEFAULT 0,"
        " updated_at double precision)",
        "CREATE TABLE events (run_id text NOT NULL, seq bigint NOT NULL, type text NOT NULL,"
        " step_id text, data text NOT NULL, ledger_seq bigint, ledger_kind text,"
        " ledger_content text, ledger_content_hash text, ledger_prev text, ledger_hash text,"
        " ledger_mac text, PRIMARY KEY (run_id, seq))",
        "CREATE TABLE run_inputs (run_id text PRIMARY KEY, inputs text NOT NULL)",
        "CREATE TABLE run_steps (run_id text NOT NULL, n bigint NOT NULL, step_id text NOT NULL,"
        " PRIMARY KEY (run_id, n))",
        "CREATE TABLE run_pointers (run_id text NOT NULL, pointer_id text NOT NULL,"
        " sha256 text NOT NULL, kind text NOT NULL, crc bigint, PRIMARY KEY (run_id, pointer_id))",
        "CREATE INDEX run_pointers_sha ON run_pointers (sha256)",
        "CREATE TABLE run_threads (run_id text NOT NULL, thread_id text NOT NULL, n bigint NOT NULL,"
        " message text NOT NULL, PRIMARY KEY (run_id, thread_id, n))",
        "CREATE TABLE original_index (sha256 text PRIMARY KEY, offsets bytea NOT NULL, crc bigint)",
        "CREATE TABLE original_chunks (sha256 text NOT NULL, n bigint NOT NULL, text text NOT NULL,"
        " crc bigint, PRIMARY KEY (sha256, n))",
        "CREATE TABLE run_pointers_pending (run_id text NOT NULL, pointer_id text NOT NULL,"
        " PRIMARY KEY (run_id, pointer_id))",
        # m006's trigger: every new run_pointers row is provisional until a checkpoint
        "CREATE FUNCTION run_pointers_pending_mark() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO run_pointers_pending VALUES (NEW.run_id, NEW.pointer_id)"
        " ON CONFLICT DO NOTHING; RETURN NEW; END $$",
        "CREATE TRIGGER run_pointers_pending AFTER INSERT ON run_pointers"
        " FOR EACH ROW EXECUTE FUNCTION run_pointers_pending_mark()",
        "CREATE TABLE run_choices (run_id text PRIMARY KEY, choices text NOT NULL)",
        "CREATE TABLE originals (sha256 text PRIMARY KEY, chars bigint NOT NULL,"
        " chunks bigint NOT NULL, crc bigint NOT NULL)",
        "CREATE TABLE run_context_packs (run_id text NOT NULL, seq bigint NOT NULL,"
        " step_id text NOT NULL, pack_id text NOT NULL, body text NOT NULL,"
        " PRIMARY KEY (run_id, seq))",
        f"CREATE TABLE {_ledger.TABLE} (run_id text NOT NULL, seq bigint NOT NULL,"
        " kind text NOT NULL, content text NOT NULL, content_hash text NOT NULL,"
        " prev text NOT NULL, hash text NOT NULL, mac text, PRIMARY KEY (run_id, seq))",
        "CREATE TABLE run_blobs (run_id text NOT NULL, row text NOT NULL, sha256 text NOT NULL,"
        " PRIMARY KEY (run_id, row, sha256))",
        "CREATE INDEX run_blobs_sha ON run_blobs (sha256)",
        "CREATE TABLE run_subjects (run_id text PRIMARY KEY, subject text NOT NULL)",
    ):
        db.execute(statement)


def _pg002_workers(db: Any) -> None:
    """Runs queued for workers, and each run's lease (runtime/engine/workers.py; Postgres only).

    A worker takes a run's lease before executing it: the epoch goes up by one, and every
    write of that run checks, in its own transaction, that the epoch is still the one it
    took (a fencing token): a worker paused past its lease, whose run another worker took
    over, has its late writes refused (STORE_LEASE_LOST).
    """
    db.execute(
        "CREATE TABLE run_submissions (run_id text PRIMARY KEY, pipeline text NOT NULL,"
        " file text NOT NULL, inputs text NOT NULL, submitted_at double precision NOT NULL)"
    )
    db.execute(
        "CREATE TABLE run_leases (run_id text PRIMARY KEY, epoch bigint NOT NULL,"
        " worker text NOT NULL, taken_at double precision NOT NULL)"
    )


def _pg003_submission_options(db: Any) -> None:
    """What a queued run is executed with besides its inputs: the --model and --index given
    to `runtime submit` (a worker uses them, as `runtime exec` would)."""
    db.execute("ALTER TABLE run_submissions ADD COLUMN options text NOT NULL DEFAULT '{}'")


# Ordered and named like the SQLite store's MIGRATIONS; append, never edit. A SQLite
# migration that adds or changes a table needs its counterpart here (the schema test fails
# until it has one).
MIGRATIONS: list[tuple[str, Callable[[Any], None]]] = [
    ("pg001_run_store", _pg001_run_store),
    ("pg002_workers", _pg002_workers),
    ("pg003_submission_options", _pg003_submission_options),
]
# Tables only the Postgres store has (workers).
POSTGRES_ONLY = ("run_submissions", "run_leases")
TABLES = (
    "runs run_vars checkpoints events run_inputs run_steps run_pointers run_threads"
    f" original_index original_chunks run_pointers_pending run_choices originals"
    f" run_context_packs {_ledger.TABLE} run_blobs run_subjects"
).split()
# Primary keys, for INSERT OR REPLACE -> ON CONFLICT (...) DO UPDATE
_KEYS = {
    "originals": ("sha256",),
    "original_index": ("sha256",),
    "run_steps": ("run_id", "n"),
    "run_threads": ("run_id", "thread_id", "n"),
    "run_choices": ("run_id",),
}
_COLUMNS = {
    "run_steps": ("run_id", "n", "step_id"),
    "run_threads": ("run_id", "thread_id", "n", "message"),
    "run_choices": ("run_id", "choices"),
}


class _Dialect:
    """The store's SQLite SQL as Postgres SQL (cached per statement text)."""

    _cache: dict[str, str] = {}
    _REPLACE = re.compile(r"INSERT OR REPLACE INTO (\w+)\s*(\(([^)]*)\))?")
    _IGNORE = re.compile(r"INSERT OR IGNORE INTO")

    @classmethod
    def sql(cls, text: str) -> str:
        """The Postgres form of one statement."""
        done = cls._cache.get(text)
        if done is None:
            done = cls._cache[text] = cls._translate(text)
        return done

    @classmethod
    def _translate(cls, text: str) -> str:
        out = text.replace("%", "%%").replace("?", "%s")
        out = out.replace(
            "max(event_seq, excluded.event_seq)",
            "greatest(checkpoints.event_seq, excluded.event_seq)",
        )
        out = out.replace("ORDER BY rowid", "ORDER BY ord")
        # the ledger's verify reads a row's own record by its physical address
        out = out.replace("rowid", "ctid")
        out = out.replace(
            "SELECT name FROM sqlite_master WHERE type = 'table'",
            "SELECT table_name::text FROM information_schema.tables"
            " WHERE table_schema = current_schema()",
        )
        # Postgres 15 wants a FROM subquery named (the ledger's head)
        out = out.replace(
            " AND ledger_seq IS NOT NULL) ORDER BY", " AND ledger_seq IS NOT NULL) h ORDER BY"
        )
        match = cls._REPLACE.search(out)
        if match:
            table = match.group(1)
            columns = (
                tuple(c.strip() for c in match.group(3).split(","))
                if match.group(3)
                else _COLUMNS[table]
            )
            keys = _KEYS[table]
            sets = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in keys)
            out = out.replace("INSERT OR REPLACE INTO", "INSERT INTO", 1)
            out += f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"
        elif cls._IGNORE.search(out):
            out = out.replace("INSERT OR IGNORE INTO", "INSERT INTO", 1) + " ON CONFLICT DO NOTHING"
        return out


class _Result:
    """Rows of one statement, read whole (a cursor's rows outlive its connection)."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self._rows = rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


def _errors() -> tuple[type[BaseException], type[BaseException], type[BaseException]]:
    import psycopg
    import psycopg_pool

    gone = (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)
    return gone, psycopg.IntegrityError, psycopg.Error  # type: ignore[return-value]


class _Conn:
    """One psycopg connection that speaks like the sqlite3 one the shared code expects.

    Errors come out as the shared code handles them: a taken key as sqlite3.IntegrityError
    (create_run, the ledger's head), a lost server as StoreError STORE_UNAVAILABLE, any
    other database error as sqlite3.DatabaseError (-> STORE_ERROR).
    """

    # statements that may hit a taken key and be retried in the same transaction (the ledger)
    _SAVEPOINT = ("INSERT INTO run_ledger",)

    def __init__(self, conn: Any, where: str) -> None:
        self.conn = conn
        self.where = where

    def _run(self, fn: Callable[[], Any], sql: str) -> Any:
        gone, integrity, error = _errors()
        try:
            if sql.startswith(self._SAVEPOINT) and not self.conn.autocommit:
                with self.conn.transaction():
                    return fn()
            return fn()
        except gone as exc:
            raise unavailable(self.where, exc) from exc
        except integrity as exc:
            raise sqlite3.IntegrityError(str(exc).strip()) from exc
        except (error, UnicodeEncodeError) as exc:
            raise sqlite3.DatabaseError(str(exc).strip()) from exc

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Result:
        text = _Dialect.sql(sql)

        def run() -> _Result:
            cur = self.conn.execute(text, tuple(params) or None)
            return _Result(cur.fetchall() if cur.description is not None else [])

        return self._run(run, sql)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        text = _Dialect.sql(sql)
        batch = [tuple(r) for r in rows]
        if batch:
            self._run(lambda: self.conn.cursor().executemany(text, batch), sql)


class _InTx:
    """One write statement in a transaction of its own (fenced like the store's others)."""

    def __init__(self, store: PostgresRunStore, durability: str | None) -> None:
        self.store = store
        self.durability = durability

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Result:
        result: _Result = self.store._tx(lambda db: db.execute(sql, params), self.durability)
        return result


class _Pooled:
    """Statements outside a transaction: each on a connection borrowed from the pool."""

    def __init__(self, store: PostgresRunStore) -> None:
        self.store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> _Result:
        with self.store._borrow() as conn:
            return _Conn(conn, self.store.path).execute(sql, params)


def unavailable(where: str, exc: BaseException) -> StoreError:
    """A server that cannot be reached or went away, as a coded error."""
    why = " ".join(str(exc).split()) or type(exc).__name__
    return StoreError(
        f"run store {where}: the database is unavailable: {why}", code="STORE_UNAVAILABLE"
    )


class PostgresRunStore(SqliteRunStore):
    """The run store in a PostgreSQL database (`--store postgresql://...`)."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        durability: str = "normal",
        ledger: bool = True,
        pool_max: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Open (and migrate) the store; with create=False a database without one is refused.

        `pool_max` connections at most (default $RUNTIME_STORE_POOL_MAX or 8); `timeout`
        seconds to wait for the server or a free connection (default $RUNTIME_STORE_TIMEOUT
        or 10) before STORE_UNAVAILABLE.
        """
        if durability not in DURABILITY:
            raise StoreError(
                f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}",
                code="DURABILITY_UNKNOWN",
            )
        psycopg, _ = pgpool.drivers("store")
        self.url = url
        self.path = pgpool.shown(url, "run store")
        self.durability = durability
        self._ledger = _ledger.LedgerWriter(key_from_env()) if ledger else None
        self._pack_digests: dict[tuple[str, int], tuple[str, str, str]] = {}
        self._local = threading.local()
        self._runs: dict[str, _RunMemo] = {}
        self._lock = threading.Lock()
        self._fences: dict[str, int] = {}  # run id -> the lease epoch this store writes under
        self.timeout = float(timeout or os.environ.get(TIMEOUT_ENV) or 10)
        size = int(pool_max or os.environ.get(POOL_MAX_ENV) or 8)
        try:
            with psycopg.connect(url, autocommit=True, **pgpool.connect_args(self.timeout)) as conn:
                self._open(_Conn(conn, self.path), create)
        except sqlite3.DatabaseError as exc:  # a migration failed: nothing of it was kept
            raise StoreError(f"cannot open run store {self.path}: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise unavailable(self.path, RuntimeError(scrub(str(exc), url))) from exc
        except psycopg.ProgrammingError as exc:  # a malformed URL or option
            raise StoreError(
                f"run store {self.path}: {scrub(str(exc), url)}", code="STORE_URL_INVALID"
            ) from exc
        self._pool = pgpool.open_pool(
            self, url, size=size, timeout=self.timeout, name="step-runtime-runs"
        )

    # --- connections -------------------------------------------------------------------
    @contextlib.contextmanager
    def _borrow(self) -> Iterator[Any]:
        gone, _, _ = _errors()
        try:
            with self._pool.connection() as conn:
                yield conn
        except gone as exc:
            raise unavailable(self.path, exc) from exc

    def _conn(self) -> Any:
        return _Pooled(self)

    def _durable(self, durability: str | None = None) -> Any:
        # a single write statement (save_pack): in a transaction that checks the run's lease
        return _InTx(self, durability)

    # --- leases (workers): a fencing token checked in every write transaction of a run ----
    def take_lease(self, run_id: str, worker: str) -> int:
        """Take a run's lease for this store's writes: its new epoch (the last one + 1)."""
        epoch = self._tx(
            lambda db: db.execute(
                "INSERT INTO run_leases (run_id, epoch, worker, taken_at) VALUES (?, 1, ?, ?)"
                " ON CONFLICT (run_id) DO UPDATE SET epoch = run_leases.epoch + 1,"
                " worker = excluded.worker, taken_at = excluded.taken_at RETURNING epoch",
                (run_id, worker, time.time()),
            ).fetchone()[0]
        )
        with self._lock:
            self._fences[run_id] = int(epoch)
        return int(epoch)

    def drop_lease(self, run_id: str) -> None:
        """Stop fencing this store's writes of a run (the worker is done with it)."""
        with self._lock:
            self._fences.pop(run_id, None)

    def _check_fence(self, conn: Any) -> None:
        """In a write transaction of a leased run: refuse it unless the lease is still ours."""
        run_id = getattr(self._local, "run", None)
        if run_id is None:
            return
        # A map or parallel branch (`<run>.<step>.<key>`) is written under its run's lease.
        if run_id not in self._fences:
            run_id = run_id.split(".", 1)[0]
        epoch = self._fences.get(run_id)
        if epoch is None:
            return
        # FOR SHARE: a worker taking the lease over waits for this transaction, and this
        # one for its; the epoch read is the one in force when this commits.
        row = conn.execute(
            "SELECT epoch, worker FROM run_leases WHERE run_id = %s FOR SHARE", (run_id,)
        ).fetchone()
        if row is None or int(row[0]) != epoch:
            holder = f"worker {row[1]} (epoch {row[0]})" if row else "nobody"
            raise StoreError(
                f"run store {self.path}: run {run_id}: this worker's lease (epoch {epoch}) was "
                f"taken over by {holder}; the write was refused",
                code="STORE_LEASE_LOST",
            )

    def _tx(self, fn: Callable[[Any], Any], durability: str | None = None) -> Any:
        """fn in one transaction on one pooled connection, committed at the durability wanted."""
        wanted = durability or self.durability
        if wanted not in DURABILITY:
            raise StoreError(
                f"durability must be one of {', '.join(DURABILITY)}, got {wanted!r}",
                code="DURABILITY_UNKNOWN",
            )
        gone, _, error = _errors()
        with self._borrow() as conn:
            try:
                with conn.transaction():
                    conn.execute(
                        "SET LOCAL synchronous_commit TO " + ("on" if wanted == "full" else "off")
                    )
                    self._check_fence(conn)
                    return fn(_Conn(conn, self.path))
            except gone as exc:
                raise unavailable(self.path, exc) from exc
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"run store {self.path}: {exc}") from exc
            except error as exc:  # raised by the COMMIT itself
                raise StoreError(f"run store {self.path}: {exc}") from exc

    def _open(self, db: _Conn, create: bool) -> None:
        """Check the database is a run store (or empty) and apply the missing migrations."""
        present = {
            r[0]
            for r in db.execute(
                "SELECT table_name::text FROM information_schema.tables"
                " WHERE table_schema = current_schema()"
            )
        }
        if MIGRATIONS_TABLE not in present:
            ours = sorted(present & set(TABLES))
            if ours:
                # Another program's tables by our names: never add ours beside them.
                raise StoreError(
                    f"not a run store: {self.path} holds other tables ({', '.join(ours[:5])})"
                )
            if not create:
                raise StoreError(f"no run store at {self.path}", code="STORE_NOT_FOUND")
        self.applied = self.migrate(db)  # what this open applied (`runtime store migrate`)

    @staticmethod
    def migrate(db: _Conn) -> list[str]:
        """Apply the missing migrations in order, under an advisory lock; their names."""
        applied: list[str] = []
        with db.conn.transaction():
            # One process migrates at a time; the others wait here, then find nothing to do.
            db.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE}"
                " (name text PRIMARY KEY, applied_at double precision NOT NULL)"
            )
            done = {r[0] for r in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE}")}
            for name, fn in MIGRATIONS:
                if name not in done:
                    fn(db)
                    db.execute(f"INSERT INTO {MIGRATIONS_TABLE} VALUES (?, ?)", (name, time.time()))
                    applied.append(name)
        return applied

    # --- the few statements that differ -----------------------------------------------
    def rewind(self, run_id: str) -> None:
        """Forget what a run stored after its last checkpoint (before resuming it)."""

        def fn(db: _Conn) -> None:
            db.execute(
                "DELETE FROM run_pointers WHERE run_id = ? AND pointer_id IN"
                " (SELECT pointer_id FROM run_pointers_pending WHERE run_id = ?)",
                (run_id, run_id),
            )
            db.execute("DELETE FROM run_pointers_pending WHERE run_id = ?", (run_id,))
            db.execute(
                "DELETE FROM run_context_packs WHERE run_id = ? AND seq > (SELECT"
                " coalesce(max((data::jsonb ->> 'pack_seq')::bigint), 0) FROM events"
                " WHERE run_id = ? AND type = 'CONTEXT_PACK')",
                (run_id, run_id),
            )

        self._tx(fn)

    def runs(
        self,
        limit: int = 50,
        *,
        status: str | None = None,
        pipeline: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Recent runs, newest first (as SqliteRunStore.runs)."""
        where, args = [], []
        stored = "running" if status == "interrupted" else status
        for column, value in (("status", stored), ("pipeline", pipeline), ("id", run_id)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = (
            "SELECT id, pipeline, status, created_at, greatest(r.updated_at, coalesce(c.updated_at,"
            " 0)), coalesce(c.steps, r.steps), error, ch.choices::jsonb ->> 'main',"
            " r.owner FROM runs r LEFT JOIN checkpoints c ON c.run_id = r.id"
            " LEFT JOIN run_choices ch ON ch.run_id = r.id "
        )
        if where:
            sql += "WHERE " + " AND ".join(where) + " "
        cap = None if stored == "running" else limit
        try:
            rows = self._conn().execute(sql + "ORDER BY created_at DESC LIMIT ?", (*args, cap))
            leases = {
                r[0]: r[1]
                for r in self._conn().execute(
                    "SELECT l.run_id, l.worker FROM run_leases l JOIN runs r ON r.id = l.run_id"
                    " WHERE r.status = 'running'"
                )
            }
            queued = self._conn().execute(
                "SELECT s.run_id, s.pipeline, s.submitted_at FROM run_submissions s"
                " WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = s.run_id)"
                " ORDER BY s.submitted_at DESC"
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"run store {self.path}: runs: {exc} (store damaged?)") from exc
        import json

        out: list[dict[str, Any]] = []
        if status in (None, "queued"):
            for run_id, name, at in queued:
                if pipeline is None or pipeline == name:
                    out.append(
                        {
                            "run_id": run_id,
                            "pipeline": name,
                            "status": "queued",
                            "created_at": at,
                            "updated_at": at,
                            "seconds": 0.0,
                            "steps": 0,
                            "error": None,
                            "model": None,
                            "worker": None,
                        }
                    )
        for r in rows:
            shown = "interrupted" if r[2] == "running" and is_gone(_owner(r[8])) else r[2]
            if status is not None and shown != status:
                continue
            out.append(
                {
                    "run_id": r[0],
                    "pipeline": r[1],
                    "status": shown,
                    "created_at": r[3],
                    "updated_at": r[4],
                    "seconds": round(r[4] - r[3], 3),
                    "steps": r[5],
                    "error": json.loads(r[6]) if r[6] else None,
                    "model": r[7],
                    "worker": leases.get(r[0]) if shown == "running" else None,
                }
            )
        return out[:limit]

    # --- submissions (workers) ----------------------------------------------------------
    def submit_run(
        self,
        run_id: str,
        pipeline: str,
        file: str,
        inputs: dict[str, Any],
        options: dict[str, Any] | None = None,
    ) -> None:
        """Record a run queued for a worker (listed `queued` until a worker starts it);
        options: its --model and --index."""
        import json

        def fn(db: _Conn) -> None:
            taken = db.execute(
                "SELECT 1 FROM runs WHERE id = ? UNION ALL"
                " SELECT 1 FROM run_submissions WHERE run_id = ?",
                (run_id, run_id),
            ).fetchone()
            if taken:
                raise StoreError(f"run id {run_id!r} already exists")
            db.execute(
                "INSERT INTO run_submissions (run_id, pipeline, file, inputs, submitted_at,"
                " options) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    pipeline,
                    file,
                    json.dumps(inputs),
                    time.time(),
                    json.dumps(options or {}),
                ),
            )

        self._tx(fn)

    def submission(self, run_id: str) -> dict[str, Any] | None:
        """A queued run's pipeline file and inputs; None when it was not submitted."""
        import json

        row = (
            self._conn()
            .execute(
                "SELECT pipeline, file, inputs, options FROM run_submissions WHERE run_id = ?",
                (run_id,),
            )
            .fetchone()
        )
        if row is None:
            return None
        return {
            "pipeline": row[0],
            "file": row[1],
            "inputs": json.loads(row[2]),
            "options": json.loads(row[3]),
        }

    def verify_ledger(self, run_id: str, key: bytes | None) -> _ledger.Report:
        """Recompute a run's provenance ledger from its stored rows, text read as bytes."""
        import psycopg
        from psycopg.adapt import Loader

        class _Raw(Loader):
            def load(self, data: Any) -> bytes:
                return pgtext.unescape_bytes(bytes(data))  # the bytes the writer hashed

        gone, _, error = _errors()
        try:
            with psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self.timeout))
            ) as conn:
                for name in ("text", "varchar", "bpchar", "name"):
                    conn.adapters.register_loader(name, _Raw)
                db = _Conn(conn, self.path)
                if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                    raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
                # one snapshot of every table
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    return _ledger.verify_run(db, run_id, key)  # type: ignore[arg-type]
        except gone as exc:
            raise unavailable(self.path, exc) from exc
        except (error, sqlite3.DatabaseError, RecursionError) as exc:
            raise StoreError(f"run store {self.path}: verify: {exc} (store damaged?)") from exc

    def close(self) -> None:
        """Close the pool's connections."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()


def _fenced(name: str) -> Callable[..., Any]:
    """A write method that names its run to the transactions it opens (their lease check)."""
    import functools

    base = getattr(PostgresRunStore, name)

    @functools.wraps(base)
    def method(self: PostgresRunStore, run_id: str, *args: Any, **kwargs: Any) -> Any:
        before = getattr(self._local, "run", None)
        self._local.run = run_id
        try:
            return base(self, run_id, *args, **kwargs)
        finally:
            self._local.run = before

    return method


for _name in (
    "create_run",
    "checkpoint",
    "finish",
    "set_status",
    "rewind",
    "put_original",
    "put_index",
    "save_pack",
    "set_choices",
):
    setattr(PostgresRunStore, _name, _fenced(_name))
