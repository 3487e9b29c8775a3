"""The run store: runs, cheap per-step checkpoints and trace events in one SQLite file.

WAL mode and `BEGIN IMMEDIATE` with a busy timeout let threads and processes share
one file. A checkpoint costs the same at any step of any run: it rewrites only the
variables written since the last checkpoint (large context is not rewritten every
step), appends the new steps and events, and updates two small rows; a run's inputs
are written once, apart from the run row. The schema changes only through the
ordered, named migrations below. A run's first event (RUN_STARTED) is written with the
run; the pointers a step stores before its checkpoint are provisional until it (m006).

Durability (per run, `settings.durability`, `--durability`): `normal` commits to the
WAL without an fsync (a crash of the process loses nothing; a power cut or kernel
crash may lose the last checkpoints, never the file's consistency); `full` fsyncs
the WAL at every checkpoint.
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

from runtime.context.pointers import index_for
from runtime.engine.owner import is_gone, this_process
from runtime.errors import RunError, StoreError, refuse_url
from runtime.format.changes import fingerprint

DEFAULT_PATH = ".runtime/runs.db"


class RunStore(Protocol):
    """What the engine needs from a store (a Postgres store implements the same)."""

    # `durability` ("normal" or "full") is passed only when a run asks for one.
    def create_run(
        self,
        run_id: str,
        pipeline: Any,
        inputs: dict[str, Any],
        *,
        durability: str | None = None,
        events: list[dict[str, Any]] | None = None,
        choices: dict[str, Any] | None = None,
    ) -> None:
        """Record a new run with its first events (RUN_STARTED), in one transaction."""

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
        durability: str | None = None,
    ) -> None:
        """Persist state after a step."""

    def finish(
        self,
        run_id: str,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
        *,
        durability: str | None = None,
    ) -> None:
        """Record the end of a run."""

    def load(self, run_id: str) -> dict[str, Any]:
        """The last checkpoint of a run."""

    def pipeline_parts(self, run_id: str) -> Any:
        """The run's pipeline part by part (runtime/format/changes.py); None: not recorded."""

    def set_status(self, run_id: str, status: str, *, durability: str | None = None) -> None:
        """Change a run's status."""

    def rewind(self, run_id: str) -> None:
        """Forget what a run stored after its last checkpoint (before resuming it)."""

    def choices(self, run_id: str) -> dict[str, Any] | None:
        """The choices a run was started with (runtime/engine/choices.py); None: not recorded."""

    def set_choices(self, run_id: str, choices: dict[str, Any]) -> None:
        """Replace a run's recorded choices (a forced resume, or one of an older run)."""


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


def _m2_append_only(db: sqlite3.Connection) -> None:
    """Inputs out of the run row, the step list into rows of its own (issue 14).

    Every checkpoint updated the run row, which held the inputs (a 1 MB input was
    rewritten each step), and rewrote the whole step list inside the engine record
    (quadratic in the run's length). Existing runs are converted, so they resume.
    """
    db.execute("CREATE TABLE run_inputs (run_id TEXT PRIMARY KEY, inputs TEXT NOT NULL)")
    db.execute("INSERT INTO run_inputs SELECT id, inputs FROM runs")
    db.execute("ALTER TABLE runs DROP COLUMN inputs")
    # The durability a run was started with (NULL: the store's default), kept for resume.
    db.execute("ALTER TABLE runs ADD COLUMN durability TEXT")
    db.execute(
        "CREATE TABLE run_steps (run_id TEXT NOT NULL, n INTEGER NOT NULL, step_id TEXT NOT NULL,"
        " PRIMARY KEY (run_id, n)) WITHOUT ROWID"
    )
    # A run's progress (steps, last update) moves to its checkpoint row, which a checkpoint
    # writes anyway: one row updated per step instead of two.
    db.execute("ALTER TABLE checkpoints ADD COLUMN steps INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE checkpoints ADD COLUMN updated_at REAL")
    db.execute(
        "UPDATE checkpoints SET steps = (SELECT steps FROM runs WHERE id = run_id),"
        " updated_at = (SELECT updated_at FROM runs WHERE id = run_id)"
    )
    for run_id, text in db.execute("SELECT run_id, engine FROM checkpoints").fetchall():
        engine = json.loads(text)
        steps = engine.pop("step_trace", [])
        db.executemany(
            "INSERT INTO run_steps VALUES (?, ?, ?)",
            [(run_id, n, step) for n, step in enumerate(steps)],
        )
        db.execute(
            "UPDATE checkpoints SET engine = ? WHERE run_id = ?", (json.dumps(engine), run_id)
        )


