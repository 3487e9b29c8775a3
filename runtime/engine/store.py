"""The run store: runs, cheap per-step checkpoints and trace events in one SQLite file.

WAL mode and `BEGIN IMMEDIATE` with a busy timeout let threads and processes share
one file. A checkpoint rewrites only the variables whose JSON changed since the
last checkpoint of that run (large context is not rewritten every step). The
schema changes only through the ordered, named migrations below.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from runtime.errors import RunError, StoreError

DEFAULT_PATH = ".runtime/runs.db"


class RunStore(Protocol):
    """What the engine needs from a store (a Postgres store implements the same)."""

    def create_run(self, run_id: str, pipeline: Any, inputs: dict[str, Any]) -> None:
        """Record a new run."""

    def checkpoint(
        self,
        run_id: str,
        *,
        position: str | None,
        variables: dict[str, Any],
        engine: dict[str, Any],
        events: list[dict[str, Any]],
        status: str,
    ) -> None:
        """Persist state after a step."""

    def finish(self, run_id: str, status: str, output: Any, error: dict[str, Any] | None) -> None:
        """Record the end of a run."""

    def load(self, run_id: str) -> dict[str, Any]:
        """The last checkpoint of a run."""

    def set_status(self, run_id: str, status: str) -> None:
        """Change a run's status."""


def _m1_initial(db: sqlite3.Connection) -> None:
    # Statement by statement: executescript() would commit the migration transaction.
    for statement in _split("""
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, pipeline TEXT NOT NULL, file TEXT, content_hash TEXT NOT NULL,
            status TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
            inputs TEXT NOT NULL, output TEXT, error TEXT, steps INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE run_vars (
            run_id TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (run_id, name));
        CREATE TABLE checkpoints (
            run_id TEXT PRIMARY KEY, position TEXT, engine TEXT NOT NULL, event_seq INTEGER NOT NULL);
        CREATE TABLE events (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, step_id TEXT,
            data TEXT NOT NULL, PRIMARY KEY (run_id, seq));
        CREATE INDEX runs_created ON runs (created_at);
    """):
        db.execute(statement)


