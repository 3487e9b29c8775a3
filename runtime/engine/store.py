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

import contextlib
import functools
import hashlib
import json
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from runtime.context.pointers import index_for
from runtime.engine import blobs as _blobs
from runtime.engine import ledger as _ledger
from runtime.engine.owner import is_gone, this_process
from runtime.errors import RunError, StoreError, refuse_url
from runtime.format.changes import fingerprint
from runtime.governance.ledger import key_from_env
from runtime.governance.subject import subject_of

DEFAULT_PATH = ".runtime/runs.db"

F = TypeVar("F", bound=Callable[..., Any])


def _reader(method: F) -> F:
    """A reading method whose SQLite errors and undecodable rows are STORE_ERROR.

    A damaged file makes SQLite fail ("database disk image is malformed") or hand back
    rows that do not decode: `runtime runs`, `trace` and `resume` then report STORE_ERROR
    naming the store, never a traceback.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, ValueError, TypeError) as exc:
            raise StoreError(
                f"run store {self.path}: {method.__name__}: {exc} (store damaged?)"
            ) from exc

    return wrapper  # type: ignore[return-value]


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


def _m8_originals_once(db: sqlite3.Connection) -> None:
    """Originals stored once, in checksummed chunks; indexes and pointer rows checksummed.

    Before: an original's text in `originals` and, when indexed, again in
    `original_chunks` (two copies), and nothing checked what was read back. Now the text
    lives only in chunks, each with a CRC-32 bound to its original and position; the
    `originals` row holds the length, chunk count and its own CRC; every offset index and
    every `run_pointers` row carries a CRC too (issue 25). Existing originals are converted
    one at a time (their checksums are computed from the text as it is then: damage done
    before this migration cannot be told from the text).
    """
    db.execute("ALTER TABLE originals RENAME TO originals_m3")
    db.execute(
        "CREATE TABLE originals (sha256 TEXT PRIMARY KEY, chars INTEGER NOT NULL,"
        " chunks INTEGER NOT NULL, crc INTEGER NOT NULL) WITHOUT ROWID"
    )
    db.execute("ALTER TABLE original_chunks ADD COLUMN crc INTEGER")
    db.execute("ALTER TABLE original_index ADD COLUMN crc INTEGER")
    db.execute("ALTER TABLE run_pointers ADD COLUMN crc INTEGER")
    for (sha,) in db.execute("SELECT sha256 FROM originals_m3").fetchall():
        (text,) = db.execute("SELECT text FROM originals_m3 WHERE sha256 = ?", (sha,)).fetchone()
        _write_text(db, sha, text)
    for sha, blob in db.execute("SELECT sha256, offsets FROM original_index").fetchall():
        db.execute(
            "UPDATE original_index SET crc = ? WHERE sha256 = ?", (_index_crc(sha, blob), sha)
        )
    for row in db.execute("SELECT run_id, pointer_id, sha256, kind FROM run_pointers").fetchall():
        db.execute(
            "UPDATE run_pointers SET crc = ? WHERE run_id = ? AND pointer_id = ?",
            (_pointer_crc(*row), row[0], row[1]),
        )
    db.execute("DROP TABLE originals_m3")


def _crc(seed: str, data: bytes) -> int:
    """CRC-32 of data bound to what it is (a chunk's original and number, an index's original)."""
    return zlib.crc32(data, zlib.crc32(seed.encode("utf-8", "surrogatepass")))


def _chunk_crc(sha256: str, n: int, text: str) -> int:
    return _crc(f"chunk {sha256} {n}", text.encode("utf-8", "surrogatepass"))


def _head_crc(sha256: str, chars: int, chunks: int) -> int:
    return _crc(f"original {sha256} {chars} {chunks}", b"")


def _index_crc(sha256: str, blob: bytes) -> int:
    return _crc(f"index {sha256}", bytes(blob))


def _pointer_crc(run_id: str, pointer_id: str, sha256: str, kind: str) -> int:
    return _crc(f"pointer {run_id} {pointer_id} {sha256} {kind}", b"")


def _write_text(db: sqlite3.Connection, sha256: str, text: str) -> None:
    """An original's text as checksummed chunks and its head row (the only copy stored)."""
    chunks = -(-len(text) // CHUNK)
    db.execute("DELETE FROM original_chunks WHERE sha256 = ?", (sha256,))
    db.executemany(  # a generator: one chunk in memory at a time
        "INSERT INTO original_chunks (sha256, n, text, crc) VALUES (?, ?, ?, ?)",
        (
            (sha256, n, piece, _chunk_crc(sha256, n, piece))
            for n, piece in ((n, text[n * CHUNK : (n + 1) * CHUNK]) for n in range(chunks))
        ),
    )
    db.execute(
        "INSERT OR REPLACE INTO originals (sha256, chars, chunks, crc) VALUES (?, ?, ?, ?)",
        (sha256, len(text), chunks, _head_crc(sha256, len(text), chunks)),
    )


MIGRATIONS: list[tuple[str, Callable[[sqlite3.Connection], None]]] = [
    ("m001_initial", _m1_initial),
    ("m002_append_only", _m2_append_only),
    ("m003_pointers", _m3_pointers),
    ("m004_threads", _m4_threads),
    ("m005_original_index", _m5_original_index),
    ("m006_pointers_pending", _m6_pointers_pending),
    ("m007_run_choices", _m7_run_choices),
    ("m008_originals_once", _m8_originals_once),
]
# Characters per stored chunk of an original: a slice reads the few chunks its
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


def _m11_context_packs(db: sqlite3.Connection) -> None:
    """One context pack per model call (runtime/context/packs.py), in call order per run.

    `body` is the pack's canonical JSON without its run id and pack id (packs.canonical_bytes),
    what a ledger hashes; `pack_id` is `pk_` and the first 16 hex digits of its sha256.
    """
    db.execute(
        "CREATE TABLE run_context_packs (run_id TEXT NOT NULL, seq INTEGER NOT NULL,"
        " step_id TEXT NOT NULL, pack_id TEXT NOT NULL, body TEXT NOT NULL,"
        " PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
    )


MIGRATIONS += [("m011_context_packs", _m11_context_packs)]


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


# The provenance ledger (runtime/engine/ledger.py): written in the transactions below.
MIGRATIONS += [("m012_provenance_ledger", _ledger.migrate)]


def _m13_blobs(db: sqlite3.Connection) -> None:
    """Large strings of inputs and variables stored once, by content (runtime/engine/blobs.py).

    Their text goes into the originals' checksummed chunks (shared with pointers: the same
    sha256 is one copy); `run_blobs` says which row references which, so a variable's old
    value is dropped when nothing references it any more. Rows stored before keep their JSON.
    """
    db.execute(
        "CREATE TABLE run_blobs (run_id TEXT NOT NULL, row TEXT NOT NULL, sha256 TEXT NOT NULL,"
        " PRIMARY KEY (run_id, row, sha256)) WITHOUT ROWID"
    )
    db.execute("CREATE INDEX run_blobs_sha ON run_blobs (sha256)")
    db.execute("CREATE INDEX IF NOT EXISTS run_pointers_sha ON run_pointers (sha256)")


MIGRATIONS += [("m013_blobs", _m13_blobs)]

# A checkpoint's ledger entry kept in its last event's row (runtime/engine/ledger.py).
MIGRATIONS += [("m014_ledger_in_events", _ledger.migrate_events)]


def _m15_subjects(db: sqlite3.Connection) -> None:
    """Who each run answers (issue 28): the subject in its canonical JSON (docs/access.md).

    The subject is also in the run's inputs, which the ledger covers and a resume reads;
    this row is the record a reader lists runs by. Runs stored before have none (they
    were anonymous unless their inputs named one).
    """
    db.execute(
        "CREATE TABLE run_subjects (run_id TEXT PRIMARY KEY, subject TEXT NOT NULL) WITHOUT ROWID"
    )


MIGRATIONS += [("m015_subjects", _m15_subjects)]


def _put_blobs(db: sqlite3.Connection, run_id: str, row: str, found: Mapping[str, str]) -> None:
    """A row's large strings (sha256 -> text), each written once, and the row's references.

    The references the row held before are replaced; a text nothing references any more
    (no row, no pointer) is deleted.
    """
    old = {
        s
        for (s,) in db.execute(
            "SELECT sha256 FROM run_blobs WHERE run_id = ? AND row = ?", (run_id, row)
        )
    }
    for sha, text in found.items():
        if db.execute("SELECT 1 FROM originals WHERE sha256 = ?", (sha,)).fetchone() is None:
            _write_text(db, sha, text)
    db.execute("DELETE FROM run_blobs WHERE run_id = ? AND row = ?", (run_id, row))
    db.executemany(
        "INSERT INTO run_blobs (run_id, row, sha256) VALUES (?, ?, ?)",
        [(run_id, row, sha) for sha in found],
    )
    for sha in old - set(found):
        if not db.execute(
            "SELECT 1 FROM run_blobs WHERE sha256 = ? UNION ALL"
            " SELECT 1 FROM run_pointers WHERE sha256 = ? LIMIT 1",
            (sha, sha),
        ).fetchone():
            db.execute("DELETE FROM original_chunks WHERE sha256 = ?", (sha,))
            db.execute("DELETE FROM original_index WHERE sha256 = ?", (sha,))
            db.execute("DELETE FROM originals WHERE sha256 = ?", (sha,))


class SqliteRunStore:
    """The default run store."""

    def __init__(
        self,
        path: str | None = None,
        *,
        create: bool = True,
        durability: str = "normal",
        ledger: bool = True,
        seal_every: int = _ledger.SEAL_EVERY,
    ) -> None:
        """Open the store; with create=False (the reading commands) a missing file is refused.

        `durability` applies to runs that do not choose their own (see the module doc).
        `ledger` False writes no provenance ledger (benchmarks; `runtime verify` then finds
        none); the signing key is read from $RUNTIME_LEDGER_KEY once, here. `seal_every`:
        a checkpoint entry at least every this many checkpoints (docs/packs.md, "Sealing").
        """
        if durability not in DURABILITY:
            raise StoreError(
                f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}",
                code="DURABILITY_UNKNOWN",
            )
        self.durability = durability
        if isinstance(seal_every, bool) or not isinstance(seal_every, int) or seal_every < 1:
            raise StoreError(
                f"seal_every must be a whole number of checkpoints of at least 1, got "
                f"{seal_every!r}",
                code="LEDGER_SEAL_EVERY_INVALID",
            )
        self._ledger = _ledger.LedgerWriter(key_from_env(), seal_every) if ledger else None
        # (run, pack seq) -> (step id, pack id, sha256 of the body stored): see save_pack
        self._pack_digests: dict[tuple[str, int], tuple[str, str, str]] = {}
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
        try:
            self._tx(self._migrate)
        except ValueError as exc:  # undecodable names in a damaged migrations table
            raise StoreError(f"cannot open run store {self.path}: {exc}") from exc

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
            except (sqlite3.Error, ValueError) as exc:  # ValueError: a damaged schema
                raise StoreError(f"cannot open run store {self.path}: {exc}") from exc
            self._local.conn = conn
            self._local.durability = self.durability
        return conn

    def _durable(self, durability: str | None = None) -> sqlite3.Connection:
        """The thread's connection, set to the durability wanted (the store's by default)."""
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
        return conn

    def _tx(self, fn: Callable[[sqlite3.Connection], Any], durability: str | None = None) -> Any:
        """Run fn in an IMMEDIATE transaction, retrying while another writer holds the lock."""
        conn = self._durable(durability)
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
            except sqlite3.DatabaseError as exc:  # a damaged file: coded, never a traceback
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise StoreError(f"run store {self.path}: {exc}") from exc
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result
        raise StoreError(f"run store {self.path} stayed locked")

    def _ledgered_tx(
        self, run_id: str, fn: Callable[[sqlite3.Connection], Any], durability: str | None
    ) -> Any:
        """A transaction that appends to a run's ledger: its head is kept only once committed."""
        try:
            result = self._tx(fn, durability)
        except BaseException:
            if self._ledger is not None:
                self._ledger.settle(run_id, committed=False)
            raise
        if self._ledger is not None:
            self._ledger.settle(run_id, committed=True)
        return result

    @staticmethod
    def _migrate(db: sqlite3.Connection) -> None:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and "migrations" not in tables:
            # Another program's database (an index given as --store, a typo): never add the
            # run store's tables to it.
            raise StoreError(
                f"not a run store: it holds other tables ({', '.join(sorted(tables)[:5])})"
            )
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
        subject = json.dumps(subject_of(inputs).to_dict(), sort_keys=True)
        # Large strings stored once by content, not in the row's JSON (blobs.py, m013).
        inputs_text, input_blobs = _blobs.dumps(inputs)

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
            db.execute("INSERT INTO run_inputs VALUES (?, ?)", (run_id, inputs_text))
            if input_blobs:
                _put_blobs(db, run_id, "inputs", input_blobs)
            if data:
                db.executemany(_ledger.EVENT_INSERT, _ledger.with_entry(data, None))
            if choices is not None:
                db.execute("INSERT INTO run_choices VALUES (?, ?)", (run_id, json.dumps(choices)))
            db.execute("INSERT INTO run_subjects VALUES (?, ?)", (run_id, subject))
            if self._ledger is not None:
                own, batch = _ledger.event_items(events or [], data)
                first = _ledger.run_content(run_id, pipeline, now, inputs_text, batch)
                self._ledger.append(db, run_id, [("run", first), *own])

        self._ledgered_tx(run_id, fn, durability)
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
        blobs: dict[str, dict[str, str]] = {}  # variable -> its large strings (blobs.py)
        removed: list[tuple[str, str]] = []
        names = variables.keys() if changed is None else changed
        for name in names:
            if name not in variables:
                if name in known:
                    removed.append((run_id, name))
                continue
            text, found = _blobs.dumps(variables[name], sort_keys=True)
            digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
            if known.get(name) != digest:
                rows.append((run_id, name, digest, text))
                if found:
                    blobs[name] = found
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
                # An update in place keeps the row (its rowid): `load` lists the variables in
                # the order they were first set, as the uninterrupted run's dict has them.
                db.executemany(
                    "INSERT INTO run_vars VALUES (?, ?, ?, ?) ON CONFLICT (run_id, name) "
                    "DO UPDATE SET hash = excluded.hash, value = excluded.value",
                    rows,
                )
            if removed:
                db.executemany("DELETE FROM run_vars WHERE run_id = ? AND name = ?", removed)
            for name in [r[1] for r in rows] + [n for _, n in removed]:
                # Its large strings, and those of the value it replaces dropped when unused.
                found = blobs.get(name)
                if (
                    found
                    or db.execute(
                        "SELECT 1 FROM run_blobs WHERE run_id = ? AND row = ? LIMIT 1",
                        (run_id, "var " + name),
                    ).fetchone()
                ):
                    _put_blobs(db, run_id, "var " + name, found or {})
            if new_steps:
                db.executemany("INSERT OR REPLACE INTO run_steps VALUES (?, ?, ?)", new_steps)
            if new_messages:
                db.executemany(
                    "INSERT OR REPLACE INTO run_threads VALUES (?, ?, ?, ?)", new_messages
                )
            (stored_seq,) = db.execute(
                "INSERT INTO checkpoints (run_id, position, engine, event_seq, steps, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(run_id) DO UPDATE"
                " SET position = excluded.position, engine = excluded.engine,"
                " event_seq = max(event_seq, excluded.event_seq), steps = excluded.steps,"
                " updated_at = excluded.updated_at RETURNING event_seq",
                (run_id, position, state, seq, engine.get("step_count", 0), time.time()),
            ).fetchone()
            # The pointers stored since the last checkpoint are the run's now (see m006).
            made = db.execute(
                "DELETE FROM run_pointers_pending WHERE run_id = ? RETURNING pointer_id", (run_id,)
            ).fetchall()
            entry = None
            if self._ledger is not None:
                record = (
                    events, data, rows, removed, new_steps, new_messages, made,
                    position, state, stored_seq, engine.get("step_count", 0),
                )  # fmt: skip
                entry = self._ledger.checkpoint(
                    db,
                    run_id,
                    record,
                    status=status,
                    packs=self._pack_digests,
                    last_in_event=bool(data),  # in a page this transaction writes anyway
                )
            if data:
                db.executemany(_ledger.EVENT_INSERT, _ledger.with_entry(data, entry))
            if status != "running":  # a running run's row already says so (set_status)
                db.execute("UPDATE runs SET status = ? WHERE id = ?", (status, run_id))

        self._ledgered_tx(run_id, fn, durability)
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
        output_text = json.dumps(output)
        error_text = json.dumps(error) if error else None

        def fn(db: sqlite3.Connection) -> None:
            db.execute(
                "UPDATE runs SET status = ?, output = ?, error = ?, updated_at = ? WHERE id = ?",
                (status, output_text, error_text, time.time(), run_id),
            )
            if self._ledger is not None:
                self._ledger.seal(db, run_id)  # checkpoints not sealed yet, before the end
                end = _ledger.end_content(status, output_text, error_text)
                self._ledger.append(db, run_id, [("end", end)])

        self._ledgered_tx(run_id, fn, durability)

    def rewind(self, run_id: str) -> None:
        """Forget what a run stored after its last checkpoint (before resuming it).

        A step killed before its checkpoint runs again; the pointers and context packs it
        stored are dropped (the originals stay, stored by content), so it finds the run as
        the checkpoint left it.
        """

        def fn(db: sqlite3.Connection) -> None:
            db.execute(
                "DELETE FROM run_pointers WHERE run_id = ? AND pointer_id IN"
                " (SELECT pointer_id FROM run_pointers_pending WHERE run_id = ?)",
                (run_id, run_id),
            )
            db.execute("DELETE FROM run_pointers_pending WHERE run_id = ?", (run_id,))
            # Its context packs too: those no checkpointed CONTEXT_PACK event names.
            db.execute(
                "DELETE FROM run_context_packs WHERE run_id = ? AND seq > (SELECT"
                " coalesce(max(json_extract(data, '$.pack_seq')), 0) FROM events"
                " WHERE run_id = ? AND type = 'CONTEXT_PACK')",
                (run_id, run_id),
            )

        self._tx(fn)
        # Checkpoints written after the run's last ledger entry (a batch the kill left
        # unsealed) are sealed now, marked late, before the run goes on.
        self.seal_tail(run_id, "resume")

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

    def subject(self, run_id: str) -> dict[str, Any] | None:
        """The subject a run answers, as recorded (m015_subjects); None: a run stored before."""
        row = (
            self._conn()
            .execute("SELECT subject FROM run_subjects WHERE run_id = ?", (run_id,))
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

    @_reader
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
        read: dict[tuple[str, int], str] = {}  # an input and a variable share one string

        def blob(sha: str, chars: int) -> str:
            if (sha, chars) not in read:
                read[sha, chars] = self._blob(sha, chars)
            return read[sha, chars]

        for name, digest, value in db.execute(
            "SELECT name, hash, value FROM run_vars WHERE run_id = ? ORDER BY rowid", (run_id,)
        ):
            variables[name] = _blobs.loads(value, blob)
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
        inputs = _blobs.loads(row[2], blob) if row[2] is not None else {}
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
    @_reader
    def run_file(self, run_id: str) -> str:
        """The pipeline file a run was started from."""
        row = self._conn().execute("SELECT file FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
        return str(row[0])

    @_reader
    def runs(
        self,
        limit: int = 50,
        *,
        status: str | None = None,
        pipeline: str | None = None,
        run_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Recent runs, newest first; only those with this status, pipeline name and id when given.

        A `running` run whose process is gone (runtime/engine/owner.py) is listed as
        `interrupted`, and `status="interrupted"` selects those.
        """
        where, args = [], []
        stored = "running" if status == "interrupted" else status
        for column, value in (("status", stored), ("pipeline", pipeline), ("id", run_id)):
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
    # Every read is checked against what was stored (m008): a pointer row, an original's
    # head row, each chunk and each offset index carry a CRC-32 bound to what they are,
    # and a whole original is checked against its sha256. Damage is STORE_ERROR, never a
    # wrong slice; SQLite's own errors on a damaged file are STORE_ERROR too.
    def put_original(self, run_id: str, pointer_id: str, sha256: str, kind: str, text: str) -> None:
        """Store an original once (by sha256), with its offset index, and the run's pointer."""
        with self._reading():
            known, unindexed = (
                self._conn()
                .execute(
                    "SELECT EXISTS (SELECT 1 FROM originals WHERE sha256 = ?),"
                    " NOT EXISTS (SELECT 1 FROM original_index WHERE sha256 = ?)"
                    " AND EXISTS (SELECT 1 FROM run_blobs WHERE sha256 = ?)",
                    (sha256, sha256, sha256),
                )
                .fetchone()
            )
        # Built outside the write lock; also for a text stored as an input or variable's
        # value (m013), which was stored without one.
        index = index_for(kind, text) if not known or unindexed else None

        def fn(db: sqlite3.Connection) -> None:
            # Checked again under the lock: a stored value's text nothing referenced may
            # have been dropped since (m013).
            if (
                not known
                or not db.execute("SELECT 1 FROM originals WHERE sha256 = ?", (sha256,)).fetchone()
            ):
                _write_text(db, sha256, text)
            if index is not None:
                self._write_index(db, sha256, index)
            db.execute(
                "INSERT OR IGNORE INTO run_pointers (run_id, pointer_id, sha256, kind, crc)"
                " VALUES (?, ?, ?, ?, ?)",
                (run_id, pointer_id, sha256, kind, _pointer_crc(run_id, pointer_id, sha256, kind)),
            )

        self._tx(fn)

    @staticmethod
    def _write_index(db: sqlite3.Connection, sha256: str, index: bytes) -> None:
        db.execute(
            "INSERT OR REPLACE INTO original_index (sha256, offsets, crc) VALUES (?, ?, ?)",
            (sha256, index, _index_crc(sha256, index)),
        )

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """SQLite's errors on a damaged or unreadable file as STORE_ERROR."""
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"run store {self.path}: {exc} (store damaged?)") from exc

    def _damaged(self, what: str, why: str) -> StoreError:
        return StoreError(f"run store {self.path}: {what}: {why} (store damaged)")

    def _pointer(self, run_id: str, pointer_id: str) -> tuple[str, str, int, int] | None:
        """(kind, sha256, chars, chunks) of a run's pointer, checked; None without it."""
        with self._reading():
            row = (
                self._conn()
                .execute(
                    "SELECT p.sha256, p.kind, p.crc, o.chars, o.chunks, o.crc FROM run_pointers p"
                    " LEFT JOIN originals o ON o.sha256 = p.sha256"
                    " WHERE p.run_id = ? AND p.pointer_id = ?",
                    (run_id, pointer_id),
                )
                .fetchone()
            )
        if row is None:
            return None
        sha, kind, crc, chars, chunks, head = row
        if not (isinstance(sha, str) and isinstance(kind, str)) or crc != _pointer_crc(
            run_id, pointer_id, sha, kind
        ):
            raise self._damaged(pointer_id, "its pointer row fails its checksum")
        if chars is None:
            raise self._damaged(pointer_id, f"its original {sha} is missing")
        if (
            not (isinstance(chars, int) and isinstance(chunks, int))
            or head != _head_crc(sha, chars, chunks)
            or chunks != -(-chars // CHUNK)
        ):
            raise self._damaged(pointer_id, "its original's row fails its checksum")
        return kind, sha, chars, chunks

    def _chunks(
        self, pointer_id: str, sha: str, first: int, last: int, chunks: int
    ) -> Iterator[str]:
        """Chunks first..last of an original, each checked (number, length and CRC)."""
        with self._reading():
            rows = self._conn().execute(
                "SELECT n, text, crc FROM original_chunks WHERE sha256 = ? AND n BETWEEN ? AND ?"
                " ORDER BY n",
                (sha, first, last),
            )
            expected = first
            for n, text, crc in rows:
                if n != expected:
                    raise self._damaged(pointer_id, f"chunk {expected} of its original is missing")
                if (
                    not isinstance(text, str)
                    or crc != _chunk_crc(sha, n, text)
                    or (n < chunks - 1 and len(text) != CHUNK)
                ):
                    raise self._damaged(pointer_id, f"chunk {n} of its original fails its checksum")
                expected += 1
                yield text
        if expected != last + 1:
            raise self._damaged(pointer_id, f"chunk {expected} of its original is missing")

    def _blob(self, sha: str, chars: int) -> str:
        """A large string of an input or variable (blobs.py), checked against its sha256."""
        what = f"stored value {sha[:16]}"
        with self._reading():
            head = (
                self._conn()
                .execute("SELECT chars, chunks, crc FROM originals WHERE sha256 = ?", (sha,))
                .fetchone()
            )
        if head is None:
            raise self._damaged(what, "its text is missing")
        if (
            head[0] != chars
            or head[2] != _head_crc(sha, chars, head[1])
            or head[1] != -(-chars // CHUNK)
        ):
            raise self._damaged(what, "its row fails its checksum")
        digest = hashlib.sha256()
        parts = []
        for piece in self._chunks(what, sha, 0, head[1] - 1, head[1]):
            digest.update(piece.encode("utf-8", "surrogatepass"))
            parts.append(piece)
        if digest.hexdigest() != sha:
            raise self._damaged(what, "its text is not the text stored")
        text = "".join(parts)
        if len(text) != chars:
            raise self._damaged(what, "its text is not the text stored")
        return text

    @_reader
    def get_original(self, run_id: str, pointer_id: str) -> tuple[str, str] | None:
        """(kind, text) of a run's pointer, or None; the text checked against its sha256."""
        found = self._pointer(run_id, pointer_id)
        if found is None:
            return None
        kind, sha, chars, chunks = found
        digest = hashlib.sha256()
        parts = []
        for piece in self._chunks(pointer_id, sha, 0, chunks - 1, chunks):
            digest.update(piece.encode("utf-8", "surrogatepass"))
            parts.append(piece)
        text = "".join(parts)
        if len(text) != chars or digest.hexdigest() != sha:
            raise self._damaged(pointer_id, "its original's text is not the text stored")
        return kind, text

    @_reader
    def original_size(self, run_id: str, pointer_id: str) -> int | None:
        """Characters of a run's pointer's original, or None without the pointer."""
        found = self._pointer(run_id, pointer_id)
        return None if found is None else found[2]

    @_reader
    def get_index(self, run_id: str, pointer_id: str) -> tuple[str, bytes | None] | None:
        """(kind, stored offset index or None) of a run's pointer, or None; the index checked."""
        found = self._pointer(run_id, pointer_id)
        if found is None:
            return None
        kind, sha, _, _ = found
        with self._reading():
            row = (
                self._conn()
                .execute("SELECT offsets, crc FROM original_index WHERE sha256 = ?", (sha,))
                .fetchone()
            )
        if row is None:
            return kind, None
        if not isinstance(row[0], bytes) or row[1] != _index_crc(sha, row[0]):
            raise self._damaged(pointer_id, "its offset index fails its checksum")
        return kind, row[0]

    def put_index(self, run_id: str, pointer_id: str, text: str, index: bytes) -> None:
        """Keep the offset index built late for an original (stored before m005)."""
        found = self._pointer(run_id, pointer_id)
        if found is not None:
            sha = found[1]
            self._tx(lambda db: self._write_index(db, sha, index))

    @_reader
    def read_original(self, run_id: str, pointer_id: str, start: int, end: int) -> str:
        """Characters start..end of a pointer's original, read from the chunks they span."""
        found = self._pointer(run_id, pointer_id)
        if found is None:
            raise StoreError(f"run store {self.path}: run {run_id!r} has no pointer {pointer_id}")
        _, sha, chars, chunks = found
        end = min(end, chars)
        if end <= start:
            return ""
        first, last = start // CHUNK, (end - 1) // CHUNK
        text = "".join(self._chunks(pointer_id, sha, first, last, chunks))
        return text[start - first * CHUNK : end - first * CHUNK]

    @_reader
    def pointers(self, run_id: str) -> list[dict[str, Any]]:
        """A run's pointers (id, sha256, kind, characters), in id order, each row checked."""
        with self._reading():
            ids = [
                p
                for (p,) in self._conn().execute(
                    "SELECT pointer_id FROM run_pointers WHERE run_id = ? ORDER BY pointer_id",
                    (run_id,),
                )
            ]
        out = []
        for pointer_id in ids:
            found = self._pointer(run_id, pointer_id)
            if found is not None:
                kind, sha, chars, _ = found
                out.append({"pointer_id": pointer_id, "sha256": sha, "kind": kind, "chars": chars})
        return out

    # --- context packs (runtime/context/packs.py) --------------------------------

    def save_pack(
        self,
        run_id: str,
        pack: Mapping[str, Any],
        body: bytes | None = None,
        sha256: str | None = None,
    ) -> int:
        """Store a model call's pack after the run's others; its sequence number (1, 2, ...).

        `body`: the pack's canonical bytes when the caller has them (packs.canonical_bytes),
        `sha256` their SHA-256: the checkpoint's ledger entry for the pack takes it from
        here instead of reading the row back and hashing it again.
        """
        from runtime.context.packs import canonical_bytes

        text = (body if body is not None else canonical_bytes(pack)).decode(
            "utf-8", "surrogatepass"
        )

        # One statement, so one implicit transaction (no BEGIN ... COMMIT round): the number
        # is taken and the row written atomically.
        try:
            (seq,) = (
                self._durable()
                .execute(
                    "INSERT INTO run_context_packs SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ?"
                    " FROM run_context_packs WHERE run_id = ? RETURNING seq",
                    (run_id, str(pack.get("step_id")), str(pack.get("pack_id")), text, run_id),
                )
                .fetchone()
            )
        except sqlite3.DatabaseError as exc:  # a damaged file: coded, never a traceback
            raise StoreError(f"run store {self.path}: {exc}") from exc
        if sha256 is not None and body is not None and self._ledger is not None:
            with self._lock:  # taken (popped) by the checkpoint that names the pack
                self._pack_digests[(run_id, int(seq))] = (
                    str(pack.get("step_id")),
                    str(pack.get("pack_id")),
                    sha256,
                )
        return int(seq)

    @_reader
    def packs(self, run_id: str, step_id: str | None = None) -> list[dict[str, Any]]:
        """A run's packs in call order (one step's with step_id), each with its `seq`."""
        sql = "SELECT seq, pack_id, body FROM run_context_packs WHERE run_id = ?"
        args: tuple[Any, ...] = (run_id,)
        if step_id is not None:
            sql, args = sql + " AND step_id = ?", (run_id, step_id)
        with self._reading():
            db = self._conn()
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
            rows = db.execute(sql + " ORDER BY seq", args).fetchall()
        out = []
        for seq, pack_id, body in rows:
            try:
                pack = json.loads(body)
            except (TypeError, ValueError, RecursionError) as exc:
                raise self._damaged(f"pack {seq} of run {run_id}", f"not JSON ({exc})") from exc
            if not isinstance(pack, dict):
                raise self._damaged(f"pack {seq} of run {run_id}", "not an object")
            out.append({**pack, "run_id": run_id, "pack_id": pack_id, "seq": seq})
        return out

    @staticmethod
    def _thread_counts(db: sqlite3.Connection, run_id: str) -> dict[str, int]:
        return dict(
            db.execute(
                "SELECT thread_id, count(*) FROM run_threads WHERE run_id = ? GROUP BY thread_id",
                (run_id,),
            )
        )

    @_reader
    def threads(
        self, run_id: str, db: sqlite3.Connection | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """A run's conversation threads as checkpointed: thread id -> messages in order."""
        out: dict[str, list[dict[str, Any]]] = {}
        with self._reading():
            rows = (
                (db or self._conn())
                .execute(
                    "SELECT thread_id, message FROM run_threads WHERE run_id = ? ORDER BY thread_id, n",
                    (run_id,),
                )
                .fetchall()
            )
        for tid, text in rows:
            try:
                message = json.loads(text)
            except (TypeError, ValueError, RecursionError) as exc:
                raise self._damaged(f"thread {tid} of run {run_id}", f"not JSON ({exc})") from exc
            if not isinstance(message, dict):
                raise self._damaged(f"thread {tid} of run {run_id}", "a message is no object")
            out.setdefault(tid, []).append(message)
        return out

    @_reader
    def events(self, run_id: str) -> list[dict[str, Any]]:
        """A run's trace events in order, each naming its run (`run_id`).

        Each event's JSON is checked against its row (seq, type, step) and to be an
        object: a damaged store is STORE_ERROR, never a traceback in `runtime trace`.
        """
        with self._reading():
            db = self._conn()
            if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
            rows = db.execute(
                "SELECT seq, type, step_id, data FROM events WHERE run_id = ? ORDER BY seq",
                (run_id,),
            ).fetchall()
        out = []
        for seq, kind, step_id, data in rows:
            try:
                event = json.loads(data)
            except (TypeError, ValueError, RecursionError) as exc:
                raise self._damaged(f"event {seq} of run {run_id}", f"not JSON ({exc})") from exc
            if (
                not isinstance(event, dict)
                or event.get("seq") != seq
                or event.get("type") != kind
                or event.get("step_id") != step_id
            ):
                raise self._damaged(f"event {seq} of run {run_id}", "it disagrees with its row")
            # Events stored before they carried run_id get it here: every reader sees one shape.
            out.append({"run_id": run_id, **event})
        return out

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def verify_ledger(self, run_id: str, key: bytes | None) -> _ledger.Report:
        """Recompute a run's provenance ledger from its stored rows (`runtime verify`).

        Read on a connection of its own that hands TEXT back as bytes (a changed byte never
        fails a decode) in one snapshot; a damaged file is STORE_ERROR, no run RUN_NOT_FOUND.
        Rows a run that is not running wrote after its last entry (a run killed mid-batch)
        are sealed first (`seal_tail`), and reported as sealed late (LEDGER_SEALED_LATE).
        """
        report = self._verify(run_id, key)
        if report.unsealed is not None and self.seal_tail(run_id, "verify"):
            report = self._verify(run_id, key)
        return report

    def _verify(self, run_id: str, key: bytes | None) -> _ledger.Report:
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            try:
                db.text_factory = bytes
                row = db.execute("SELECT status, owner FROM runs WHERE id = ?", (run_id,))
                found = row.fetchone()
                if found is None:
                    raise RunError(f"no run {run_id!r} in {self.path}", code="RUN_NOT_FOUND")
                db.execute("BEGIN")  # one snapshot of every table
                return _ledger.verify_run(db, run_id, key, self._live(found))
            finally:
                db.close()
        except (sqlite3.Error, RecursionError) as exc:
            raise StoreError(f"run store {self.path}: verify: {exc} (store damaged?)") from exc

    @staticmethod
    def _live(row: tuple[Any, Any]) -> bool:
        """Whether a run (status, owner as bytes) is running in a process that still runs."""
        status, owner = (v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in row)
        return status == "running" and not is_gone(_owner(owner))

    def seal_tail(self, run_id: str, why: str) -> bool:
        """Seal the rows a run wrote after its last ledger entry (checkpoints of a batch a
        kill left unsealed) with one checkpoint entry marked `late` (why: resume, verify).
        True when there was such a tail. The rows were unprotected until now: verify reports
        the entry as LEDGER_SEALED_LATE, always."""
        if self._ledger is None:
            return False
        writer = self._ledger
        sealed = False
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                db.text_factory = bytes  # read as verify reads
                tail = _ledger.verify_run(db, run_id, None, live=False).unsealed
                content = _ledger.tail_content(db, run_id, tail, why) if tail else None
                db.text_factory = str
                writer.forget(run_id)  # the head and batch are read from the rows
                if content is not None:
                    writer.append(db, run_id, [("checkpoint", content)])
                    sealed = True
                db.execute("COMMIT")
                writer.settle(run_id, committed=True)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                writer.settle(run_id, committed=False)
                raise
            finally:
                db.close()
        except (sqlite3.Error, RecursionError) as exc:
            raise StoreError(f"run store {self.path}: sealing {run_id}: {exc}") from exc
        return sealed