def _m3_pointers(db: sqlite3.Connection) -> None:
    """Originals behind context pointers, stored once by sha256, and each run's pointers."""
    db.execute("CREATE TABLE originals (sha256 TEXT PRIMARY KEY, text TEXT NOT NULL) WITHOUT ROWID")
    db.execute(
        "CREATE TABLE run_pointers (run_id TEXT NOT NULL, pointer_id TEXT NOT NULL,"
        " sha256 TEXT NOT NULL, kind TEXT NOT NULL, PRIMARY KEY (run_id, pointer_id))"
        " WITHOUT ROWID"
    )


def _m4_threads(db: sqlite3.Connection) -> None:
    """Conversation threads of `full` model steps (docs/fidelity.md), appended message by message."""
    db.execute(
        "CREATE TABLE run_threads (run_id TEXT NOT NULL, thread_id TEXT NOT NULL,"
        " n INTEGER NOT NULL, message TEXT NOT NULL, PRIMARY KEY (run_id, thread_id, n))"
        " WITHOUT ROWID"
    )


def _m5_original_index(db: sqlite3.Connection) -> None:
    """JSON originals' offset indexes, and their text in chunks a slice can read alone.

    Originals stored before this migration get both on their first JSON-path slice.
    """
    db.execute(
        "CREATE TABLE original_index (sha256 TEXT PRIMARY KEY, offsets BLOB NOT NULL) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE original_chunks (sha256 TEXT NOT NULL, n INTEGER NOT NULL,"
        " text TEXT NOT NULL, PRIMARY KEY (sha256, n)) WITHOUT ROWID"
    )


def _m6_pointers_pending(db: sqlite3.Connection) -> None:
    """A run's pointers stored since its last checkpoint, provisional until the next one.

    A step stores its pointers as it runs, its checkpoint comes after: killed between the
    two, the step runs again on resume and must find the run's pointers as they were at
    the checkpoint (call_model counts a compaction only for a pointer the run did not have;
    issue 25). The trigger marks every new `run_pointers` row; a checkpoint clears the
    run's marks in its transaction; a resume (`rewind`) deletes the rows still marked.
    `run_pointers` rows are inserted OR IGNORE, never replaced: a replaced row would be
    marked again although a checkpoint already holds it.
    """
    db.execute(
        "CREATE TABLE run_pointers_pending (run_id TEXT NOT NULL, pointer_id TEXT NOT NULL,"
        " PRIMARY KEY (run_id, pointer_id)) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TRIGGER run_pointers_pending AFTER INSERT ON run_pointers BEGIN"
        " INSERT OR IGNORE INTO run_pointers_pending VALUES (new.run_id, new.pointer_id); END"
    )


def _m7_run_choices(db: sqlite3.Connection) -> None:
    """The choices a run is started with besides its pipeline: model, index, tokenizer (issue 23).

    Runs stored before this migration have none; a resume says so and records its own.
    """
    db.execute(
        "CREATE TABLE run_choices (run_id TEXT PRIMARY KEY, choices TEXT NOT NULL) WITHOUT ROWID"
    )


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_initial", _m1_initial),
    ("m002_append_only", _m2_append_only),
    ("m003_pointers", _m3_pointers),
    ("m004_threads", _m4_threads),
    ("m005_original_index", _m5_original_index),
    ("m006_pointers_pending", _m6_pointers_pending),
    ("m007_run_choices", _m7_run_choices),
]
# Characters per stored chunk of an indexed original: a slice reads the few chunks its
# range covers (loading a 5 MB original whole from SQLite takes 6-45 ms).
CHUNK = 16_384
DURABILITY = {"normal": "NORMAL", "full": "FULL"}  # -> PRAGMA synchronous