def _split(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [("m001_initial", _m1_initial)]


def default_path() -> str:
    """`$RUNTIME_STORE`, else .runtime/runs.db under the working directory."""
    return os.environ.get("RUNTIME_STORE") or DEFAULT_PATH


class SqliteRunStore:
    """The default run store."""

    def __init__(self, path: str | None = None) -> None:
        self.path = str(Path(path or default_path()))
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._hashes: dict[str, dict[str, str]] = {}  # run -> var -> hash of the stored JSON
        self._lock = threading.Lock()
        self._tx(self._migrate)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=30, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA busy_timeout=30000")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open run store {self.path}: {exc}") from exc
            self._local.conn = conn
        return conn

    def _tx(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn in an IMMEDIATE transaction, retrying while another writer holds the lock."""
        conn = self._conn()
        delay = 0.005
        for _ in range(200):
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise StoreError(f"run store {self.path}: {exc}") from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        raise StoreError(f"run store {self.path} stayed locked")

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        done = {r[0] for r in db.execute("SELECT name FROM migrations")}
        for name, fn in MIGRATIONS:
            if name not in done:
                fn(db)
                db.execute("INSERT INTO migrations VALUES (?, ?)", (name, time.time()))

    # --- engine side -----------------------------------------------------------
    def create_run(self, run_id: str, pipeline: Any, inputs: dict[str, Any]) -> None:
        """Record a new run (a duplicate id is an error)."""
        now = time.time()

        def fn(db: sqlite3.Connection) -> None:
            try:
                db.execute(
                    "INSERT INTO runs (id, pipeline, file, content_hash, status, created_at,"
                    " updated_at, inputs) VALUES (?, ?, ?, ?, 'running', ?, ?, ?)",
                    (
                        run_id,
                        pipeline.name,
                        pipeline.file,
                        pipeline.content_hash,
                        now,
                        now,
                        json.dumps(inputs),
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"run id {run_id!r} already exists") from exc

        self._tx(fn)
        with self._lock:
            self._hashes[run_id] = {}

    def checkpoint(
        self,
        run_id: str,
        *,
        position: str | None,
        variables: dict[str, Any],
        engine: dict[str, Any],
        events: list[dict[str, Any]],
        status: str,
        changed: set[str] | None = None,
    ) -> None:
        """Write changed variables, the engine part and new events in one transaction.

        `changed` names the variables written since the last checkpoint; the others are
        neither serialised nor rewritten, so a large unchanged context costs nothing.
        """
        with self._lock:
            known = self._hashes.setdefault(run_id, {})
        changed_rows: list[tuple[str, str, str, str]] = []
        current: dict[str, str] = {}
        for name, value in variables.items():
            if changed is not None and name not in changed and name in known:
                current[name] = known[name]
                continue
            text = json.dumps(value, sort_keys=True)
            digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            current[name] = digest
            if known.get(name) != digest:
                changed_rows.append((run_id, name, digest, text))
        removed = [(run_id, n) for n in known if n not in current]
        seq = events[-1]["seq"] if events else None

        def fn(db: sqlite3.Connection) -> None:
            if changed_rows:
                db.executemany("INSERT OR REPLACE INTO run_vars VALUES (?, ?, ?, ?)", changed_rows)
            if removed:
                db.executemany("DELETE FROM run_vars WHERE run_id = ? AND name = ?", removed)
            db.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?) ON CONFLICT(run_id) DO UPDATE"
                " SET position = excluded.position, engine = excluded.engine,"
                " event_seq = max(event_seq, excluded.event_seq)",
                (run_id, position, json.dumps(engine), seq or 0),
            )
            if events:
                db.executemany(
                    "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                    [
                        (run_id, e["seq"], e["type"], e.get("step_id"), json.dumps(e))
                        for e in events
                    ],
                )
            db.execute(
                "UPDATE runs SET status = ?, updated_at = ?, steps = ? WHERE id = ?",
                (status, time.time(), engine.get("step_count", 0), run_id),
            )

        self._tx(fn)
        with self._lock:
            self._hashes[run_id] = current

    def finish(self, run_id: str, status: str, output: Any, error: dict[str, Any] | None) -> None:
        """Record the end of a run."""
        self._tx(
            lambda db: db.execute(
                "UPDATE runs SET status = ?, output = ?, error = ?, updated_at = ? WHERE id = ?",
                (
                    status,
                    json.dumps(output),
                    json.dumps(error) if error else None,
                    time.time(),
                    run_id,
                ),
            )
        )

    def set_status(self, run_id: str, status: str) -> None:
        """Change a run's status."""
        self._tx(
            lambda db: db.execute(
                "UPDATE runs SET status = ?, updated_at = ? WHERE id = ?",
                (status, time.time(), run_id),
            )
        )

    def load(self, run_id: str) -> dict[str, Any]:
        """The run row, its variables and its last checkpoint."""
        db = self._conn()
        row = db.execute(
            "SELECT status, content_hash, inputs FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
        if row is None:
            raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
        cp = db.execute(
            "SELECT position, engine, event_seq FROM checkpoints WHERE run_id = ?", (run_id,)
        ).fetchone()
        variables = {
            n: json.loads(v)
            for n, v in db.execute(
                "SELECT name, value FROM run_vars WHERE run_id = ? ORDER BY rowid", (run_id,)
            )
        }
        with self._lock:
            self._hashes[run_id] = {
                n: h
                for n, h in db.execute(
                    "SELECT name, hash FROM run_vars WHERE run_id = ?", (run_id,)
                )
            }
        if cp is None:  # crashed before the first checkpoint: start over from the entry
            inputs = json.loads(row[2])
            return {
                "status": row[0],
                "content_hash": row[1],
                "inputs": inputs,
                "variables": dict(inputs),
                "engine": {},
                "position": None,
                "event_seq": 0,
                "fresh": True,
            }
        return {
            "status": row[0],
            "content_hash": row[1],
            "inputs": json.loads(row[2]),
            "variables": variables,
            "engine": json.loads(cp[1]),
            "position": cp[0],
            "event_seq": cp[2],
            "fresh": False,
        }

    # --- reading ---------------------------------------------------------------
    def run_file(self, run_id: str) -> str:
        """The pipeline file a run was started from."""
        row = self._conn().execute("SELECT file FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
        return str(row[0])

    def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        """Recent runs, newest first."""
        rows = (
            self._conn()
            .execute(
                "SELECT id, pipeline, status, created_at, updated_at, steps, error FROM runs "
                "ORDER BY created_at DESC LIMIT ?",
                (limit,),
            )
            .fetchall()
        )
        return [
            {
                "run_id": r[0],
                "pipeline": r[1],
                "status": r[2],
                "created_at": r[3],
                "updated_at": r[4],
                "seconds": round(r[4] - r[3], 3),
                "steps": r[5],
                "error": json.loads(r[6]) if r[6] else None,
            }
            for r in rows
        ]

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """A run's trace events in order."""
        self.load(run_id)  # RUN_NOT_FOUND for unknown ids
        return [
            json.loads(d)
            for (d,) in self._conn().execute(
                "SELECT data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
        ]

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