def _owner(text: str | None) -> dict[str, Any] | None:
    """A stored owner record; None when none was recorded or it is not one."""
    try:
        owner = json.loads(text) if text else None
    except ValueError:
        return None
    return owner if isinstance(owner, dict) else None


def _m9_pipeline_parts(db: sqlite3.Connection) -> None:
    """A run's pipeline, part by part as short hashes, so PIPELINE_CHANGED can say what changed.

    runtime/format/changes.py; runs stored before this migration have none, and their
    PIPELINE_CHANGED says that it cannot tell.
    """
    db.execute("ALTER TABLE runs ADD COLUMN pipeline_parts TEXT")


def _m10_run_owner(db: sqlite3.Connection) -> None:
    """The process running a run (host, pid, start time): runtime/engine/owner.py."""
    db.execute("ALTER TABLE runs ADD COLUMN owner TEXT")


MIGRATIONS += [("m009_pipeline_parts", _m9_pipeline_parts), ("m010_run_owner", _m10_run_owner)]


class _RunMemo:
    """What a store remembers of a run between checkpoints: stored hashes, stored steps."""

    __slots__ = ("hashes", "steps", "threads")

    def __init__(
        self,
        hashes: dict[str, str] | None = None,
        steps: int = 0,
        threads: dict[str, int] | None = None,
    ) -> None:
        self.hashes = hashes if hashes is not None else {}
        self.steps = steps
        self.threads = threads if threads is not None else {}  # thread id -> stored messages


def default_path() -> str:
    """`$RUNTIME_STORE`, else .runtime/runs.db under the working directory."""
    return os.environ.get("RUNTIME_STORE") or DEFAULT_PATH


class SqliteRunStore:
    """The default run store."""

    def __init__(
        self, path: str | None = None, *, create: bool = True, durability: str = "normal"
    ) -> None:
        """Open the store; with create=False (the reading commands) a missing file is refused.

        `durability` applies to runs that do not choose their own (see the module doc).
        """
        if durability not in DURABILITY:
            raise StoreError(
                f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}",
                code="DURABILITY_UNKNOWN",
            )
        self.durability = durability
        raw = path or default_path()
        refuse_url(raw, "run store")
        self.path = str(Path(raw))
        if not create and not Path(self.path).is_file():
            # A mistyped --store must not answer "no runs" from a new empty file.
            raise StoreError(f"no run store at {self.path}", code="STORE_NOT_FOUND")
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._runs: dict[str, _RunMemo] = {}
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
                conn.execute(f"PRAGMA synchronous={DURABILITY[self.durability]}")
                conn.execute("PRAGMA busy_timeout=30000")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open run store {self.path}: {exc}") from exc
            self._local.conn = conn
            self._local.durability = self.durability
        return conn

    def _tx(self, fn: Callable[[sqlite3.Connection], Any], durability: str | None = None) -> Any:
        """Run fn in an IMMEDIATE transaction, retrying while another writer holds the lock."""
        conn = self._conn()
        wanted = durability or self.durability
        if wanted != self._local.durability:  # per connection, and only between transactions
            if wanted not in DURABILITY:
                raise StoreError(
                    f"durability must be one of {', '.join(DURABILITY)}, got {wanted!r}",
                    code="DURABILITY_UNKNOWN",
                )
            conn.execute(f"PRAGMA synchronous={DURABILITY[wanted]}")
            self._local.durability = wanted
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
    def create_run(
        self,
        run_id: str,
        pipeline: Any,
        inputs: dict[str, Any],
        *,
        durability: str | None = None,
        events: list[dict[str, Any]] | None = None,
        choices: dict[str, Any] | None = None,
    ) -> None:
        """Record a new run (a duplicate id is an error); its inputs are stored once.

        `events` (the engine's RUN_STARTED) are written in the same transaction, so a run
        killed before its first checkpoint still begins its trace with them.
        """
        now = time.time()
        data = self._event_rows(run_id, events or [])
        # What a resume compares part by part, and the process running the run.
        parts = json.dumps(fingerprint(pipeline))
        owner = json.dumps(this_process())

        def fn(db: sqlite3.Connection) -> None:
            try:
                db.execute(
                    "INSERT INTO runs (id, pipeline, file, content_hash, status, created_at,"
                    " updated_at, durability, pipeline_parts, owner)"
                    " VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        pipeline.name,
                        pipeline.file,
                        pipeline.content_hash,
                        now,
                        now,
                        durability,
                        parts,
                        owner,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"run id {run_id!r} already exists") from exc
            # Apart from the runs row, which every checkpoint updates: a 1 MB input is
            # written here once, not again with every step.
            db.execute("INSERT INTO run_inputs VALUES (?, ?)", (run_id, json.dumps(inputs)))
            if data:
                db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", data)
            if choices is not None:
                db.execute("INSERT INTO run_choices VALUES (?, ?)", (run_id, json.dumps(choices)))

        self._tx(fn, durability)
        with self._lock:
            self._runs[run_id] = _RunMemo()

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
        durability: str | None = None,
    ) -> None:
        """Write changed variables, new steps, the engine part and new events in one transaction.

        `changed` names the variables written since the last checkpoint; the others are
        neither serialised nor rewritten, so a large unchanged context costs nothing.
        `engine["step_trace"]` is appended: only the steps since the last checkpoint are
        written, so a checkpoint costs the same at step 10 and at step 100,000.
        """
        memo = self._memo(run_id)
        known = memo.hashes
        rows: list[tuple[str, str, str, str]] = []
        removed: list[tuple[str, str]] = []
        names = variables.keys() if changed is None else changed
        for name in names:
            if name not in variables:
                if name in known:
                    removed.append((run_id, name))
                continue
            text = json.dumps(variables[name], sort_keys=True)
            digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            if known.get(name) != digest:
                rows.append((run_id, name, digest, text))
        if changed is None:  # a full pass also finds variables removed since the last one
            removed.extend((run_id, n) for n in known if n not in variables)
        trace = engine.get("step_trace", ())
        new_steps = [(run_id, n, s) for n, s in enumerate(trace[memo.steps :], memo.steps)]
        # Threads are appended like steps: only the messages since the last checkpoint.
        threads = engine.get("threads") or {}
        new_messages = [
            (run_id, tid, n, json.dumps(m))
            for tid, messages in threads.items()
            for n, m in enumerate(messages[memo.threads.get(tid, 0) :], memo.threads.get(tid, 0))
        ]
        state = json.dumps({k: v for k, v in engine.items() if k not in ("step_trace", "threads")})
        seq = events[-1]["seq"] if events else 0
        data = self._event_rows(run_id, events)

        def fn(db: sqlite3.Connection) -> None:
            if rows:
                db.executemany("INSERT OR REPLACE INTO run_vars VALUES (?, ?, ?, ?)", rows)
            if removed:
                db.executemany("DELETE FROM run_vars WHERE run_id = ? AND name = ?", removed)
            if new_steps:
                db.executemany("INSERT OR REPLACE INTO run_steps VALUES (?, ?, ?)", new_steps)
            if new_messages:
                db.executemany(
                    "INSERT OR REPLACE INTO run_threads VALUES (?, ?, ?, ?)", new_messages
                )
            db.execute(
                "INSERT INTO checkpoints (run_id, position, engine, event_seq, steps, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(run_id) DO UPDATE"
                " SET position = excluded.position, engine = excluded.engine,"
                " event_seq = max(event_seq, excluded.event_seq), steps = excluded.steps,"
                " updated_at = excluded.updated_at",
                (run_id, position, state, seq, engine.get("step_count", 0), time.time()),
            )
            if data:
                db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", data)
            # The pointers stored since the last checkpoint are the run's now (see m006).
            db.execute("DELETE FROM run_pointers_pending WHERE run_id = ?", (run_id,))
            if status != "running":  # a running run's row already says so (set_status)
                db.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))

        self._tx(fn, durability)
        # Only after the commit: a failed transaction leaves the memo as the store is.
        with self._lock:
            for _, name, digest, _ in rows:
                known[name] = digest
            for _, name in removed:
                known.pop(name, None)
            memo.steps = max(memo.steps, len(trace))
            for tid, messages in threads.items():
                memo.threads[tid] = max(memo.threads.get(tid, 0), len(messages))

    @staticmethod
    def _event_rows(run_id: str, events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(run_id, e["seq"], e["type"], e.get("step_id"), json.dumps(e)) for e in events]

    def finish(
        self,
        run_id: str,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
        *,
        durability: str | None = None,
    ) -> None:
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
            ),
            durability,
        )

    def rewind(self, run_id: str) -> None:
        """Forget what a run stored after its last checkpoint (before resuming it).

        A step killed before its checkpoint runs again; the pointers it stored are dropped
        (the originals stay, stored by content), so it finds the run as the checkpoint left it.
        """

        def fn(db: sqlite3.Connection) -> None:
            db.execute(
                "DELETE FROM run_pointers WHERE run_id = ? AND pointer_id IN"
                " (SELECT pointer_id FROM run_pointers_pending WHERE run_id = ?)",
                (run_id, run_id),
            )
            db.execute("DELETE FROM run_pointers_pending WHERE run_id = ?", (run_id,))

        self._tx(fn)

    def set_status(self, run_id: str, status: str, *, durability: str | None = None) -> None:
        """Change a run's status; a run set running (resumed) is owned by this process."""
        owner = json.dumps(this_process()) if status == "running" else None
        self._tx(
            lambda db: db.execute(
                "UPDATE runs SET status = ?, updated_at = ?, owner = coalesce(?, owner)"
                " WHERE id = ?",
                (status, time.time(), owner, run_id),
            ),
            durability,
        )

    def pipeline_parts(self, run_id: str) -> Any:
        """The run's pipeline as recorded part by part (runtime/format/changes.py); None: not.

        A record that is not JSON (a damaged store) is returned as its text, for the
        caller to say so (`changes.since`).
        """
        row = (
            self._conn()
            .execute("SELECT pipeline_parts FROM runs WHERE id = ?", (run_id,))
            .fetchone()
        )
        if row is None or not row[0]:
            return None
        try:
            return json.loads(row[0])
        except ValueError:
            return row[0]

    def choices(self, run_id: str) -> dict[str, Any] | None:
        """The choices a run was started with (runtime/engine/choices.py); None: not recorded."""
        row = (
            self._conn()
            .execute("SELECT choices FROM run_choices WHERE run_id = ?", (run_id,))
            .fetchone()
        )
        return None if row is None else dict(json.loads(row[0]))

    def set_choices(self, run_id: str, choices: dict[str, Any]) -> None:
        """Replace a run's recorded choices (a forced resume, or one of an older run)."""
        self._tx(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO run_choices VALUES (?, ?)", (run_id, json.dumps(choices))
            )
        )

    def _memo(self, run_id: str) -> _RunMemo:
        """What this store knows of a run it did not create or load: read from the file."""
        with self._lock:
            memo = self._runs.get(run_id)
        if memo is None:
            db = self._conn()
            memo = _RunMemo(
                dict(db.execute("SELECT name, hash FROM run_vars WHERE run_id = ?", (run_id,))),
                db.execute("SELECT count(*) FROM run_steps WHERE run_id = ?", (run_id,)).fetchone()[
                    0
                ],
                self._thread_counts(db, run_id),
            )
            with self._lock:
                self._runs[run_id] = memo
        return memo

    def load(self, run_id: str) -> dict[str, Any]:
        """The run row, its variables and its last checkpoint."""
        db = self._conn()
        row = db.execute(
            "SELECT r.status, r.content_hash, i.inputs, r.durability FROM runs r"
            " LEFT JOIN run_inputs i ON i.run_id = r.id WHERE r.id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
        cp = db.execute(
            "SELECT position, engine, event_seq FROM checkpoints WHERE run_id = ?", (run_id,)
        ).fetchone()
        variables: dict[str, Any] = {}
        hashes: dict[str, str] = {}
        for name, digest, value in db.execute(
            "SELECT name, hash, value FROM run_vars WHERE run_id = ? ORDER BY rowid", (run_id,)
        ):
            variables[name] = json.loads(value)
            hashes[name] = digest
        steps = [
            s
            for (s,) in db.execute(
                "SELECT step_id FROM run_steps WHERE run_id = ? ORDER BY n", (run_id,)
            )
        ]
        threads = self.threads(run_id, db)
        with self._lock:
            self._runs[run_id] = _RunMemo(
                hashes, len(steps), {t: len(m) for t, m in threads.items()}
            )
        inputs = json.loads(row[2]) if row[2] is not None else {}
        if cp is None:  # crashed before the first checkpoint: start over from the entry
            (seq,) = db.execute(  # the events stored with the run (RUN_STARTED)
                "SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
            return {
                "status": row[0],
                "content_hash": row[1],
                "inputs": inputs,
                "durability": row[3],
                "variables": dict(inputs),
                "engine": {},
                "position": None,
                "event_seq": seq,
                "fresh": True,
            }
        return {
            "status": row[0],
            "content_hash": row[1],
            "inputs": inputs,
            "durability": row[3],
            "variables": variables,
            "engine": {**json.loads(cp[1]), "step_trace": steps, "threads": threads},
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

    def runs(
        self, limit: int = 50, *, status: str | None = None, pipeline: str | None = None
    ) -> list[dict[str, Any]]:
        """Recent runs, newest first; only those with this status and pipeline name when given.

        A `running` run whose process is gone (runtime/engine/owner.py) is listed as
        `interrupted`, and `status="interrupted"` selects those.
        """
        where, args = [], []
        stored = "running" if status == "interrupted" else status
        for column, value in (("status", stored), ("pipeline", pipeline)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        # steps and the last update come from the checkpoint row when there is one
        sql = (
            "SELECT id, pipeline, status, created_at, max(r.updated_at, coalesce(c.updated_at,"
            " 0)), coalesce(c.steps, r.steps), error, json_extract(ch.choices, '$.main'),"
            " r.owner FROM runs r LEFT JOIN checkpoints c ON c.run_id = r.id"
            " LEFT JOIN run_choices ch ON ch.run_id = r.id "
        )
        if where:
            sql += "WHERE " + " AND ".join(where) + " "
        # running and interrupted are told apart here: the limit applies after that
        cap = -1 if stored == "running" else limit
        rows = (
            self._conn().execute(sql + "ORDER BY created_at DESC LIMIT ?", (*args, cap)).fetchall()
        )
        statuses = [
            "interrupted" if r[2] == "running" and is_gone(_owner(r[8])) else r[2] for r in rows
        ]
        return [
            {
                "run_id": r[0],
                "pipeline": r[1],
                "status": shown,
                "created_at": r[3],
                "updated_at": r[4],
                "seconds": round(r[4] - r[3], 3),
                "steps": r[5],
                "error": json.loads(r[6]) if r[6] else None,
                "model": r[7],  # the model of calls that name none; None: not recorded
            }
            for r, shown in zip(rows, statuses, strict=True)
            if status is None or shown == status
        ][:limit]

    # --- context pointers (runtime/context/pointers.py) ---------------------------
    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Store an original once (by sha256), with its offset index, and the run's pointer."""
        known = (
            self._conn().execute("SELECT 1 FROM originals WHERE sha256 = ?", (sha256,)).fetchone()
        )
        index = None if known else index_for(kind, text)  # built outside the write lock

        def fn(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR IGNORE INTO originals VALUES (?, ?)", (sha256, text))
            if index is not None:
                self._write_index(db, sha256, text, index)
            db.execute(
                "INSERT OR IGNORE INTO run_pointers VALUES (?, ?, ?, ?)",
                (run_id, pointer_id, sha256, kind),
            )

        self._tx(fn)

    @staticmethod
    def _write_index(db: sqlite3.Connection, sha256: str, text: str, index: bytes) -> None:
        db.execute("INSERT OR REPLACE INTO original_index VALUES (?, ?)", (sha256, index))
        db.execute("DELETE FROM original_chunks WHERE sha256 = ?", (sha256,))
        db.executemany(
            "INSERT INTO original_chunks VALUES (?, ?, ?)",
            ((sha256, n, text[at : at + CHUNK]) for n, at in enumerate(range(0, len(text), CHUNK))),
        )

    def get_original(self, run_id: str, pointer_id: str) -> tuple[str, str] | None:
        """(kind, text) of a run's pointer, or None."""
        row = (
            self._conn()
            .execute(
                "SELECT p.kind, o.text FROM run_pointers p JOIN originals o ON o.sha256 = p.sha256"
                " WHERE p.run_id = ? AND p.pointer_id = ?",
                (run_id, pointer_id),
            )
            .fetchone()
        )
        return None if row is None else (row[0], row[1])

    def get_index(self, run_id: str, pointer_id: str) -> tuple[str, bytes | None] | None:
        """(kind, stored offset index or None) of a run's pointer, or None."""
        row = (
            self._conn()
            .execute(
                "SELECT p.kind, i.offsets FROM run_pointers p"
                " LEFT JOIN original_index i ON i.sha256 = p.sha256"
                " WHERE p.run_id = ? AND p.pointer_id = ?",
                (run_id, pointer_id),
            )
            .fetchone()
        )
        return None if row is None else (row[0], row[1])

    def put_index(self, run_id: str, pointer_id: str, text: str, index: bytes) -> None:
        """Keep the offset index (and chunks) of an original stored before m005."""

        def fn(db: sqlite3.Connection) -> None:
            row = db.execute(
                "SELECT sha256 FROM run_pointers WHERE run_id = ? AND pointer_id = ?",
                (run_id, pointer_id),
            ).fetchone()
            if row is not None:
                self._write_index(db, row[0], text, index)

        self._tx(fn)

    def read_original(self, run_id: str, pointer_id: str, start: int, end: int) -> str:
        """Characters start..end of an indexed original, read from the chunks they span."""
        if end <= start:
            return ""
        first, last = start // CHUNK, (end - 1) // CHUNK
        parts = [
            t
            for (t,) in self._conn().execute(
                "SELECT c.text FROM run_pointers p JOIN original_chunks c ON c.sha256 = p.sha256"
                " WHERE p.run_id = ? AND p.pointer_id = ? AND c.n BETWEEN ? AND ? ORDER BY c.n",
                (run_id, pointer_id, first, last),
            )
        ]
        if len(parts) != last - first + 1:
            raise StoreError(
                f"run store {self.path}: {pointer_id} has {len(parts)} of the "
                f"{last - first + 1} chunks for characters {start}-{end} (store damaged)"
            )
        return "".join(parts)[start - first * CHUNK : end - first * CHUNK]

    def pointers(self, run_id: str) -> list[dict[str, Any]]:
        """A run's pointers (id, sha256, kind, characters), in id order."""
        return [
            {"pointer_id": p, "sha256": sha, "kind": kind, "chars": chars}
            for p, sha, kind, chars in self._conn().execute(
                "SELECT p.pointer_id, p.sha256, p.kind, length(o.text) FROM run_pointers p"
                " JOIN originals o ON o.sha256 = p.sha256 WHERE p.run_id = ?"
                " ORDER BY p.pointer_id",
                (run_id,),
            )
        ]

    @staticmethod
    def _thread_counts(db: sqlite3.Connection, run_id: str) -> dict[str, int]:
        return dict(
            db.execute(
                "SELECT thread_id, count(*) FROM run_threads WHERE run_id = ? GROUP BY thread_id",
                (run_id,),
            )
        )

    def threads(
        self, run_id: str, db: sqlite3.Connection | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """A run's conversation threads as checkpointed: thread id -> messages in order."""
        out: dict[str, list[dict[str, Any]]] = {}
        for tid, text in (db or self._conn()).execute(
            "SELECT thread_id, message FROM run_threads WHERE run_id = ? ORDER BY thread_id, n",
            (run_id,),
        ):
            out.setdefault(tid, []).append(json.loads(text))
        return out

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """A run's trace events in order, each naming its run (`run_id`)."""
        self.load(run_id)  # RUN_NOT_FOUND for unknown ids
        # Events stored before they carried run_id get it here, so every reader sees one shape.
        return [
            {"run_id": run_id, **json.loads(d)}
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
